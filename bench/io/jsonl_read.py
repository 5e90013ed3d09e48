"""JSONL read speed: varpack's streaming simdjson reader against the plain Python way, same file.

Writes a tokenised-dataset-like JSONL file (uniform lengths 50..800, ids < 128000; optionally a
labels array on every line), then in the same run
  - varpack: `varpack pack FILE --report R` and takes the report's seconds_read (read_jsonl into
    a TokenStore: parse, validate, copy into flat int32 buffers), best of --repeat;
  - peer: Python, json.loads per line and numpy.asarray(..., int32) of input_ids and labels (what
    a loader written by hand does), best of --repeat.
Prints MB/s of JSON text for both and the ratio.

    .venv/bin/python bench/io/jsonl_read.py --samples 100000 [--labels] [--varpack build/varpack]
"""

import argparse
import json
import os
import pathlib
import subprocess
import tempfile
import time

import numpy as np


def write_input(path, samples, labels, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(samples):
            ids = rng.integers(0, 128000, int(rng.integers(50, 800))).tolist()
            text = ",".join(map(str, ids))
            line = '{"input_ids":[' + text + "]"
            if labels:  # the first token masked, as a prompt would be
                line += ',"labels":[' + ",".join(["-100"] + text.split(",")[1:]) + "]"
            f.write(line + "}\n")


def python_read(path):
    samples = []
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                ids = np.asarray(record["input_ids"], dtype=np.int32)
                labels = record.get("labels")
                samples.append((ids, None if labels is None else np.asarray(labels, np.int32)))
    return samples


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=100000)
    parser.add_argument("--labels", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--varpack", default=str(root / "build" / "varpack"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.jsonl")
        write_input(src, args.samples, args.labels)
        mb = os.path.getsize(src) / 1e6
        ours = []
        for _ in range(args.repeat):
            report = os.path.join(tmp, "r.json")
            subprocess.run([args.varpack, "pack", src, "--capacity", "4096", "--out",
                            os.path.join(tmp, "out.bin"), "--report", report],
                           check=True, capture_output=True)
            ours.append(json.load(open(report))["seconds_read"])
        peer = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            python_read(src)
            peer.append(time.perf_counter() - start)
        ours_s, peer_s = min(ours), min(peer)
        print(f"file: {args.samples} samples, {mb:.1f} MB of JSONL, labels: {args.labels}")
        print(f"varpack read_jsonl:             {ours_s:.3f} s  {mb / ours_s:8.1f} MB/s")
        print(f"python json.loads + np.asarray: {peer_s:.3f} s  {mb / peer_s:8.1f} MB/s")
        print(f"ratio: {peer_s / ours_s:.1f}x")


if __name__ == "__main__":
    main()
