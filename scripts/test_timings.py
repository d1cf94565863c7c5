#!/usr/bin/env python3
"""Turn a timings file into the per-folder table and the slowest tests of ``tests/README.md``.

    STREAMWORKER_TEST_TIMINGS=/tmp/timings.jsonl make test
    python scripts/test_timings.py /tmp/timings.jsonl            # print the tables
    python scripts/test_timings.py /tmp/timings.jsonl --write    # replace them in tests/README.md

The timings file is written by the plugin ``tests/support/timings.py`` (one JSON line per test
phase). "wall" is setup + call + teardown of every test in the folder, summed: with one pytest
process it adds up to the run's wall time; "setup" is the part spent in fixtures (servers, JVMs,
databases), which is what sharing a server cuts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

BEGIN = "<!-- timings:begin (scripts/test_timings.py --write) -->"
END = "<!-- timings:end -->"


def load(path: Path) -> dict[str, dict[str, float]]:
    """nodeid -> {phase: seconds} (the last run of a phase wins, as for a rerun)."""
    tests: dict[str, dict[str, float]] = defaultdict(dict)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            tests[row["nodeid"]][row["when"]] = float(row["duration_s"])
    return tests


def folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def render(tests: dict[str, dict[str, float]], slowest: int = 20) -> str:
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for nodeid, phases in tests.items():
        row = per[folder(nodeid)]
        row[0] += 1
        row[1] += sum(phases.values())
        row[2] += phases.get("setup", 0.0)
    lines = [
        "| folder | tests | wall s | setup s |",
        "|---|---:|---:|---:|",
    ]
    total = [0, 0.0, 0.0]
    for name, (count, wall, setup) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| `{name}` | {int(count)} | {wall:.0f} | {setup:.0f} |")
        total = [total[0] + count, total[1] + wall, total[2] + setup]
    lines.append(f"| **all** | **{int(total[0])}** | **{total[1]:.0f}** | **{total[2]:.0f}** |")
    lines += ["", f"The {slowest} slowest tests (setup + call + teardown):", ""]
    lines += ["| test | s | of which setup |", "|---|---:|---:|"]
    ranked = sorted(tests.items(), key=lambda kv: -sum(kv[1].values()))[:slowest]
    for nodeid, phases in ranked:
        lines.append(
            f"| `{nodeid}` | {sum(phases.values()):.1f} | {phases.get('setup', 0.0):.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timings", type=Path, help="the file STREAMWORKER_TEST_TIMINGS named")
    parser.add_argument("--write", action="store_true", help="replace the table in tests/README.md")
    parser.add_argument(
        "--readme", type=Path, default=Path(__file__).parents[1] / "tests/README.md"
    )
    args = parser.parse_args(argv)
    table = render(load(args.timings))
    if not args.write:
        print(table)
        return 0
    text = args.readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"{args.readme}: no {BEGIN} ... {END} block to replace", file=sys.stderr)
        return 2
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    args.readme.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
