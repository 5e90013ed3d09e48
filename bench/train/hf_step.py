"""The whole training step of a stock Hugging Face Llama, in every way a user can feed it packed or
padded data, with peers in the same process: step time, tokens per second, MFU against the bf16
matmul rate measured in the same run, peak memory, host syncs per step, DataLoader wait, the
losses' agreement, and a profiler breakdown of the step by kernel category.

    python bench/train/hf_step.py --out DIR                 # the GPU run (scripts/gpu_train_step.sh)
    python bench/train/hf_step.py --tiny --device cpu       # a smoke run of every mode on the CPU

Modes (each on the same samples per step, from the same initial weights):
    padded_sdpa      rows padded to the step's longest sample, attention_mask, SDPA
    flat_sdpa        transformers' DataCollatorWithFlattening (position_ids), SDPA
    flat_flex        DataCollatorWithFlattening, flex_attention
    varpack          varpack.PackingCollator, attn_implementation="varpack"
    varpack_prepared varpack.PackingCollator, varpack.hf.prepare(model) (compiled layers, fused loss)
    varpack_liger    varpack.PackingCollator, varpack attention, Liger Kernel's RMSNorm, RoPE,
                     SwiGLU and fused linear cross-entropy instead of compiling (if it imports)
and, with --compile-peers, padded_sdpa_compiled, flat_sdpa_compiled, flat_flex_compiled and
varpack_compiled: the same with every decoder layer torch.compile'd (dynamic shapes), as
prepare() compiles them, so both sides get the compiler.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

import torch

from varpack.trainer import to_device

MODES = ("padded_sdpa", "flat_sdpa", "flat_flex", "varpack", "varpack_prepared", "varpack_liger")
COMPILED_PEERS = ("padded_sdpa_compiled", "flat_sdpa_compiled", "flat_flex_compiled",
                  "varpack_compiled")
PROFILES = {"short": (50, 800), "long": (1000, 8000)}
# The benchmark model: 542M parameters.
MODEL = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=16384)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384)


def make_steps(profile: str, tokens_per_step: int, steps: int, vocab: int, seed: int):
    """Lists of samples (1-D int lists), each step's lengths summing to at most tokens_per_step."""
    low, high = PROFILES[profile]
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        step, used = [], 0
        while True:
            n = min(int(torch.randint(low, high, (1,), generator=gen)), tokens_per_step)
            if used + n > tokens_per_step:
                break
            step.append(torch.randint(0, vocab, (n,), generator=gen).tolist())
            used += n
        out.append(step)
    return out


