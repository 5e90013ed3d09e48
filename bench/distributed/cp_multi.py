"""Each context-parallel variant over the ranks of torchrun against one rank running the whole row,
in the same run (issue 63, part 1): forward + backward step time, exposed communication, peak
memory per rank, agreement with the one-rank result.

    torchrun --nproc_per_node=N bench/distributed/cp_multi.py --out OUT         # N GPUs, NCCL
    torchrun --nproc_per_node=2 bench/distributed/cp_multi.py --tiny --out OUT  # CPU, gloo, small
    python bench/distributed/cp_multi.py --out OUT                              # one rank: peer only

Cases: one causal document of each of --lengths tokens, and a packed long-tailed row (--row tokens
of lognormal documents, laid out by varpack.cp_layout's cost rule: long documents zigzag-split over
the ranks, short ones whole on one rank). Per case every rank first runs the whole row alone
(flash_attn_varlen_func: the one-GPU peer; with a GPU per rank they all time it at once), then
each variant of cp_varlen_attention on its share (allgather, ring, ulysses; hybrid = Ulysses over
2 ranks with a ring across, from 4 ranks):

  step     cp_varlen_attention forward + backward as training calls it, the slowest rank (median);
  kernels  the same variant's code (varpack.cp_variants) with every collective replaced by a local
           copy of the bytes it would deliver: the rank's kernel calls, reorders and merges alone;
  exposed  step - kernels (slowest rank of each): the communication not hidden behind kernels;
  memory   the largest peak allocation of a step above what the rank held before (CUDA only);
  error    max |CP - one rank| over out, dq, dk, dv, every rank's part gathered (same dtype).

With one rank no CP is measured: it prints the peer only and says so. On the CPU (gloo) the ranks
share the cores, so its times show that the code runs, not what GPUs would do. Rank 0 prints a
table and the targets the multi-GPU run checks, and writes cp.json to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
from train_ddp import init_distributed, sync  # noqa: E402

import varpack  # noqa: E402
from varpack.context_parallel import cp_varlen_attention  # noqa: E402
from varpack.cp_layout import SPLIT, cp_layout  # noqa: E402
from varpack.cp_variants import Mask, allgather_backward, allgather_forward, ulysses_backward, ulysses_forward  # noqa: E402

TARGETS = ("CP over 2 GPUs >= 1.8x one GPU per step on a 64k document",
           "ring's exposed communication < 10% of its attention step")


class LocalComm:
    """cp_variants' Comm with each collective replaced by a local copy of the bytes it would deliver
    (this rank's own data stands in for its peers'): the variant's kernel work alone."""
    nccl = False

    def __init__(self, cp: int, rank: int):
        self.cp, self.rank = cp, rank

    def start(self, ops):
        sent = {tag: t for send, t, _, tag in ops if send}
        for send, t, _, tag in ops:
            if not send:
                t.copy_(sent[tag])
        return []

    def all_gather(self, x):
        return [x.clone() for _ in range(self.cp)]

    def reduce_scatter(self, blocks):
        return blocks[self.rank].clone()

    def all_to_all(self, send, members, recv_shape, dtype, tag):
        me = members.index(self.rank)
        return [send[me] if i == me else (send[me].clone() if tuple(shape) == tuple(send[me].shape)
                                          else torch.zeros(shape, dtype=dtype, device=send[me].device))
                for i, shape in enumerate(recv_shape)]


def variant_ulysses(variant: str, cp: int) -> int:
    return {"allgather": 1, "ring": 1, "ulysses": cp, "hybrid": 2}[variant]


def runnable(variant: str, cp: int, heads: int, kv_heads: int) -> str | None:
    """Why the variant cannot run at this size (None: it can)."""
    u = variant_ulysses(variant, cp)
    if variant == "hybrid" and cp < 4:
        return "needs 4+ ranks"
    if cp % u or heads % u or (kv_heads % u and u % kv_heads):
        return f"Ulysses degree {u} must divide {cp} ranks and {heads} heads, and {kv_heads} kv heads divide it or it them"
    return None


def local_step(layout, rank, variant, q, k, v, dout, mask):
    """One rank's forward + backward of the variant, collectives replaced by LocalComm."""
    comm, u = LocalComm(layout.cp, rank), variant_ulysses(variant, layout.cp)
    if variant == "allgather":
        out, lse = allgather_forward(comm, layout, q, k, v, mask)
        return allgather_backward(comm, layout, dout, q, k, v, out, lse, mask, False, 1)
    out, lse = ulysses_forward(comm, layout, q, k, v, mask, u)
    return ulysses_backward(comm, layout, dout, q, k, v, out, lse, mask, False, u)


def timed(fn, device, repeats: int) -> float:
    """Median seconds of `repeats` calls, all ranks starting together (call fn once before)."""
    times = []
    for _ in range(repeats):
        sync(device)
        dist.barrier()
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def peak_above(fn, device):
    """(fn's result, its peak allocation above what was allocated before, bytes; None off CUDA)."""
    if device.type != "cuda":
        return fn(), None
    sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    sync(device)
    return result, torch.cuda.max_memory_allocated(device) - before


