#!/usr/bin/env python3
"""The main loop of a CUDA kernel in its SASS: static instruction mix and local-memory traffic.

For reading what ptxas made of a kernel without a GPU (the counts quoted in bench/results/cuda.md,
e.g. "the d128 atomic backward's loop 1,087 -> 921 instructions"). The loop is the innermost
backward branch's range with the most wgmma instructions (HGMMA); in it, every LDL/STL (spill or
local array) is listed with the source line it came from.

Input: nvdisasm's output for one compiled instance file, with line info. nvdisasm and cuobjdump
are not part of the CUDA toolkit here; requirements.txt installs them from PyPI into .venv
(nvidia-cuda-nvdisasm, nvidia-cuda-cuobjdump: .venv/lib/python3.11/site-packages/nvidia/cu13/bin):

    nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -O3 \\
         -Iinclude -Isrc -DVARPACK_SM90A=1 -lineinfo -cubin -o k.cubin \\
         src/attn/cuda/backward_bf16_d128.cu
    nvdisasm -g -c k.cubin > k.sass
    scripts/sass_loop.py k.sass AtomicBackwardD128EEELb0ELb1
"""
import argparse
import collections
import re
import signal
import sys


def kernels(text):
    """(mangled name, body) of every function section in nvdisasm's output."""
    parts = re.split(r"\n//-+ \.text\.(\S+)", text)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def instructions(body):
    """[(address, instruction text, 'file:line')] and {label: address} of one function."""
    out, labels, pending, where = [], {}, [], "?"
    for line in body.split("\n"):
        stripped = line.strip()
        m = re.search(r'//## File "([^"]+)", line (\d+)', stripped)
        if m:
            where = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
            continue
        m = re.match(r"^(\.L_x_\d+):", stripped)
        if m:
            pending.append(m.group(1))
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", stripped)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending = []
            out.append((address, m.group(2), where))
    return out, labels


def main_loop(code, labels):
    """(start, end) of the innermost backward branch's range with the most HGMMA instructions
    (innermost: holding no shorter such range; a kernel's first tile peeled off its loop puts
    wgmma instructions outside it too). A range holding an EXIT is no loop of the kernel's: ptxas
    places the retry of a wait (mbarrier try_wait) out of line past the function's exits, with a
    branch back into the body."""
    hgmma = [a for a, text, _ in code if "HGMMA" in text]
    exits = [a for a, text, _ in code if opcode(text) == "EXIT"]
    loops = []
    for address, text, _ in code:
        m = re.search(r"BRA.*?(\.L_x_\d+)", text)
        if m and labels.get(m.group(1), address + 1) < address:
            start = labels[m.group(1)]
            count = sum(start <= a <= address for a in hgmma)
            if count and not any(start <= a <= address for a in exits):
                loops.append((start, address, count))
    innermost = [(s, e, n) for s, e, n in loops
                 if not any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2, _ in loops)]
    if not innermost:
        return None
    start, end, _ = max(innermost, key=lambda loop: (loop[2], loop[0] - loop[1]))
    return start, end


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)  # the predicate
    return text.split()[0].split(".")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sass", help="nvdisasm -g -c output")
    parser.add_argument("kernel", help="a substring of the mangled kernel name")
    args = parser.parse_args()
    try:
        with open(args.sass) as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"{args.sass}: cannot read it ({e.strerror}); see --help")
    found = [(name, body) for name, body in kernels(text) if args.kernel in name]
    if not found:
        sys.exit(f"{args.sass}: no function whose name holds {args.kernel!r}")
    for name, body in found:
        code, labels = instructions(body)
        loop = main_loop(code, labels)
        print(name)
        if loop is None:
            print("  no loop holding the wgmma instructions")
            continue
        inside = [(a, text, where) for a, text, where in code if loop[0] <= a <= loop[1]]
        mix = collections.Counter(opcode(text) for _, text, _ in inside)
        print(f"  loop {loop[0]:#x}-{loop[1]:#x}: {len(inside)} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in mix.most_common()))
        for address, text, where in inside:
            if opcode(text) in ("LDL", "STL"):
                print(f"  {address:#06x} {where:28s} {text}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when the reader stops early (| head)
    main()