def collate_padded(samples):
    longest = max(len(s) for s in samples)
    ids = torch.zeros(len(samples), longest, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for r, s in enumerate(samples):
        ids[r, :len(s)] = torch.tensor(s)
        labels[r, :len(s)] = ids[r, :len(s)]
        mask[r, :len(s)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def make_collator(mode: str):
    if mode.startswith("padded"):
        return collate_padded
    if mode.startswith("flat"):
        from transformers import DataCollatorWithFlattening

        flatten = DataCollatorWithFlattening()
        return lambda samples: flatten([{"input_ids": s} for s in samples])
    import varpack

    return varpack.PackingCollator()


def attention_of(mode: str) -> str:
    if "flex" in mode:
        return "flex_attention"
    return "sdpa" if mode.startswith(("padded", "flat")) else "varpack"


def build_model(mode: str, config_kwargs: dict, state: dict, device: str, prepare_options: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    import varpack.hf

    varpack.hf.register()
    config = LlamaConfig(**config_kwargs, use_cache=False)
    model = LlamaForCausalLM(config).to(device)
    model.load_state_dict(state)
    model.set_attn_implementation(attention_of(mode))
    if mode == "varpack_prepared":
        varpack.hf.prepare(model, compile=device == "cuda", **prepare_options)
    elif mode == "varpack_liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(model=model, rope=True, rms_norm=True, swiglu=True,
                                    cross_entropy=False, fused_linear_cross_entropy=True)
    elif mode.endswith("_compiled"):
        for layer in model.model.layers:
            layer.compile(dynamic=True)
    model.train()
    return model


class _Loader:
    """A DataLoader over the prepared steps with this mode's collator, in worker processes with
    pinned memory (the collation runs beside the GPU's work), timing how long the step waits."""

    def __init__(self, steps, collate, workers: int, pin: bool):
        self.loader = torch.utils.data.DataLoader(
            steps, batch_size=None, collate_fn=collate, num_workers=workers, pin_memory=pin,
            prefetch_factor=4 if workers else None, persistent_workers=False)
        self.wait_s = []

    def __iter__(self):
        it = iter(self.loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            self.wait_s.append(time.perf_counter() - start)
            yield batch


def valid_tokens(samples) -> int:
    return sum(len(s) - 1 for s in samples)  # tokens with a target


def step_flops(samples, cfg: dict, non_embedding_params: int) -> float:
    """6 x parameters x tokens for the matmuls, plus causal attention's (forward 2 products of
    d_model per query-key pair, half the pairs; backward twice the forward)."""
    tokens = sum(len(s) for s in samples)
    pairs = sum(len(s) * (len(s) + 1) / 2 for s in samples)
    attention = 3 * 4 * cfg["hidden_size"] * pairs * cfg["num_hidden_layers"]
    return 6 * non_embedding_params * tokens + attention


def matmul_rate(device: str) -> float:
    """bf16 TFLOP/s of an 8192^3 product: the ceiling the step's MFU is read against."""
    if device != "cuda":
        return float("nan")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192 ** 3 / statistics.median(times) / 1e12


def run_mode(mode, steps, args, state, device, flops, tflops_peak):
    torch.manual_seed(0)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    cfg = TINY if args.tiny else MODEL
    prepare_options = {"chunk_tokens": args.chunk_tokens} if args.chunk_tokens else {}
    if args.keep_elementwise:
        prepare_options["recompute_elementwise"] = False
    model = build_model(mode, cfg, state, device, prepare_options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    loader = _Loader(steps, make_collator(mode), args.workers, device == "cuda")
    losses, events, syncs, sync_sites = [], [], [], set()
    autocast = torch.autocast(device, dtype=torch.bfloat16)
    wall_start = None
    for i, batch in enumerate(loader):
        if i == args.warmup:
            if device == "cuda":
                torch.cuda.synchronize()
            wall_start = time.perf_counter()
        timed = i >= args.warmup
        if device == "cuda" and timed:
            torch.cuda.set_sync_debug_mode("warn")
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = to_device(batch, device)
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if device == "cuda" and timed:
            end.record()
            torch.cuda.set_sync_debug_mode(0)
            events.append((begin, end))
            found = [w for w in caught if "synchroniz" in str(w.message)]
            syncs.append(len(found))
            sync_sites.update(f"{os.path.basename(w.filename)}:{w.lineno}" for w in found)
        losses.append(loss.detach())
    if device == "cuda":
        torch.cuda.synchronize()
    wall = (time.perf_counter() - wall_start) / max(1, len(steps) - args.warmup)
    gpu_ms = [b.elapsed_time(e) for b, e in events] if events else [wall * 1e3]
    step_ms = statistics.median(gpu_ms)
    timed_steps = steps[args.warmup:]
    tokens = statistics.mean(valid_tokens(s) for s in timed_steps)
    model_flops = statistics.mean(flops(s) for s in timed_steps)
    result = dict(
        mode=mode, step_ms=step_ms, wall_ms=wall * 1e3,
        tokens_per_s=tokens / (step_ms / 1e3),
        model_tflops=model_flops / (step_ms / 1e3) / 1e12,
        mfu=model_flops / (step_ms / 1e3) / 1e12 / tflops_peak,
        peak_gib=torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else float("nan"),
        loader_wait_ms=1e3 * statistics.mean(loader.wait_s[args.warmup:] or [0.0]),
        syncs_per_step=statistics.mean(syncs) if syncs else float("nan"),
        sync_sites=sorted(sync_sites),
        losses=[float(x) for x in torch.stack(losses).float().cpu()])
    if args.trace_dir and mode in args.trace_modes:
        result["breakdown"] = profile_steps(model, optimizer, steps[:3], make_collator(mode),
                                            device, os.path.join(args.trace_dir,
                                                                 f"{args.profile}_{mode}"))
    del model, optimizer
    return result


# Kernel-name patterns per category, checked in this order (eager and Inductor-fused names).
CATEGORIES = (
    ("attention", ("flash", "fmha", "flex", "hopper_forward", "hopper_backward", "varlen",
                   "attention", "hopper_dq", "convert_dq", "backward_delta", "cudnn")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("loss", ("cross_entropy", "nll_loss", "log_softmax", "logsumexp", "softmax")),
    ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "sm80_", "cublas", "splitk")),
    ("normalisation", ("rsqrt", "pow", "mean", "rms_norm", "norm")),
    ("rotary", ("neg", "cat", "cos", "sin", "rope", "rotary")),
    ("activation", ("silu", "swiglu", "sigmoid")),
    ("copy/cast", ("copy", "convert", "to_copy", "memcpy", "memset", "fill")),
)


def categorise(name: str) -> str:
    low = name.lower()
    for category, patterns in CATEGORIES:
        if any(p in low for p in patterns):
            return category
    return "other elementwise"


def profile_steps(model, optimizer, steps, collate, device, path):
    """Kernel time per category over `steps` steps, and the GPU's idle time within them (host
    work, launches and syncs the kernels wait on), from a chrome trace of torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    batches = [collate(s) for s in steps]
    with profile(activities=activities) as prof:
        for batch in batches:
            batch = to_device(batch, device)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(path + ".json")
    with open(path + ".json") as f:
        trace = json.load(f)
    kernels = [e for e in trace["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    per = {}
    for e in kernels:
        per[categorise(e["name"])] = per.get(categorise(e["name"]), 0.0) + e["dur"] / 1e3
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    busy, cursor = 0.0, -math.inf
    for begin, end in spans:
        busy += max(0.0, end - max(begin, cursor))
        cursor = max(cursor, end)
    window = (spans[-1][1] - spans[0][0]) if spans else 0.0
    per["gpu idle (host, launches)"] = (window - busy) / 1e3
    os.remove(path + ".json")  # large; the categories are what is kept
    return {k: v / len(steps) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", default="short,long", help="short (50..800), long (1k..8k)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--compile-peers", action="store_true",
                        help="also every peer with its decoder layers torch.compile'd")
    parser.add_argument("--tokens", type=int, default=16384, help="tokens per step, at most")
    parser.add_argument("--steps", type=int, default=14, help="steps per mode, warm-up included")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--parity-steps", type=int, default=0,
                        help="varpack and varpack_prepared run this many steps instead (their "
                             "losses compared step by step)")
    parser.add_argument("--chunk-tokens", type=int, default=None,
                        help="varpack_prepared's loss chunk (default: prepare()'s)")
    parser.add_argument("--keep-elementwise", action="store_true",
                        help="varpack_prepared with prepare(recompute_elementwise=False)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="a tiny model (smoke run)")
    parser.add_argument("--trace-modes", default="varpack,varpack_prepared",
                        help="modes whose step is profiled by kernel category")
    parser.add_argument("--out", default=None, help="folder for results JSON (and traces)")
    args = parser.parse_args(argv)
    args.trace_modes = set(args.trace_modes.split(",")) if args.trace_modes else set()
    args.trace_dir = args.out
    modes = args.modes.split(",") + (list(COMPILED_PEERS) if args.compile_peers else [])
    if "varpack_liger" in modes:
        # Liger patches transformers' Llama classes for the whole process: it must run last.
        modes = [m for m in modes if m != "varpack_liger"] + ["varpack_liger"]
    device = args.device
    if device == "cpu" and any("flex" in m for m in modes):
        print("flex_attention has no backward on the CPU: its modes are left out")
        modes = [m for m in modes if "flex" not in m]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    cfg = TINY if args.tiny else MODEL
    torch.manual_seed(0)
    from transformers import LlamaConfig, LlamaForCausalLM

    init = LlamaForCausalLM(LlamaConfig(**cfg))
    state = {k: v.clone() for k, v in init.state_dict().items()}
    non_embedding = sum(p.numel() for n, p in init.named_parameters() if "embed_tokens" not in n)
    del init
    peak = matmul_rate(device)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, bf16 matmul 8192^3: {peak:.0f} TFLOP/s; "
          f"model {non_embedding / 1e6:.0f}M non-embedding parameters", flush=True)
    everything = {"device": name, "torch": torch.__version__, "matmul_tflops": peak,
                  "argv": sys.argv, "profiles": {}}
    for profile in args.profiles.split(","):
        args.profile = profile
        steps = make_steps(profile, args.tokens, max(args.steps, args.parity_steps),
                           cfg["vocab_size"], seed=1)
        flops = lambda s: step_flops(s, cfg, non_embedding)  # noqa: E731
        results = []
        print(f"\n{profile} profile, lengths {PROFILES[profile]}, {args.tokens} tokens a step",
              flush=True)
        print(f"{'mode':<22}{'step ms':>9}{'wall ms':>9}{'tok/s':>10}{'TFLOP/s':>9}{'MFU':>7}"
              f"{'peak GiB':>9}{'wait ms':>9}{'syncs':>7}  first loss", flush=True)
        for mode in modes:
            try:
                parity = args.parity_steps and mode in ("varpack", "varpack_prepared")
                mine = steps[:args.parity_steps] if parity else steps[:args.steps]
                r = run_mode(mode, mine, args, state, device, flops, peak)
            except Exception as error:  # one mode failing must not lose the others' numbers
                oom = isinstance(error, torch.OutOfMemoryError)
                print(f"{mode:<22} {'out of memory' if oom else 'failed'}: "
                      f"{type(error).__name__}: {str(error)[:300]}", flush=True)
                results.append(dict(mode=mode, failed=str(error)[:300], oom=oom))
                if device == "cuda":
                    torch.cuda.empty_cache()
                continue
            results.append(r)
            if args.out:  # after every mode, so a run cut short keeps what it measured
                everything["profiles"][profile] = results
                with open(os.path.join(args.out, "hf_step.json"), "w") as f:
                    json.dump(everything, f, indent=1)
            print(f"{mode:<22}{r['step_ms']:9.1f}{r['wall_ms']:9.1f}{r['tokens_per_s']:10.0f}"
                  f"{r['model_tflops']:9.1f}{r['mfu']:7.1%}{r['peak_gib']:9.1f}"
                  f"{r['loader_wait_ms']:9.2f}{r['syncs_per_step']:7.1f}  {r['losses'][0]:.5f}",
                  flush=True)
            if r["sync_sites"]:
                print(f"{'':<22}host syncs at {', '.join(r['sync_sites'])}", flush=True)
        report(results)
    return 0


def report(results):
    ok = {r["mode"]: r for r in results if "failed" not in r}
    base = ok.get("varpack")
    for r in ok.values():
        if "breakdown" in r:
            print(f"  breakdown of {r['mode']} (ms per step): " +
                  ", ".join(f"{k} {v:.1f}" for k, v in r["breakdown"].items()))
    if base:
        first = base["losses"][0]
        agree = {m: abs(r["losses"][0] - first) / first for m, r in ok.items()}
        print("  first-step loss, relative to varpack's: " +
              ", ".join(f"{m} {d:.1e}" for m, d in agree.items()))
    prepared = ok.get("varpack_prepared")
    if prepared and base:
        n = min(len(base["losses"]), len(prepared["losses"]))
        worst = max(abs(a - b) / abs(a) for a, b in zip(base["losses"][:n],
                                                         prepared["losses"][:n]))
        print(f"  varpack_prepared against varpack over {n} steps: largest relative loss "
              f"difference {worst:.2e}")
        for peer in ("flat_flex", "flat_flex_compiled", "padded_sdpa", "padded_sdpa_compiled",
                     "varpack", "varpack_liger"):
            if peer in ok:
                print(f"  varpack_prepared is {ok[peer]['step_ms'] / prepared['step_ms']:.2f}x "
                      f"{peer}")


if __name__ == "__main__":
    sys.exit(main())
