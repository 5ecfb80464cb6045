#!/usr/bin/env python3
"""Checks that the test pyramid stands the right way up: for every subsystem crate under
actors/ (all but the runtime), its in-process scenario tests (actors/<name>/tests/, run
against its fakes) outnumber its process tests (tests/<name>/ or tests/<name>.rs, which
start the bosun binary). A test is a `#[test]` or `#[tokio::test…]` attribute.

Prints one line per subsystem (`name: in-process N, process M`) and exits 1 when a
subsystem has as many process tests as in-process ones, or more. With `--quiet` it prints
only what fails."""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEST = re.compile(r"^\s*#\[(?:tokio::)?test\b", re.M)


def count(paths):
    return sum(len(TEST.findall(p.read_text())) for p in paths)


def rust_files(path):
    if path.is_dir():
        return sorted(path.rglob("*.rs"))
    return [path] if path.is_file() else []


def main():
    quiet = "--quiet" in sys.argv[1:]
    failed = False
    for crate in sorted((ROOT / "actors").iterdir()):
        if not (crate / "Cargo.toml").is_file() or crate.name == "runtime":
            continue
        inside = count(rust_files(crate / "tests"))
        process = count(rust_files(ROOT / "tests" / crate.name)) + count(
            rust_files(ROOT / "tests" / f"{crate.name}.rs")
        )
        wrong = process >= inside
        failed |= wrong
        if wrong or not quiet:
            verdict = "  ✗ process tests outnumber in-process ones" if wrong else ""
            print(f"{crate.name}: in-process {inside}, process {process}{verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
