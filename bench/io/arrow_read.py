"""Arrow input speed and memory: a Parquet file read into the planner against the same tokens from
.npy + offsets and against the pyarrow to_pylist route, same files, same run.

Writes ~--tokens int32 token ids (lengths log-normal around 500, 1..4096, ids < 32000) as
DATA.npy + DATA.offsets.npy, as Parquet (pyarrow's defaults: snappy, dictionary pages) and as an
uncompressed Arrow IPC (Feather) file. Each case runs in a fresh process (page cache warm, a first
untimed run each), best of --repeat, and reports seconds and the peak RSS it added over the
process after its imports (resource.getrusage ru_maxrss) against the int32 token bytes:
  npy        varpack.read_tokens(DATA.npy) + varpack.plan(lengths)       (mapped; every id checked)
  parquet    varpack.read_tokens(DATA.parquet) + varpack.plan(lengths)   (Arrow buffers, checked)
  feather    varpack.read_tokens(DATA.feather) + varpack.plan(lengths)   (mapped Arrow buffers)
  to_pylist  pyarrow.parquet.read_table + column.to_pylist() + varpack.plan of the lists' lengths
and the `varpack` command's `stats` on the Parquet file and on the .npy (wall time of the process:
the Parquet route runs the Python converter, see docs/ARCHITECTURE.md).

    .venv/bin/python bench/io/arrow_read.py --tokens 30000000 [--varpack build/varpack]
"""

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

CAPACITY = 4096

# Run in a child: time one read + plan and the peak RSS it added (KiB), as JSON on stdout.
CHILD = r"""
import json, resource, sys, time
import numpy as np, pyarrow.parquet as pq, varpack
case, path = sys.argv[1], sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
if case == "to_pylist":
    lists = pq.read_table(path, columns=["input_ids"]).column("input_ids").to_pylist()
    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    tokens = sum(int(n) for n in lengths)
else:
    data = varpack.read_tokens(path)
    lengths, tokens = data.lengths, data.num_tokens
plan = varpack.plan(lengths, capacity=%d)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "rss_kib": peak - before, "tokens": tokens, "rows": plan.num_rows}))
""" % CAPACITY


def write_inputs(folder, tokens, seed=0):
    import pyarrow as pa
    import pyarrow.feather
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(400), 0.8, size=tokens // 300), 1, CAPACITY).astype(np.int64)
    lengths = lengths[np.cumsum(lengths) <= tokens]
    flat = rng.integers(0, 32000, size=int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(folder / "data.npy", flat)
    np.save(folder / "data.offsets.npy", offsets)
    column = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))
    table = pa.table({"input_ids": column})
    pq.write_table(table, folder / "data.parquet")
    pyarrow.feather.write_feather(table, folder / "data.feather", compression="uncompressed")
    return len(lengths), int(lengths.sum())


def run_child(case, path, repeat):
    runs = []
    for i in range(repeat + 1):  # the first warms the page cache and is not counted
        out = subprocess.run([sys.executable, "-c", CHILD, case, str(path)], capture_output=True, text=True,
                             check=True)
        if i:
            runs.append(json.loads(out.stdout))
    return min(runs, key=lambda r: r["seconds"]), max(r["rss_kib"] for r in runs)


def time_command(args, repeat):
    best = float("inf")
    for i in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True)
        if i:
            best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=30_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--varpack", default="build/varpack")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        samples, tokens = write_inputs(folder, args.tokens)
        token_bytes = 4 * tokens
        sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
        print(f"{samples} samples, {tokens} tokens ({token_bytes / 1e6:.0f} MB as int32); files: " +
              ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sorted(sizes.items())))
        print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}")
        results = {}
        for case, name in (("npy", "data.npy"), ("parquet", "data.parquet"), ("feather", "data.feather"),
                           ("to_pylist", "data.parquet")):
            best, rss = run_child(case, folder / name, args.repeat)
            assert best["tokens"] == tokens, (case, best)
            results[case] = best["seconds"]
            print(f"  {case:10s} {best['seconds']:7.3f} s  {tokens / best['seconds'] / 1e6:7.1f} Mtokens/s  "
                  f"peak RSS +{rss / 1024:.0f} MiB = {rss * 1024 / token_bytes:.2f}x the token bytes")
        print(f"parquet / npy speed: {results['npy'] / results['parquet']:.2f}x;  "
              f"parquet / to_pylist: {results['to_pylist'] / results['parquet']:.1f}x;  "
              f"feather / npy: {results['npy'] / results['feather']:.2f}x")
        if pathlib.Path(args.varpack).exists():
            cli = {name: time_command([args.varpack, "stats", str(folder / name), "-L", str(CAPACITY)], args.repeat)
                   for name in ("data.npy", "data.parquet")}
            print(f"  varpack stats: data.npy {cli['data.npy']:.3f} s, data.parquet {cli['data.parquet']:.3f} s "
                  f"(ratio {cli['data.npy'] / cli['data.parquet']:.2f}x)")


if __name__ == "__main__":
    main()
