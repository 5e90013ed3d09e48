"""The tile_shapes rounds of a bench.log (scripts/gpu_tune.sh) as one table a head dim: each
variant's TFLOP/s at each point, round by round, as its ratio to the first variant of its kind
printed there (direction and softcap, as tile_shapes checks them: with TUNE_ONLY's usual order,
the library's), with a mark where max|diff| passes --diff (a wrong row, not a reordered sum).
A call's tables run to hundreds of lines; this is what decides a variant.

Usage: python3 scripts/tune_summary.py bench.log [--diff 1e-2]
"""
import argparse
import re
import sys
from collections import OrderedDict

# "<name> <point> <ms> <TFLOP/s> <max|diff|>[ sustained columns]"; names hold spaces, points not.
ROW = re.compile(
    r"^(?P<name>.+?)\s+(?P<point>\d+x\d+k|mixed|window2k|pad\d+%|small(?:gqa)?)\s+(?P<ms>\S+)\s+"
    r"(?P<tflops>\S+)\s+(?P<diff>\S+)(?:\s.*)?$")
ROUND = re.compile(r"^==== (tile_shapes\S*):")


def kind(name):
    """tile_shapes checks a variant against the first of its direction and softcap."""
    return ("fwd" in name, "softcap" in name)


def parse(lines):
    """[(round name, [(name, point, TFLOP/s, max|diff|)])] in the order printed."""
    rounds = []
    for line in lines:
        start = ROUND.match(line)
        if start:
            rounds.append((start.group(1), []))
            continue
        row = ROW.match(line.rstrip("\n"))
        if rounds and row and row.group("name") != "variant":
            try:
                tflops, diff = float(row.group("tflops")), float(row.group("diff"))
            except ValueError:
                continue
            rounds[-1][1].append((row.group("name"), row.group("point"), tflops, diff))
    return rounds


def blocks(rows):
    """A round's rows cut where a head dim starts again (its first point comes back), each as
    {point: [(name, TFLOP/s, ratio to its reference, max|diff|)]}."""
    out, block, reference, last_point = [], OrderedDict(), {}, None
    for name, point, tflops, diff in rows:
        if point != last_point:
            if point in block:  # the next head dim's first point
                out.append(block)
                block = OrderedDict()
            reference = {}
            last_point = point
        ref = reference.setdefault(kind(name), tflops)
        block.setdefault(point, []).append((name, tflops, tflops / ref if ref > 0 else 0.0, diff))
    if block:
        out.append(block)
    return out


def summarize(lines, diff_bound=1e-2):
    rounds = parse(lines)
    if not rounds:
        return "no tile_shapes round in the log\n"
    per_round = [(name, blocks(rows)) for name, rows in rounds]
    text = []
    for b in range(max(len(bl) for _, bl in per_round)):
        points = OrderedDict()
        for _, bl in per_round:
            if b < len(bl):
                for point in bl[b]:
                    points[point] = None
        names = OrderedDict()
        for _, bl in per_round:
            if b < len(bl):
                for entries in bl[b].values():
                    for name, *_ in entries:
                        names[name] = None
        text.append("variant | " + " | ".join(points) + "  (TFLOP/s and ratio, round by round; "
                    "! max|diff| > %g)" % diff_bound)
        for name in names:
            cells = []
            for point in points:
                parts = []
                for _, bl in per_round:
                    found = [e for e in (bl[b].get(point, []) if b < len(bl) else [])
                             if e[0] == name]
                    for _, tflops, ratio, diff in found:
                        mark = "!" if diff > diff_bound else ""
                        parts.append("%.1f %.3f%s" % (tflops, ratio, mark))
                cells.append(" / ".join(parts) if parts else "-")
            text.append(name + " | " + " | ".join(cells))
        text.append("")
    return "\n".join(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="bench.log of scripts/gpu_tune.sh")
    parser.add_argument("--diff", type=float, default=1e-2,
                        help="mark max|diff| above this (default 1e-2)")
    args = parser.parse_args()
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            sys.stdout.write(summarize(f, args.diff))
    except OSError as e:
        sys.exit("tune_summary: cannot read %s: %s" % (args.log, e.strerror))


if __name__ == "__main__":
    main()
