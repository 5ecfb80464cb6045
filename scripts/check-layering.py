#!/usr/bin/env python3
"""Checks bosun's layering: no import cycle between the files of one crate, and crate
dependencies that run one way (src -> actors/* -> actors/runtime; no subsystem crate on
another; the Kubernetes layer (kube/) on no subsystem; the sandbox and the journal on no
bosun crate but the platform one (platform/), which stands on none), and no subsystem's
adapters in the binary (src/addon, src/lambda, src/deployer) importing another's (what
they share lives in the shared Kubernetes layer, the bosun-kube crate, or beside the
adapters in src/).

The binary's production code does not use the sandbox (the embedded API server is for
tests and local runs; what both need lives in bosun-platform): no file under src/ names
`bosun_sandbox` or `crate::sandbox`, outside its unit tests (`#[cfg(test)] mod tests`),
except src/sandbox_cli.rs, which holds exactly the `bosun sandbox` command and the API
server that `bosun run --sandbox` starts. Tests (tests/), benches and examples may use
the sandbox crate.

A file's dependencies are the sibling modules it names as `crate::<module>` (or
`super::<module>` from a child module). Prints each violation found and exits 1."""

import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = {  # crate dir -> bosun crates it may depend on
    ".": {"bosun-journal", "bosun-runtime", "bosun-kube", "bosun-addon", "bosun-lambda", "bosun-deployer", "bosun-sandbox", "bosun-platform"},
    "journal": {"bosun-platform"},
    "kube": {"bosun-runtime", "bosun-platform"},
    "sandbox": {"bosun-platform"},
    "platform": set(),
    "actors/runtime": set(),
    "actors/addon": {"bosun-journal", "bosun-runtime", "bosun-platform"},
    "actors/lambda": {"bosun-journal", "bosun-runtime", "bosun-platform"},
    "actors/deployer": {"bosun-journal", "bosun-runtime", "bosun-platform"},
}


# The binary's per-subsystem adapter folders, and the domain crate each wires.
ADAPTERS = {"addon": "bosun_addon", "lambda": "bosun_lambda", "deployer": "bosun_deployer"}


def adapter_imports() -> list[str]:
    """Imports of one subsystem's adapters (or domain crate) by another's adapters."""
    found = []
    for name in ADAPTERS:
        folder = ROOT / "src" / name
        for f in sorted(folder.rglob("*.rs")):
            text = re.sub(r"//[^\n]*", "", f.read_text())
            for other, domain in ADAPTERS.items():
                if other == name:
                    continue
                if re.search(rf"\bcrate::{other}\b", text) or re.search(rf"\b{domain}::", text):
                    found.append(f"{f.relative_to(ROOT)}: imports the {other} subsystem's code")
    return found


# The one file of the binary's production code allowed to use the sandbox crate.
SANDBOX_WIRING = "src/sandbox_cli.rs"
SANDBOX_IMPORT = re.compile(
    r"\bbosun_sandbox\s*::|\b(?:use|crate)\s+bosun_sandbox\b|\bcrate::sandbox\b"
    r"|\bcrate::\{[^}]*\bsandbox\b"
)


def sandbox_imports() -> list[str]:
    """Uses of the sandbox crate by the binary's production code, outside SANDBOX_WIRING."""
    found = []
    for f in sorted((ROOT / "src").rglob("*.rs")):
        rel = f.relative_to(ROOT).as_posix()
        if rel == SANDBOX_WIRING:
            continue
        text = f.read_text().split("#[cfg(test)]\nmod tests")[0]
        text = re.sub(r"//[^\n]*", "", text)
        # Names in strings (log targets) are no imports.
        text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
        if SANDBOX_IMPORT.search(text):
            found.append(f"{rel}: uses the sandbox crate (only {SANDBOX_WIRING} may)")
    return found


def modules_of(src: pathlib.Path) -> dict[str, pathlib.Path]:
    """Top-level modules of a crate: `foo.rs` or `foo/mod.rs` under src/."""
    mods = {}
    for p in src.iterdir():
        if p.suffix == ".rs" and p.stem not in ("lib", "main"):
            mods[p.stem] = p
        elif p.is_dir() and (p / "mod.rs").exists():
            mods[p.name] = p
    return mods


def text_of(path: pathlib.Path) -> str:
    files = [path] if path.is_file() else sorted(path.rglob("*.rs"))
    out = []
    for f in files:
        t = f.read_text()
        # Unit tests may reach anywhere in their crate.
        t = t.split("#[cfg(test)]\nmod tests")[0]
        # Comments name modules without depending on them.
        t = re.sub(r"//[^\n]*", "", t)
        out.append(t)
    return "\n".join(out)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, state, stack = [], {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return found


def main() -> int:
    bad = 0
    for crate, allowed in CRATES.items():
        cdir = ROOT / crate
        manifest = cdir / "Cargo.toml"
        if not manifest.exists():
            continue
        deps = tomllib.loads(manifest.read_text()).get("dependencies", {})
        bosun_deps = {d for d in deps if d.startswith("bosun-")}
        for d in sorted(bosun_deps - allowed):
            print(f"{crate}: depends on {d}, which it must not")
            bad += 1
        mods = modules_of(cdir / "src")
        graph = {}
        for name, path in mods.items():
            text = text_of(path)
            used = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
            for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
                used |= set(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
            graph[name] = {m for m in used if m in mods and m != name}
        for c in cycles(graph):
            print(f"{crate}: import cycle {' -> '.join(c)}")
            bad += 1
    for line in adapter_imports() + sandbox_imports():
        print(line)
        bad += 1
    if bad:
        return 1
    print("layering: ok (no import cycles; crate dependencies run one way; subsystem adapters apart; the sandbox only in src/sandbox_cli.rs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
