#!/usr/bin/env python3
"""The cheap guard of the image build (scripts/image-test.sh builds it, which the test
command does not): the Dockerfile's dependency layer must name every workspace member of
Cargo.toml, both in a `COPY <member>/Cargo.toml` line and in the loop that writes stub
sources, or `cargo fetch --locked` fails in the image with `failed to read
/src/<member>/Cargo.toml`; and the links by which the references' manifests start the
image (`/usr/bin/metacontroller`, `/addon-operator`) must be there. Prints what is missing and exits 1."""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
dockerfile = (ROOT / "Dockerfile").read_text()

copied = set(re.findall(r"^COPY (\S+)/Cargo\.toml \S+/?$", dockerfile, re.M))
copied.add(".") if re.search(r"^COPY Cargo\.toml Cargo\.lock", dockerfile, re.M) else None
loop = re.search(r"for member in ([^;]+); do", dockerfile)
stubbed = set(loop.group(1).split()) if loop else set()

problems = []
for member in members:
    if member not in copied:
        problems.append(f"Dockerfile: no `COPY {member}/Cargo.toml {member}/` for workspace member {member!r}")
    if member not in stubbed:
        problems.append(f"Dockerfile: workspace member {member!r} missing from the stub loop `for member in …`")
for extra in sorted((copied | stubbed) - set(members)):
    problems.append(f"Dockerfile: {extra!r} is not a workspace member of Cargo.toml")
# The references' manifests start the image by their own binaries' paths.
for link, whose in [("/usr/bin/metacontroller", "metacontroller's manifests"),
                    ("/addon-operator", "addon-operator's image and manifests")]:
    if not re.search(rf"^RUN ln -s \S+ {re.escape(link)}$", dockerfile, re.M):
        problems.append(f"Dockerfile: no `RUN ln -s … {link}`: {whose} run that path")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
