#!/usr/bin/env python3
"""Writes the fuzz seed corpora under tests/fuzz/corpus/ (committed; rerun only to change them).

    python3 tests/fuzz/make_seeds.py build/varpack

Small valid inputs of each reader, covering its variants (labels, nulls, blank lines, CRLF;
every accepted .npy and Megatron dtype; split pieces in packed files), from which varpack_fuzz
mutates. Two-file inputs are joined as fuzz_targets.h describes. Standard library only.
"""
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def join(first, second):
    return struct.pack("<I", len(first)) + first + second


def npy(descr, fmt, values, major=1):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    length_bytes = 2 if major == 1 else 4
    while (8 + length_bytes + len(header) + 1) % 64:
        header += " "
    header += "\n"
    size = struct.pack("<H" if major == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + size + header.encode() + struct.pack("<%d%s" % (len(values), fmt), *values)


def megatron(code, fmt, samples, modes=False):
    flat, lengths, pointers, size = [], [], [], struct.calcsize(fmt)
    for s in samples:
        pointers.append(len(flat) * size)
        lengths.append(len(s))
        flat += s
    docs = list(range(len(samples) + 1))
    idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, code, len(samples), len(docs))
    idx += struct.pack("<%di" % len(lengths), *lengths) + struct.pack("<%dq" % len(pointers), *pointers)
    idx += struct.pack("<%dq" % len(docs), *docs) + (bytes(len(samples)) if modes else b"")
    return idx, struct.pack("<%d%s" % (len(flat), fmt), *flat)


def main(cli):
    samples = [[1, 2, 3], [], [7], [5, 6, 7, 8, 9, 10, 11], [42] * 20]
    put("jsonl", "plain.jsonl", "".join('{"input_ids": %s}\n' % s for s in samples))
    put("jsonl", "labels.jsonl", '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}\n'
        '{"input_ids": [4], "labels": null}\n\n  \n{"labels": [9], "input_ids": [9], "extra": {"a": [1]}}\r\n')
    put("jsonl", "images.jsonl", '{"input_ids": [1, 2], "images": ["a.png"], "labels": [1, -100]}\n')
    put("jsonl", "limits.jsonl", '{"input_ids": [0, 2147483647]}\n{"input_ids": []}')

    for major in (1, 2):
        put("npy", "int32_v%d" % major, join(npy("<i4", "i", [1, 2, 3, 4, 5, 6], major), npy("<i8", "q", [0, 2, 2, 6], major)))
    put("npy", "uint16", join(npy("<u2", "H", [1, 65535, 3]), npy("<i8", "q", [0, 1, 3])))
    put("npy", "int64", join(npy("<i8", "q", [1, 2, 2147483647]), npy("<i8", "q", [0, 3])))
    put("npy", "uint32", join(npy("<u4", "I", [9, 8]), npy("<i8", "q", [0, 0, 2])))

    for name, code, fmt, modes in (("int32", 4, "i", False), ("uint16", 8, "H", False), ("uint8", 1, "B", False),
                                   ("int64", 5, "q", False), ("int16_multimodal", 3, "h", True)):
        idx, bin_ = megatron(code, fmt, [[1, 2, 3], [], [4, 5], [6] * 9], modes)
        put("megatron", name, join(idx, bin_))

    for name in ("report", "long", "longtail", "sft"):
        put("profile", name, name)
    put("profile", "report_seeded", "report|seed 7")

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.jsonl")
        with open(data, "w") as f:
            f.write("".join('{"input_ids": %s}\n' % s for s in samples + [[3] * 12]))
        for name, args in (("bfd", ["-L", "32"]), ("split", ["--overlong", "split", "-L", "8"]), ("none", ["--algorithm", "none", "-L", "32"])):
            out = os.path.join(tmp, name + ".bin")
            subprocess.run([cli, "pack", data, "-o", out] + args, check=True,
                           stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                put("packed_binary", name + ".bin", f.read())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/varpack")
