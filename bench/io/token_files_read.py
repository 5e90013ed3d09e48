"""Token-file read speed: varpack.read_tokens against the plain numpy way, same files, same run.

Writes ~--tokens tokens (lengths uniform 50..800, ids < 50000) as DATA.npy + DATA.offsets.npy and
as a Megatron dataset (PREFIX.bin + PREFIX.idx), in --dtype (uint16 or int32), then times, best of
--repeat:
  read+plan   varpack: read_tokens (maps the files, checks every token id, converts non-int32
              tokens to int32) + varpack.plan(lengths).
              peer:    numpy.load(mmap_mode="r") of both .npy files (or numpy.memmap of the .bin
              and numpy.frombuffer of the .idx tables, parsed from the documented layout), a list
              of per-sample slices, lengths, + varpack.plan(lengths). The peer checks no token.
  +build      the same, then varpack.build_batch of every row (every token read and copied): the
              TokenFile directly, the peer's list of numpy slices.
Prints tokens/s for both and the ratio.

    .venv/bin/python bench/io/token_files_read.py --tokens 10000000 --dtype uint16
"""

import argparse
import os
import struct
import tempfile
import time

import numpy as np

import varpack

CAPACITY = 4096
MEGATRON_CODES = {"uint16": 8, "int32": 4}


def write_inputs(directory, tokens, dtype, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 801, size=tokens // 425 + 1)
    lengths = lengths[np.cumsum(lengths) <= tokens]
    flat = rng.integers(0, 50000, size=int(lengths.sum())).astype(dtype)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(os.path.join(directory, "data.npy"), flat)
    np.save(os.path.join(directory, "data.offsets.npy"), offsets)
    prefix = os.path.join(directory, "corpus")
    item = np.dtype(dtype).itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, MEGATRON_CODES[dtype], len(lengths), len(lengths) + 1))
        f.write(lengths.astype(np.int32).tobytes() + (offsets[:-1] * item).tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    flat.tofile(prefix + ".bin")
    return int(lengths.sum()), prefix


def numpy_npy(directory):
    tokens = np.load(os.path.join(directory, "data.npy"), mmap_mode="r")
    offsets = np.load(os.path.join(directory, "data.offsets.npy"), mmap_mode="r")
    samples = [tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return samples, np.diff(offsets)


def numpy_megatron(prefix):
    index = np.memmap(prefix + ".idx", dtype=np.uint8, mode="r")
    version, code, count, _documents = struct.unpack("<QBQQ", bytes(index[9:34]))
    assert version == 1
    dtype = {8: np.uint16, 4: np.int32}[code]
    lengths = np.frombuffer(index, dtype=np.int32, count=count, offset=34)
    pointers = np.frombuffer(index, dtype=np.int64, count=count, offset=34 + 4 * count)
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    starts = pointers // np.dtype(dtype).itemsize
    samples = [data[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
    return samples, lengths.astype(np.int64)


def best_of(repeat, fn):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--dtype", choices=sorted(MEGATRON_CODES), default="uint16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        total, prefix = write_inputs(directory, args.tokens, args.dtype)
        cases = [
            (".npy + offsets", lambda: varpack.read_tokens(os.path.join(directory, "data.npy")),
             lambda: numpy_npy(directory)),
            ("Megatron .bin/.idx", lambda: varpack.read_tokens("megatron:" + prefix), lambda: numpy_megatron(prefix)),
        ]
        print(f"{total} tokens, {args.dtype}, rows of {CAPACITY}, best of {args.repeat}")
        print("| input | step | varpack | numpy peer | ratio |\n|---|---|---|---|---|")
        for name, ours, peer in cases:
            def ours_plan():
                tokens = ours()
                return tokens, varpack.plan(tokens.lengths, CAPACITY)

            def peer_plan():
                samples, lengths = peer()
                return samples, varpack.plan(lengths, CAPACITY)

            def build(read_and_plan):
                def run():
                    samples, plan = read_and_plan()
                    varpack.build_batch(plan, samples)
                return run

            for step, a, b in [("read+plan", ours_plan, peer_plan),
                               ("read+plan+build", build(ours_plan), build(peer_plan))]:
                t_ours, t_peer = best_of(args.repeat, a), best_of(args.repeat, b)
                print(f"| {name} | {step} | {t_ours * 1e3:.1f} ms, {total / t_ours / 1e6:.0f} M tokens/s "
                      f"| {t_peer * 1e3:.1f} ms, {total / t_peer / 1e6:.0f} M tokens/s | {t_peer / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