def packed_row(tokens: int, median: int, seed: int) -> list:
    """cu_seqlens of a row of `tokens` tokens: lognormal documents (median, sigma 1), the last cut."""
    rng = np.random.default_rng(seed)
    cu = [0]
    while cu[-1] < tokens:
        cu.append(min(tokens, cu[-1] + max(1, int(rng.lognormal(np.log(median), 1.0)))))
    return cu


def measure_case(name, cu, args, rank, world, device, dtype) -> dict:
    n = cu[-1]
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v, dout = (torch.randn(n, h, args.head_dim, generator=g).to(device, dtype)
                     for h in (args.heads, args.kv_heads, args.kv_heads, args.heads))
    cu_t = torch.tensor(cu, dtype=torch.int32, device=device)
    longest = int(np.diff(cu).max())

    def whole():
        x = [t.detach().requires_grad_() for t in (q, k, v)]
        out = varpack.flash_attn_varlen_func(*x, cu_t, cu_t, longest, longest, causal=True)
        out.backward(dout)
        return [out.detach(), *(t.grad for t in x)]

    reference, peer_memory = peak_above(whole, device)
    case = {"case": name, "tokens": n, "documents": len(cu) - 1, "longest": longest,
            "peer_s": timed(whole, device, args.repeats), "peer_peak_bytes": peer_memory, "variants": {}}
    if world == 1:
        return case
    owner = [SPLIT] if len(cu) == 2 else None  # a packed row: cp_layout's cost rule decides
    layout = cp_layout(cu, world, owner=owner)
    case["split_documents"] = sum(o == SPLIT for o in layout.owner)
    local = [layout.shard(t, rank) for t in (q, k, v, dout)]
    mask = Mask(-1, 0, args.head_dim ** -0.5, 0.0)
    for variant in args.variants.split(","):
        why = runnable(variant, world, args.heads, args.kv_heads)
        if why:
            case["variants"][variant] = {"skipped": why}
            continue
        u = variant_ulysses(variant, world)

        def step():
            x = [t.detach().requires_grad_() for t in local[:3]]
            out = cp_varlen_attention(*x, layout, variant=variant, ulysses=u)
            out.backward(local[3])
            return [out.detach(), *(t.grad for t in x)]

        def kernels():
            return local_step(layout, rank, variant, *local, mask)

        mine, memory = peak_above(step, device)
        t_step = timed(step, device, args.repeats)
        kernels()
        t_kernels = timed(kernels, device, args.repeats)
        errors = [gathered_error(layout, part, full) for part, full in zip(mine, reference)]
        per_rank = [None] * world
        dist.all_gather_object(per_rank, (t_step, t_kernels, memory))
        steps, kernel_times, memories = zip(*per_rank)
        case["variants"][variant] = {
            "ulysses": u, "step_s": max(steps), "kernels_s": max(kernel_times),
            "exposed_s": max(steps) - max(kernel_times), "rank_step_s": list(steps),
            "rank_kernels_s": list(kernel_times), "rank_peak_bytes": list(memories),
            "max_abs_error": dict(zip(("out", "dq", "dk", "dv"), errors))}
        del mine
    return case


def gathered_error(layout, part, full) -> float:
    """max |the ranks' parts of a row-shaped tensor, put back in order - full| (every rank gets it)."""
    rows = max(layout.tokens)
    padded = torch.cat([part, part.new_zeros((rows - part.shape[0], *part.shape[1:]))]).contiguous()
    parts = [torch.empty_like(padded) for _ in range(layout.cp)]
    dist.all_gather(parts, padded)
    got = layout.unshard([p[:layout.tokens[r]] for r, p in enumerate(parts)])
    return float((got.float() - full.float()).abs().max())


