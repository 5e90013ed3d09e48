#!/usr/bin/env python3
"""The standalone benchmark's rounds in a bench.log (scripts/gpu_test.sh --baseline) as one table:
per case, the median over rounds of the forward's and both backward modes' TFLOP/s of the baseline
build and of this one, and this one's ratio to the baseline (1.00 = equal).

Usage: python3 scripts/bench_compare.py bench.log
"""
import re
import statistics
import sys
from collections import defaultdict

STEP = re.compile(r"^==== bench_(baseline|this)_\d+:")
COLUMNS = ("fwd", "det", "atom")  # TFLOP/s columns 4, 6, 8 of bench_attention_cuda's rows


def parse(lines):
    """{(build, case, column): [TFLOP/s per round]} and the cases in the order printed."""
    runs, cases, build = defaultdict(list), [], None
    for line in lines:
        start = STEP.match(line)
        if start:
            build = start.group(1)
            continue
        if line.startswith("===="):
            build = None
            continue
        fields = line.split()
        if build is None or len(fields) < 9 or fields[0] == "case":
            continue
        try:
            numbers = [float(f) for f in fields[-8:]]
        except ValueError:
            continue
        case = " ".join(fields[:-8])
        if case not in cases:
            cases.append(case)
        for column, value in zip(COLUMNS, (numbers[2], numbers[4], numbers[6])):
            runs[(build, case, column)].append(value)
    return runs, cases


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        runs, cases = parse(f)
    if not cases:
        print(f"bench_compare: no benchmark rounds in {argv[1]}")
        return 1
    print(f"{'case':<22}" + "".join(f"{c + ' base':>11}{c + ' this':>11}{'ratio':>7}"
                                     for c in COLUMNS))
    for case in cases:
        row = f"{case:<22}"
        for column in COLUMNS:
            base, this = runs.get(("baseline", case, column)), runs.get(("this", case, column))
            b = statistics.median(base) if base else float("nan")
            t = statistics.median(this) if this else float("nan")
            row += f"{b:11.1f}{t:11.1f}{t / b if base and b else float('nan'):7.3f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
