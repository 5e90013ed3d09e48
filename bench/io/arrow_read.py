"""Arrow input speed and memory: a Parquet file read into the planner against the same tokens from
.npy + offsets and against the pyarrow to_pylist route, same files, same run.

Writes ~--tokens int32 token ids (lengths log-normal around 550, 1..4096, ids < 32000) as
DATA.npy + DATA.offsets.npy, as Parquet (pyarrow's defaults: snappy, dictionary pages) and as an
uncompressed Arrow IPC (Feather) file. Each case runs in a fresh process (page cache warm, a first
untimed run each), best of --repeat by CPU time (wall time shown too), and reports the peak RSS
it added over the process after its imports (VmHWM after a reset through /proc/self/clear_refs,
minus VmRSS before) against the int32 token bytes, warm (after reading a small file of the same
kind) and cold:
  npy        varpack.read_tokens(DATA.npy) + varpack.plan(lengths)       (mapped; every id checked)
  parquet    varpack.read_tokens(DATA.parquet) + varpack.plan(lengths)   (Arrow buffers, checked)
  feather    varpack.read_tokens(DATA.feather) + varpack.plan(lengths)   (mapped Arrow buffers)
  read_table pyarrow.parquet.read_table + lengths from its offsets + varpack.plan: pyarrow's own
             decode, the floor of any Parquet route (no id is checked, nothing kept as int32)
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
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

CAPACITY = 4096

# Run in a child: one read + plan, its wall and CPU seconds and the peak RSS it added (KiB), as JSON.
# With "warm", a small file of the same kind is read first, so a library's one-time start-up
# (pyarrow's Parquet reader: ~40 MB) is not charged to the read.
CHILD = r"""
import json, sys, time
import numpy as np, pyarrow.parquet as pq, varpack, varpack.arrow_tokens  # imports before the clock
case, path, warm = sys.argv[1], sys.argv[2], sys.argv[3]

def read(path):
    if case == "read_table":
        column = pq.read_table(path, columns=["input_ids"]).column("input_ids")
        lengths = np.concatenate([np.diff(c.offsets.to_numpy()) for c in column.chunks]).astype(np.int64)
        return column, lengths, int(lengths.sum())
    if case == "to_pylist":
        lists = pq.read_table(path, columns=["input_ids"]).column("input_ids").to_pylist()
        lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        return lists, lengths, int(lengths.sum())
    data = varpack.read_tokens(path)
    return data, data.lengths, data.num_tokens

def kib(field):  # VmRSS (now) or VmHWM (peak since the last reset) of this process
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

if warm != "-":
    read(warm)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the peak: the imports' own peak would hide the read's
before = kib("VmRSS")
start, cpu = time.perf_counter(), time.process_time()
data, lengths, tokens = read(path)
plan = varpack.plan(lengths, capacity=%d)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_kib": kib("VmHWM") - before, "tokens": tokens,
                  "rows": plan.num_rows}))
""" % CAPACITY


def write_inputs(folder, tokens, name="data", seed=0):
    import pyarrow as pa
    import pyarrow.feather
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(400), 0.8, size=max(1, tokens // 300)), 1, CAPACITY).astype(np.int64)
    lengths = lengths[np.cumsum(lengths) <= tokens]
    flat = rng.integers(0, 32000, size=int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(folder / f"{name}.npy", flat)
    np.save(folder / f"{name}.offsets.npy", offsets)
    column = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))
    table = pa.table({"input_ids": column})
    pq.write_table(table, folder / f"{name}.parquet")
    pyarrow.feather.write_feather(table, folder / f"{name}.feather", compression="uncompressed")
    return len(lengths), int(lengths.sum())


def run_child(case, path, warm, repeat):
    """Best of `repeat` by CPU time (the machine is shared: wall time is noisy), after an untimed run."""
    runs = []
    for i in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", CHILD, case, str(path), str(warm)], capture_output=True,
                             text=True, check=True)
        if i:
            runs.append(json.loads(out.stdout))
    return min(runs, key=lambda r: r["cpu"]), max(r["rss_kib"] for r in runs)


def time_command(args, repeat):
    """Best CPU seconds (user + system, the command and the converter it runs) and wall seconds."""
    best = (float("inf"), float("inf"))
    for i in range(repeat + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(args, check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if i:
            best = min(best, (cpu, wall))
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
        write_inputs(folder, 20000, name="warm")
        token_bytes = 4 * tokens
        sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.name.startswith("data")}
        print(f"{samples} samples, {tokens} tokens ({token_bytes / 2**20:.0f} MiB as int32); files: " +
              ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in sorted(sizes.items())))
        print(f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, python "
              f"{platform.python_version()}; best of {args.repeat} by CPU time")
        print("  case        CPU s   wall s  Mtokens/s (CPU)  peak RSS added: warm / cold (x token bytes)")
        cpu = {}
        for case, name in (("npy", "data.npy"), ("parquet", "data.parquet"), ("feather", "data.feather"),
                           ("read_table", "data.parquet"), ("to_pylist", "data.parquet")):
            suffix = name.split(".")[1]
            best, rss = run_child(case, folder / name, folder / f"warm.{suffix}", args.repeat)
            _, cold = run_child(case, folder / name, "-", 1)
            assert best["tokens"] == tokens, (case, best)
            cpu[case] = best["cpu"]
            print(f"  {case:10s} {best['cpu']:6.3f}  {best['seconds']:6.3f}  {tokens / best['cpu'] / 1e6:10.1f}"
                  f"        {rss / 1024:4.0f} MiB ({rss * 1024 / token_bytes:.2f}x) / {cold / 1024:4.0f} MiB "
                  f"({cold * 1024 / token_bytes:.2f}x)")
        print(f"ratios (CPU time): parquet vs npy {cpu['npy'] / cpu['parquet']:.2f}x, parquet vs to_pylist "
              f"{cpu['to_pylist'] / cpu['parquet']:.1f}x, feather vs npy {cpu['npy'] / cpu['feather']:.2f}x")
        if pathlib.Path(args.varpack).exists():
            cli = {name: time_command([args.varpack, "stats", str(folder / name), "-L", str(CAPACITY)], args.repeat)
                   for name in ("data.npy", "data.parquet")}
            print(f"  varpack stats (CPU / wall s): data.npy {cli['data.npy'][0]:.3f} / {cli['data.npy'][1]:.3f}, "
                  f"data.parquet {cli['data.parquet'][0]:.3f} / {cli['data.parquet'][1]:.3f} (CPU ratio "
                  f"{cli['data.npy'][0] / cli['data.parquet'][0]:.2f}x)")


if __name__ == "__main__":
    main()
