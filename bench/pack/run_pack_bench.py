"""Runs the packing benchmark and its Python peer in one go and prints the ratios.

    .venv/bin/python bench/pack/run_pack_bench.py [--binary build/bench/pack/pack_bench]
        [--peer-samples 1000000] [--sizes 1000000,10000000] [--profiles report,longtail]
        [--histogram-samples 16000000] [--repeats 3] [--json OUT.json]

1. For each profile, pack_bench writes its first --peer-samples lengths (seed 0, the lengths the
   benchmark packs) to a temporary file; the Python best-fit-decreasing peer
   (python_bfd_peer.py) packs them.
2. pack_bench times every algorithm on the profiles at --sizes, and the histogram packer on 16M
   lengths of the report profile.
3. The table gives samples per second (per CPU second, which a busy shared machine does not
   inflate, and per wall second) and the ratio to the peer on the same profile, with the targets:
   >= 100x the peer, histogram on 16M lengths < 0.1 s, bfd within 0.1% of the lower bound.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_bfd_peer  # noqa: E402

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--binary", default="build/bench/pack/pack_bench")
    ap.add_argument("--peer-samples", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--profiles", default="report,longtail")
    ap.add_argument("--histogram-samples", type=int, default=16_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} not found: build it (cmake --build build --target pack_bench) "
                 "or pass --binary")

    peers = {}
    with tempfile.TemporaryDirectory() as tmp:
        for profile in args.profiles.split(","):
            path = os.path.join(tmp, f"{profile}.int64")
            capacity = int(subprocess.run(
                [args.binary, "--dump-lengths", profile, str(args.peer_samples), path],
                check=True, capture_output=True, text=True).stdout)
            peers[profile] = python_bfd_peer.run(np.fromfile(path, dtype=np.int64), capacity)

    out = subprocess.run(
        [args.binary, "--json", "--sizes", args.sizes, "--profiles", args.profiles,
         "--repeats", str(args.repeats), "--histogram-samples", str(args.histogram_samples)],
        check=True, capture_output=True, text=True).stdout
    results = json.loads(out)

    for profile, peer in peers.items():
        print(f"Python best-fit-decreasing peer, {profile} profile, {peer['samples']} samples into "
              f"{peer['capacity']}: {peer['cpu_samples_per_second']:,.0f} samples/CPU-s, "
              f"{peer['samples_per_second']:,.0f} samples/s wall, {peer['rows']} rows, "
              f"{100 * (peer['rows'] - peer['lower_bound_rows']) / peer['lower_bound_rows']:.3f}% "
              "above the lower bound")
    print()
    header = (f"{'profile':9} {'algorithm':9} {'samples':>9} {'cpu s':>8} {'wall s':>8} "
              f"{'cpu s reused':>12} {'samples/cpu-s':>14} {'x peer':>8} {'above LB':>9} "
              f"{'padding':>8}")
    print(header)
    for r in results:
        above = 100 * (r["rows"] - r["lower_bound_rows"]) / max(1, r["lower_bound_rows"])
        ratio = r["cpu_samples_per_second"] / peers[r["profile"]]["cpu_samples_per_second"]
        print(f"{r['profile']:9} {r['algorithm']:9} {r['samples']:>9} {r['cpu_seconds']:8.4f} "
              f"{r['seconds']:8.4f} {r['cpu_seconds_reused']:12.4f} "
              f"{r['cpu_samples_per_second']:14,.0f} {ratio:7.0f}x {above:8.3f}% "
              f"{100 * r['padding_rate']:7.2f}%")

    print()
    for r in results:
        peer = peers[r["profile"]]
        if r["algorithm"] in ("ffd", "bfd", "histogram") and r["samples"] == peer["samples"]:
            ratio = r["cpu_samples_per_second"] / peer["cpu_samples_per_second"]
            wall = r["samples_per_second"] / peer["samples_per_second"]
            print(f"target >= 100x the peer, {r['profile']} {r['algorithm']} at {r['samples']} "
                  f"samples: {ratio:.0f}x per CPU second, {wall:.0f}x per wall second "
                  f"({'met' if ratio >= 100 else 'NOT met'})")
    big = [r for r in results if r["algorithm"] == "histogram"
           and r["samples"] == args.histogram_samples and r["profile"] == "report"]
    for r in big:
        print(f"target histogram {r['samples']} lengths < 0.1 s: {r['cpu_seconds']:.3f} CPU-s fresh, "
              f"{r['cpu_seconds_reused']:.3f} CPU-s with buffers reused, {r['seconds']:.3f} s wall "
              f"fresh ({'met' if r['cpu_seconds_reused'] < 0.1 else 'NOT met'} reused, "
              f"{'met' if r['cpu_seconds'] < 0.1 else 'NOT met'} fresh)")
    for r in results:
        if r["algorithm"] == "bfd" and r["profile"] == "report":
            gap = (r["rows"] - r["lower_bound_rows"]) / r["lower_bound_rows"]
            print(f"target bfd within 0.1% of the lower bound, {r['samples']} samples: "
                  f"{100 * gap:.3f}% ({'met' if gap <= 0.001 else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peers": peers, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
