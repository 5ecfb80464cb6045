#!/usr/bin/env python3
"""Marks each row of a scripts/bench.sh table against the committed baseline
(benches/baseline.txt) and against the goal the row states.

With BENCH_BASELINE, another baseline (scripts/bench.sh names benches/baseline-real.txt for
BENCH_SERVER=real). A row is matched by its bench and its text with every number taken out; its figure is the
first ratio it prints (a number after "ratio", or before "×"/"x"). A figure that moved
more than the noise (BENCH_NOISE, a fraction: 0.15 unless set) from the baseline's is
marked with the change; a row whose figure misses its "(goal >= N)" / "(goal ≤ N)" is
marked too. Rows the baseline lacks are marked new.

  bench-compare.py TABLE            marks the rows (prints the table again)
  bench-compare.py TABLE --save     makes TABLE the baseline
"""
import os
import re
import sys

BASELINE = os.environ.get("BENCH_BASELINE") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "benches", "baseline.txt"
)
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
FIGURE = re.compile(r"ratio[^0-9\n]{0,40}?([0-9]+(?:\.[0-9]+)?)|([0-9]+(?:\.[0-9]+)?)\s?[×x](?![0-9a-z])")
GOAL = re.compile(r"goal\s*(>=|≥|<=|≤)\s*([0-9]+(?:\.[0-9]+)?)")


def rows(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.startswith(("bench ", "------")):
                continue
            out.setdefault(key(line), line)
    return out


def key(line):
    return NUMBER.sub("#", line)


def figure(line):
    m = FIGURE.search(line)
    if not m:
        return None
    return float(m.group(1) or m.group(2))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    table = sys.argv[1]
    if sys.argv[2:] == ["--save"]:
        # The benches this table ran replace theirs; the others' rows stay.
        with open(table, encoding="utf-8") as f:
            new = [l for l in f.read().splitlines() if l.strip()]
        ran = {l.split()[0] for l in new if not l.startswith(("bench ", "------"))}
        old = []
        if os.path.exists(BASELINE):
            with open(BASELINE, encoding="utf-8") as f:
                old = [
                    l
                    for l in f.read().splitlines()
                    if l.strip() and not l.startswith(("bench ", "------")) and l.split()[0] not in ran
                ]
        with open(BASELINE, "w", encoding="utf-8") as f:
            f.write("\n".join(new[:2] + sorted(old + new[2:], key=lambda l: l.split()[0])) + "\n")
        print(f"bench: baseline saved to {os.path.relpath(BASELINE)}")
        return 0
    noise = float(os.environ.get("BENCH_NOISE", "0.15"))
    base = rows(BASELINE) if os.path.exists(BASELINE) else {}
    moved = missed = 0
    with open(table, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            marks = []
            now = figure(line)
            if line.strip() and not line.startswith(("bench ", "------")) and now is not None:
                was_line = base.get(key(line))
                was = figure(was_line) if was_line else None
                if was_line is None:
                    marks.append("new")
                elif was and abs(now - was) / was > noise:
                    marks.append(f"moved {100 * (now - was) / was:+.0f}% from {was:g}")
                    moved += 1
                goal = GOAL.search(line)
                if goal:
                    op, limit = goal.group(1), float(goal.group(2))
                    if (op in (">=", "≥") and now < limit) or (op in ("<=", "≤") and now > limit):
                        marks.append("misses its goal")
                        missed += 1
            print(line + (f"   [{'; '.join(marks)}]" if marks else ""))
    print()
    print(f"bench: {moved} rows moved beyond the noise ({noise:.0%}) from {os.path.relpath(BASELINE)}; {missed} miss their goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