def report(cases, args, world, device_name, dtype) -> tuple[str, dict]:
    lines = [f"{device_name}, {world} rank(s), {dtype}, {args.heads}/{args.kv_heads} heads x {args.head_dim}, causal, "
             f"forward + backward, median of {args.repeats}", ""]
    if world == 1:
        lines.append("One rank: the one-rank peer only; no context parallelism was measured.\n")
    lines += ["| case | variant | step ms | one rank ms | speed-up | kernels ms | exposed ms (share) | "
              "peak MiB per rank (one rank) | max abs err out / dq / dk / dv |", "|---|---|---|---|---|---|---|---|---|"]
    mib = lambda b: "n/a" if b is None else f"{b / 2**20:.0f}"  # noqa: E731
    for c in cases:
        head = f"{c['case']} ({c['documents']} docs, {c.get('split_documents', 0)} split)"
        if not c["variants"]:
            lines.append(f"| {head} | one rank | - | {c['peer_s'] * 1e3:.2f} | - | - | - | ({mib(c['peer_peak_bytes'])}) | - |")
        for variant, r in c["variants"].items():
            if "skipped" in r:
                lines.append(f"| {head} | {variant} | skipped: {r['skipped']} | | | | | | |")
                continue
            peak = None if r["rank_peak_bytes"][0] is None else max(r["rank_peak_bytes"])
            err = " / ".join(f"{e:.1e}" for e in r["max_abs_error"].values())
            lines.append(f"| {head} | {variant} | {r['step_s'] * 1e3:.2f} | {c['peer_s'] * 1e3:.2f} | "
                         f"{c['peer_s'] / r['step_s']:.2f}x | {r['kernels_s'] * 1e3:.2f} | {r['exposed_s'] * 1e3:.2f} "
                         f"({r['exposed_s'] / r['step_s']:.1%}) | {mib(peak)} ({mib(c['peer_peak_bytes'])}) | {err} |")
    targets = {}
    if world == 2:
        doc = next((c for c in cases if c["documents"] == 1 and c["tokens"] == 65536), None)
        measured = [c["peer_s"] / r["step_s"] for c in [doc] if c for r in c["variants"].values() if "step_s" in r]
        targets[TARGETS[0]] = (f"best variant {max(measured):.2f}x", max(measured) >= 1.8) if measured else (
            "no 64k document in this run", None)
    else:
        targets[TARGETS[0]] = (f"not measured ({world} ranks)", None)
    rings = [(c["case"], c["variants"]["ring"]) for c in cases if "step_s" in c["variants"].get("ring", {})]
    if rings:
        shares = [r["exposed_s"] / r["step_s"] for _, r in rings]
        targets[TARGETS[1]] = (", ".join(f"{name} {s:.1%}" for (name, _), s in zip(rings, shares)), max(shares) < 0.10)
    else:
        targets[TARGETS[1]] = ("not measured", None)
    return "\n".join(lines + target_lines(targets, device_name == "cpu")), {
        t: {"measured": m, "pass": ok} for t, (m, ok) in targets.items()}


def target_lines(targets: dict, cpu: bool) -> list:
    """The targets table: targets[name] = (what was measured, True / False / None: not computable)."""
    lines = ["", "| target | measured | status |", "|---|---|---|"]
    for target, (measured, ok) in targets.items():
        status = "n/a" if ok is None else ("pass" if ok else "fail")
        lines.append(f"| {target} | {measured} | {status}{' (CPU/gloo: not the GPU target)' if cpu else ''} |")
    return lines


def write_results(out, name: str, results: dict) -> None:
    """Prints results["text"]; with `out`, writes it to OUT/NAME.md and results to OUT/NAME.json
    (each through a temporary file and a rename: no half-written file)."""
    print(results["text"], flush=True)
    if not out:
        return
    folder = pathlib.Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".md", results["text"] + "\n"), (".json", json.dumps(results, indent=1))):
        tmp = folder / f"{name}{suffix}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / f"{name}{suffix}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="65536,131072", help="comma-separated: one causal document of each (default 65536,131072)")
    parser.add_argument("--row", type=int, default=131072, help="tokens of the packed long-tailed row (default 131072; 0: none)")
    parser.add_argument("--row-median", type=int, default=8192, help="median document length of the packed row (default 8192)")
    parser.add_argument("--variants", default="allgather,ring,ulysses,hybrid",
                        help="comma-separated (hybrid: Ulysses over 2 ranks, ring across; from 4 ranks)")
    parser.add_argument("--heads", type=int, default=32, help="query heads (default 32)")
    parser.add_argument("--kv-heads", type=int, default=8, help="key/value heads (default 8)")
    parser.add_argument("--head-dim", type=int, default=128, help="(default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after one untimed (default 3)")
    parser.add_argument("--tiny", action="store_true", help="CPU sizes (other flags still apply): documents of "
                        "1024 and 2048 tokens, a row of 2048 (median 256), 4/2 heads x 32")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: CUDA (NCCL) where there is a GPU, else the CPU (gloo)")
    parser.add_argument("--out", help="folder for cp.json and cp.md (rank 0)")
    if "--tiny" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(lengths="1024,2048", row=2048, row_median=256, heads=4, kv_heads=2, head_dim=32)
    return parser.parse_args(argv)


def run(args, rank: int, world: int, device: torch.device) -> dict:
    """Every case on this rank (a process group is joined); rank 0's report text in "text"."""
    dtype = torch.bfloat16
    cases = []
    for length in (int(x) for x in args.lengths.split(",") if x):
        length = -(-length // (2 * world)) * (2 * world)
        cases.append(measure_case(f"document of {length}", [0, length], args, rank, world, device, dtype))
    if args.row:
        cases.append(measure_case(f"packed row of {args.row}", packed_row(args.row, args.row_median, seed=1), args,
                                  rank, world, device, dtype))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    text, targets = report(cases, args, world, name, dtype)
    return {"device": name, "world_size": world, "backend": dist.get_backend(), "dtype": str(dtype),
            "args": vars(args), "cases": cases, "targets": targets, "text": text}


def main(argv=None) -> None:
    args = parse_args(argv)
    rank, world, device = init_distributed(args.device)
    results = run(args, rank, world, device)
    if rank == 0:
        write_results(args.out, "cp", results)
    finish()


def finish() -> None:
    """Leaves the process group and exits. Now and then a gloo rank aborts in the interpreter's
    teardown ("terminate called without an active exception", torch 2.13 CPU, as
    tests/python/gloo_ranks.py notes) after its work is done: exit without that teardown."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
