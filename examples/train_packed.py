"""Padding-free training benchmark: a Llama-style decoder (transformers' LlamaForCausalLM, RoPE on
position_ids) trained on the standard library's sources as bytes, in five modes from one process,
every mode on the same samples per step (same valid tokens) from the same initial weights:

  fixed           every sample padded to the profile's longest length, SDPA (cuDNN first on CUDA)
  dynamic         every sample padded to the step's longest sample (rounded up to 8), SDPA
  packed_torch    varpack packing + torch.nn.attention.varlen.varlen_attn (CUDA only)
  packed_varpack  varpack packing + varpack's varlen kernel (attn_implementation="varpack")
  auto            per step, the dynamic-padded or the packed varpack layout, whichever a cost model
                  fitted on this device predicts faster (varpack.auto; the choice is logged)

Per mode: valid tokens/s, step time, padding rate, peak memory; loss curves (PNG). Then two
parity phases: one step's samples packed vs one by one (per-sample losses and gradients, bf16
tolerance), and a small model trained packed and padded for a few hundred steps, held-out losses
compared (PNG). Outputs go to --out: results.json, results.md, loss_curves.png, parity.png.

    python examples/train_packed.py --out $OUT                 # the H200 benchmark
    python examples/train_packed.py --preset smoke --out /tmp/x # tiny, on the CPU, seconds
    python examples/train_packed.py --out $OUT --phases parity  # only the training parity

A mode that cannot run here (torch's varlen_attn without CUDA, varpack without its CUDA kernels)
is reported as not available with the reason; nothing is substituted for it.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import logging
import pathlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from corpus import PAD, VOCAB_SIZE, Corpus, Profile, draw_steps  # noqa: E402

import varpack  # noqa: E402
import varpack.hf  # noqa: E402
from varpack.auto import PADDED, VARLEN, PathChooser, fit_cost_model  # noqa: E402
from varpack.collator import PackingCollator, pad_rows  # noqa: E402
from varpack.loss import per_sample_losses  # noqa: E402

log = logging.getLogger("train_packed")
MODES = ("fixed", "dynamic", "packed_torch", "packed_varpack", "auto")
PHASES = ("benchmark", "sample_parity", "parity")


@dataclass
class Preset:
    layers: int
    hidden: int
    heads: int
    intermediate: int
    tokens_per_step: int
    warmup_steps: int
    timed_steps: int
    profiles: tuple
    parity_model: tuple          # (layers, hidden, heads, intermediate)
    parity_tokens_per_step: int
    parity_steps: int
    parity_eval_every: int
    parity_eval_samples: int
    calibration_repeats: int = 2
    lr: float = 3e-4
    parity_lr: float = 1e-3


PRESETS = {
    # The reference model: 8 layers, d_model 2048, 16 heads x 128, SwiGLU 5632 (vocab: bytes).
    "h200": Preset(8, 2048, 16, 5632, 32768, 3, 10,
                   (Profile("short", 50, 800, 4096), Profile("long", 1000, 8000, 16384)),
                   (4, 512, 8, 1408), 16384, 200, 20, 64),
    # Tiny, for a CPU smoke test: every code path, no meaningful timing.
    "smoke": Preset(2, 32, 2, 64, 512, 1, 1,
                    (Profile("short", 5, 80, 256), Profile("long", 100, 400, 512)),
                    (2, 32, 2, 64), 512, 4, 2, 4, calibration_repeats=1, lr=1e-3),
}


# ---------------------------------------------------------------- attention implementations

def torch_varlen_available(device: torch.device) -> str | None:
    """None if torch's varlen_attn can run here, else why not."""
    if device.type != "cuda":
        return "torch.nn.attention.varlen.varlen_attn runs on CUDA only"
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError as error:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen ({error})"
    return None


def torch_varlen_function():
    """torch's varlen_attn behind FlashAttention-2's flash_attn_varlen_func signature."""
    from torch.nn.attention.varlen import varlen_attn
    params = inspect.signature(varlen_attn).parameters

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               dropout_p=0.0, softmax_scale=None, causal=False,
                               window_size=(-1, -1), softcap=0.0, **_):
        if dropout_p or softcap:
            raise ValueError("torch varlen_attn has no dropout or softcap")
        options = {}
        if "is_causal" in params:  # torch 2.9's spelling
            options["is_causal"] = causal
        else:
            options["window_size"] = (window_size[0], 0) if causal else tuple(window_size)
        if softmax_scale is not None:
            options["scale"] = softmax_scale
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        return varlen_attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options)

    return flash_attn_varlen_func


def varpack_available(device: torch.device) -> str | None:
    """None if varpack's varlen kernel is registered for this device, else why not."""
    key = "CUDA" if device.type == "cuda" else "CPU"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("varpack::varlen_fwd", key):
        return f"varpack's varlen kernel is not registered for {key} in this build"
    return None


def sdpa_context(device: torch.device):
    """Padded attention through SDPA, cuDNN first on CUDA: the fastest padded kernel on Hopper
    (the reference measurements), so the padded modes are measured at their best."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if device.type != "cuda":
        return sdpa_kernel([SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION])
    # MATH last: only float32 reference runs (per-sample parity) need it.
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.MATH]
    if "set_priority" in inspect.signature(sdpa_kernel).parameters:
        return sdpa_kernel(order, set_priority=True)
    return sdpa_kernel(order)


# ---------------------------------------------------------------- batches

@dataclass
class Batch:
    """One step's inputs in one layout, on the host; `computed` counts the tokens the model
    processes (valid + padding)."""
    kwargs: dict
    attn: str
    valid: int
    computed: int
    lengths: list = field(default_factory=list)
    row_padding: float = 0.0  # packed only: padding if the plan's rows were padded to capacity
    segment_sample: torch.Tensor | None = None  # packed only: the sample of each segment


def packed_batch(samples: list, capacity: int, attn: str) -> Batch:
    lengths = [len(s) for s in samples]
    plan = varpack.plan(lengths, capacity, algorithm="bfd")
    built = varpack.build_batch(plan, samples)
    kwargs = {
        "input_ids": built["input_ids"][None], "labels": built["labels"][None],
        "position_ids": built["position_ids"][None],
        "cu_seq_lens_q": built["cu_seqlens"], "cu_seq_lens_k": built["cu_seqlens"],
        "max_length_q": built["max_seqlen"], "max_length_k": built["max_seqlen"],
    }
    return Batch(kwargs, attn, sum(lengths), int(built["input_ids"].numel()), lengths,
                 plan.stats["padding_rate_packed"], built["segment_sample"])


def padded_batch(samples: list, width: int | None, attn: str = "sdpa") -> Batch:
    """Right-padded rows, one sample each, padded to `width` (None: the longest sample, rounded
    up to a multiple of 8). The planner's "none" plan gives one row per sample; the flat tokens
    are scattered into rows. No attention mask: with causal attention a valid token never sees the padding after it, and
    padding has label -100, so losses equal the unpadded ones."""
    lengths = [len(s) for s in samples]
    if width is None:  # dynamic padding, to a multiple of 8 as DataCollatorWithPadding is used
        width = -(-max(lengths) // 8) * 8
    plan = varpack.plan(lengths, width, algorithm="none")
    built = varpack.build_batch(plan, samples)
    offsets = built["row_offsets"]
    ids = pad_rows(built["input_ids"], offsets, width, PAD)
    labels = pad_rows(built["labels"], offsets, width, -100)
    return Batch({"input_ids": ids, "labels": labels}, attn, sum(lengths), ids.numel(), lengths)


def to_device(batch: Batch, device: torch.device) -> dict:
    return {k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
            for k, v in batch.kwargs.items()}


# ---------------------------------------------------------------- model and steps

def make_model(layers, hidden, heads, intermediate, max_positions, device, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=heads, max_position_embeddings=max_positions,
                         pad_token_id=PAD, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model


class Trainer:
    """Model + optimizer; run(batch) does one training step and returns the loss (a tensor, so the
    host does not wait for it inside timed steps). The learning rate warms up linearly over
    `warmup` steps, then decays with a cosine to a tenth over `total` steps (constant if total is
    None): without warm-up the first steps at full rate spike the loss of the large model."""

    def __init__(self, model, lr, device, warmup: int = 10, total: int | None = None):
        self.model = model
        self.device = device
        self.initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.lr = lr
        self.warmup = warmup
        self.total = total
        self.reset()

    def schedule(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.total is None:
            return 1.0
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress))

    def reset(self):
        self.model.load_state_dict(self.initial)
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=0.0,
                                           fused=fused)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self.schedule)

    def forward_backward(self, batch: Batch):
        self.model.config._attn_implementation = batch.attn
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            with sdpa_context(self.device):
                loss = self.model(**to_device(batch, self.device)).loss
        loss.backward()
        return loss.detach()

    def run(self, batch: Batch):
        loss = self.forward_backward(batch)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    @torch.no_grad()
    def evaluate(self, batches: list) -> float:
        """Per-token mean loss over the held-out batches (all the same layout, padded SDPA)."""
        total, count = 0.0, 0
        for batch in batches:
            self.model.config._attn_implementation = batch.attn
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
                with sdpa_context(self.device):
                    loss = self.model(**to_device(batch, self.device)).loss
            n = sum(length - 1 for length in batch.lengths)
            total += float(loss) * n
            count += n
        return total / count


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats):
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# ---------------------------------------------------------------- automatic path choice

def calibrate(trainer: Trainer, preset: Preset, varlen_attn: str, device, max_length: int):
    """Times forward+backward for padded rows and packed sequences of a few lengths and totals,
    through the attention implementation the automatic mode uses (its padded rows run the
    fixed-length kernel, SDPA), and fits one cost model per path (varpack.auto.fit_cost_model)."""
    budgets = (preset.tokens_per_step // 2, preset.tokens_per_step)
    widths = [w for w in (max_length // 16, max_length // 4, max_length) if w >= 8]
    rng = np.random.default_rng(1234)
    padded_points, varlen_points = [], []
    for budget in budgets:
        for width in widths:
            rows = max(1, budget // width)
            samples = [rng.integers(0, 256, size=width).astype(np.int32) for _ in range(rows)]
            for path, batch, points in ((PADDED, padded_batch(samples, width, varlen_attn), padded_points),
                                        (VARLEN, packed_batch(samples, rows * width, varlen_attn),
                                         varlen_points)):
                trainer.forward_backward(batch)  # warm-up
                seconds = timed(lambda: trainer.forward_backward(batch), device,
                                preset.calibration_repeats)
                points.append(([width] * rows, seconds))
                log.info("calibration %s %d x %d: %.2f ms", path, rows, width, seconds * 1e3)
    trainer.model.zero_grad(set_to_none=True)
    padded, varlen = fit_cost_model(padded_points), fit_cost_model(varlen_points)
    log.info("cost model padded: %s; varlen: %s", padded, varlen)
    return PathChooser(padded, varlen, log=logging.getLogger("varpack.auto")), padded_points, varlen_points


# ---------------------------------------------------------------- the benchmark

def run_mode(trainer: Trainer, mode: str, steps: list, profile: Profile, preset: Preset,
             varlen_attn: str | None, chooser: PathChooser | None, device) -> dict:
    batches, choices = [], []
    auto_collator = PackingCollator(profile.capacity, chooser=chooser, pad_token_id=PAD)
    for samples in steps:
        if mode == "fixed":
            batches.append(padded_batch(samples, profile.max_length))
        elif mode == "dynamic":
            batches.append(padded_batch(samples, None))
        elif mode == "packed_torch":
            batches.append(packed_batch(samples, profile.capacity, "torch_varlen"))
        elif mode == "packed_varpack":
            batches.append(packed_batch(samples, profile.capacity, "varpack"))
        else:  # auto: the collator asks the chooser, one attention implementation runs both
            kwargs = auto_collator(samples)
            choices.append(auto_collator.last_decision.path)
            batches.append(Batch(kwargs, varlen_attn, sum(len(s) for s in samples),
                                 kwargs["input_ids"].numel(), [len(s) for s in samples]))
    trainer.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for index, batch in enumerate(batches):
        sync(device)
        start = time.perf_counter()
        losses.append(trainer.run(batch))
        sync(device)
        if index >= preset.warmup_steps:
            times.append(time.perf_counter() - start)
    valid = [b.valid for b in batches[preset.warmup_steps:]]
    computed = [b.computed for b in batches[preset.warmup_steps:]]
    result = {
        "mode": mode, "status": "ok",
        "step_ms_median": 1e3 * float(np.median(times)),
        "valid_tokens_per_s": float(sum(valid) / sum(times)),
        "valid_tokens_per_step": float(np.mean(valid)),
        "padding_rate": 1.0 - sum(valid) / sum(computed),
        "row_padding_rate": float(np.mean([b.row_padding for b in batches[preset.warmup_steps:]])),
        "peak_memory_gib": (torch.cuda.max_memory_allocated(device) / 2**30
                            if device.type == "cuda" else None),
        "losses": [float(x) for x in losses],
    }
    if choices:
        result["auto_choices"] = {VARLEN: choices.count(VARLEN), PADDED: choices.count(PADDED)}
    return result


def benchmark(args, preset: Preset, corpus: Corpus, device) -> dict:
    max_positions = max(p.capacity for p in preset.profiles)
    model = make_model(preset.layers, preset.hidden, preset.heads, preset.intermediate,
                       max_positions, device, args.seed)
    trainer = Trainer(model, preset.lr, device)
    params = sum(p.numel() for p in model.parameters())
    log.info("model: %.1fM parameters", params / 1e6)

    unavailable = {}
    if (why := torch_varlen_available(device)) is None:
        varpack.hf.register_varlen_function("torch_varlen", torch_varlen_function())
    else:
        unavailable["packed_torch"] = why
    if (why := varpack_available(device)) is None:
        varpack.hf.register()
    else:
        unavailable["packed_varpack"] = why
    # The automatic mode's varlen path: varpack's kernel, else torch's (said in the results).
    auto_varlen = ("varpack" if "packed_varpack" not in unavailable else
                   "torch_varlen" if "packed_torch" not in unavailable else None)
    if auto_varlen is None:
        unavailable["auto"] = "no varlen kernel available for its varlen path"

    chooser, calibration = None, None
    if "auto" in args.modes and auto_varlen is not None:
        longest = max(p.max_length for p in preset.profiles)
        try:
            chooser, padded_points, varlen_points = calibrate(trainer, preset, auto_varlen, device, longest)
            calibration = {"varlen_kernel": auto_varlen,
                           "padded": chooser.padded.to_dict(), "varlen": chooser.varlen.to_dict(),
                           "padded_points": [[len(l), l[0], t] for l, t in padded_points],
                           "varlen_points": [[len(l), l[0], t] for l, t in varlen_points]}
        except Exception as error:  # the other modes still run
            log.exception("calibration failed")
            unavailable["auto"] = f"calibration failed: {type(error).__name__}: {error}"

    results = {"profiles": {}, "calibration": calibration, "parameters": params}
    for profile in preset.profiles:
        steps = draw_steps(corpus, profile, preset.tokens_per_step,
                           preset.warmup_steps + preset.timed_steps, args.seed)
        rows = {}
        for mode in args.modes:
            if mode in unavailable:
                rows[mode] = {"mode": mode, "status": "not available", "reason": unavailable[mode]}
                log.warning("%s / %s: not available: %s", profile.name, mode, unavailable[mode])
                continue
            try:
                rows[mode] = run_mode(trainer, mode, steps, profile, preset, auto_varlen, chooser, device)
            except Exception as error:  # a kernel that fails is reported, never replaced
                log.exception("%s / %s failed", profile.name, mode)
                rows[mode] = {"mode": mode, "status": "failed", "reason": f"{type(error).__name__}: {error}"}
                continue
            r = rows[mode]
            log.info("%s / %-14s %8.1f ms/step  %10.0f valid tok/s  padding %5.1f%%  peak %s GiB",
                     profile.name, mode, r["step_ms_median"], r["valid_tokens_per_s"],
                     100 * r["padding_rate"],
                     f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None else "-")
        base = rows.get("fixed", {}).get("valid_tokens_per_s")
        for r in rows.values():
            if base and r.get("status") == "ok":
                r["speedup_vs_fixed"] = r["valid_tokens_per_s"] / base
        results["profiles"][profile.name] = {
            "min_length": profile.min_length, "max_length": profile.max_length,
            "capacity": profile.capacity, "modes": rows}
    del trainer, model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


# ---------------------------------------------------------------- loss parity

def parity(args, preset: Preset, corpus: Corpus, device, varlen_attn: str | None) -> dict:
    """A small model trained packed (varlen) and padded (SDPA) on the same steps from the same
    weights; held-out loss every few steps, evaluated the same way for both."""
    if varlen_attn is None:
        return {"status": "not available", "reason": "no varlen kernel available on this device"}
    profile = preset.profiles[0]
    layers, hidden, heads, intermediate = preset.parity_model
    model = make_model(layers, hidden, heads, intermediate, profile.capacity, device, args.seed + 1)
    trainer = Trainer(model, preset.parity_lr, device, warmup=preset.parity_steps // 10,
                      total=preset.parity_steps)
    steps = draw_steps(corpus, profile, preset.parity_tokens_per_step, preset.parity_steps, args.seed + 2)
    eval_samples = draw_steps(corpus, profile, profile.max_length * preset.parity_eval_samples, 1,
                              args.seed + 3, split="heldout")[0][:preset.parity_eval_samples]
    eval_batches = [padded_batch(eval_samples[i:i + 16], None)
                    for i in range(0, len(eval_samples), 16)]
    curves = {}
    for name, make in (("packed", lambda s: packed_batch(s, profile.capacity, varlen_attn)),
                       ("padded", lambda s: padded_batch(s, profile.max_length))):
        trainer.reset()
        train_loss, heldout = [], []
        for index, samples in enumerate(steps):
            train_loss.append(trainer.run(make(samples)))
            if (index + 1) % preset.parity_eval_every == 0 or index + 1 == len(steps):
                heldout.append([index + 1, trainer.evaluate(eval_batches)])
        curves[name] = {"train": [float(x) for x in train_loss], "heldout": heldout}
        log.info("parity %s: final held-out loss %.4f", name, heldout[-1][1])
    final_packed, final_padded = curves["packed"]["heldout"][-1][1], curves["padded"]["heldout"][-1][1]
    relative = abs(final_packed - final_padded) / final_padded
    every = [abs(a[1] - b[1]) / b[1] for a, b in zip(curves["packed"]["heldout"], curves["padded"]["heldout"])]
    return {"status": "ok", "varlen_kernel": varlen_attn, "steps": len(steps),
            "largest_relative_difference_any_eval": max(every),
            "tokens_per_step": preset.parity_tokens_per_step, "model": preset.parity_model,
            "final_heldout_packed": final_packed, "final_heldout_padded": final_padded,
            "relative_difference": relative, "within_1_percent": relative < 0.01, "curves": curves}


# ---------------------------------------------------------------- per-sample parity on the device

def sample_parity(args, preset: Preset, corpus: Corpus, device, kernels: list) -> dict:
    """Same weights, one step's samples: per-sample losses and gradients of each packed varlen
    kernel vs the samples run one by one, in bf16 autocast on CUDA. Tolerance as the reference
    kernel projects use: the packed error against a float32 one-by-one run may be at most twice
    (losses) or three times (gradients) the error of the bf16 one-by-one run itself."""
    profile = preset.profiles[0]
    layers, hidden, heads, intermediate = preset.parity_model
    model = make_model(layers, hidden, heads, intermediate, profile.capacity, device, args.seed + 4)
    samples = draw_steps(corpus, profile, preset.parity_tokens_per_step // 2, 1, args.seed + 5)[0]
    half = device.type == "cuda"

    def run(attn: str, packed: bool, low_precision: bool):
        model.zero_grad(set_to_none=True)
        model.config._attn_implementation = attn
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=low_precision and half):
            with sdpa_context(device):
                if packed:
                    batch = packed_batch(samples, profile.capacity, attn)
                    inputs = to_device(batch, device)
                    labels = inputs.pop("labels")
                    logits = model(**inputs).logits
                    losses = torch.empty(len(samples), device=device)
                    losses[batch.segment_sample.to(device)] = per_sample_losses(
                        logits, labels, inputs["cu_seq_lens_q"]).float()
                else:
                    losses = []
                    for sample in samples:
                        ids = torch.as_tensor(sample, dtype=torch.int64, device=device)[None]
                        labels = ids.clone()
                        labels[0, 0] = -100
                        bounds = torch.tensor([0, ids.shape[1]], dtype=torch.int32, device=device)
                        losses.append(per_sample_losses(model(input_ids=ids).logits, labels, bounds).float())
                    losses = torch.cat(losses)
        torch.nansum(losses).backward()
        grads = torch.cat([p.grad.reshape(-1).float() for p in model.parameters()])
        return losses.detach(), grads

    reference_losses, reference_grads = run("sdpa", packed=False, low_precision=False)
    base_losses, base_grads = run("sdpa", packed=False, low_precision=True)
    scale = reference_grads.abs().max()
    base_loss_error = float((base_losses - reference_losses).abs().max())
    base_grad_error = float((base_grads - reference_grads).abs().max() / scale)
    out = {"samples": len(samples), "precision": "bf16 autocast" if half else "float32",
           "one_by_one_bf16": {"loss_error": base_loss_error, "grad_error": base_grad_error}}
    for attn in kernels:
        try:
            losses, grads = run(attn, packed=True, low_precision=True)
        except Exception as error:
            log.exception("sample parity with %s failed", attn)
            out[attn] = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
            continue
        loss_error = float((losses - reference_losses).abs().max())
        grad_error = float((grads - reference_grads).abs().max() / scale)
        # The floor covers float32 runs, where the one-by-one run has no error of its own.
        ok = (loss_error <= 2 * base_loss_error + 1e-5 and grad_error <= 3 * base_grad_error + 1e-5)
        out[attn] = {"status": "ok", "loss_error": loss_error, "grad_error": grad_error,
                     "within_tolerance": ok}
        log.info("per-sample parity %s: loss error %.3g (bf16 one-by-one %.3g), gradient error "
                 "%.3g (%.3g): %s", attn, loss_error, base_loss_error, grad_error, base_grad_error,
                 "ok" if ok else "OUT OF TOLERANCE")
    return out


# ---------------------------------------------------------------- reporting

def plots(results: dict, out: pathlib.Path) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no PNG plots (results.json has the curves)")
        return []
    written = []
    profiles = results.get("benchmark", {}).get("profiles", {})
    if profiles:
        fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 4), squeeze=False)
        for ax, (name, profile) in zip(axes[0], profiles.items()):
            for mode, r in profile["modes"].items():
                if r.get("status") == "ok":
                    ax.plot(range(1, len(r["losses"]) + 1), r["losses"], label=mode, alpha=0.8)
            ax.set(title=f"{name}: lengths {profile['min_length']}..{profile['max_length']}",
                   xlabel="step", ylabel="training loss (per token)")
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "loss_curves.png", dpi=110)
        written.append("loss_curves.png")
    par = results.get("parity", {})
    if par.get("status") == "ok":
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, curve in par["curves"].items():
            style = "-" if name == "packed" else "--"  # dashed on top: overlap stays visible
            ax.plot(range(1, len(curve["train"]) + 1), curve["train"], style, alpha=0.5,
                    label=f"{name} train")
            steps, values = zip(*curve["heldout"])
            ax.plot(steps, values, style, marker="o", label=f"{name} held-out")
        ax.set(title=f"packed ({par['varlen_kernel']}) vs padded: held-out differs by "
                     f"{100 * par['relative_difference']:.2f}%", xlabel="step", ylabel="loss")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "parity.png", dpi=110)
        written.append("parity.png")
    return written


def markdown(results: dict) -> str:
    env = results["environment"]
    lines = [f"# Training benchmark ({env['date']}, {env['device']})", "",
             f"Command: `{env['command']}`", "",
             f"torch {env['torch']}, transformers {env['transformers']}."]
    bench = results.get("benchmark")
    if bench:
        lines[-1] += (f" Model {bench['parameters'] / 1e6:.1f}M parameters; "
                      f"{env['tokens_per_step']} valid tokens per step at most, same samples in every "
                      f"mode; median of {env['timed_steps']} steps after {env['warmup_steps']} warm-up.")
    lines.append("")
    for name, profile in (bench or {}).get("profiles", {}).items():
        lines += [f"## {name}: lengths {profile['min_length']}..{profile['max_length']}, "
                  f"rows of {profile['capacity']}", "",
                  "| mode | step ms | valid tok/s | vs fixed | padding | peak GiB | note |",
                  "|---|---|---|---|---|---|---|"]
        for mode, r in profile["modes"].items():
            if r.get("status") != "ok":
                lines.append(f"| {mode} | - | - | - | - | - | {r['status']}: {r['reason']} |")
                continue
            note = ""
            if mode.startswith("packed"):
                note = f"rows of {profile['capacity']} would be {100 * r['row_padding_rate']:.1f}% padding"
            if "auto_choices" in r:
                note = f"varlen {r['auto_choices'][VARLEN]} / padded {r['auto_choices'][PADDED]} steps"
            mem = f"{r['peak_memory_gib']:.1f}" if r["peak_memory_gib"] is not None else "-"
            lines.append(f"| {mode} | {r['step_ms_median']:.1f} | {r['valid_tokens_per_s']:.0f} | "
                         f"{r.get('speedup_vs_fixed', float('nan')):.2f}x | "
                         f"{100 * r['padding_rate']:.1f}% | {mem} | {note} |")
        lines.append("")
    sp = results.get("sample_parity", {"status": "not run yet", "reason": "-"})
    lines += ["## Per-sample parity (one step, same weights, packed vs one by one)", ""]
    if "one_by_one_bf16" in sp:
        base = sp["one_by_one_bf16"]
        lines += [f"{sp['samples']} samples, {sp['precision']}; errors against a float32 one-by-one "
                  f"run (losses: max abs; gradients: max abs / largest). One by one in the same "
                  f"precision: loss {base['loss_error']:.3g}, gradient {base['grad_error']:.3g}.", "",
                  "| kernel | loss error | gradient error | within 2x / 3x of one-by-one |", "|---|---|---|---|"]
        for name, r in sp.items():
            if isinstance(r, dict) and "status" in r:
                lines.append(f"| {name} | {r['loss_error']:.3g} | {r['grad_error']:.3g} | "
                             f"{r['within_tolerance']} |" if r["status"] == "ok"
                             else f"| {name} | {r['status']}: {r['reason']} | | |")
    else:
        lines.append(f"{sp.get('status')}: {sp.get('reason')}")
    lines.append("")
    par = results.get("parity", {"status": "not run yet", "reason": "-"})
    lines += ["## Loss parity (packed vs padded, same steps, same initial weights)", ""]
    if par.get("status") == "ok":
        lines.append(f"{par['steps']} steps of {par['tokens_per_step']} tokens, model {par['model']} "
                     f"(layers, hidden, heads, mlp), packed with {par['varlen_kernel']}: held-out loss "
                     f"packed {par['final_heldout_packed']:.4f}, padded {par['final_heldout_padded']:.4f}, "
                     f"relative difference {100 * par['relative_difference']:.3f}% "
                     f"({'within' if par['within_1_percent'] else 'NOT within'} 1%); largest "
                     f"difference at any of the {len(par['curves']['packed']['heldout'])} evaluations "
                     f"{100 * par['largest_relative_difference_any_eval']:.3f}%.")
    else:
        lines.append(f"{par.get('status')}: {par.get('reason')}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="output folder")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="h200")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--parity-steps", type=int, default=None, help="0 skips the parity run")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-files", type=int, default=None, help="read only this many stdlib files")
    args = parser.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    args.phases = [p for p in args.phases.split(",") if p]
    for phase in args.phases:
        if phase not in PHASES:
            parser.error(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    with cpu_threads(args.preset):
        return run(args)


@contextlib.contextmanager
def cpu_threads(preset: str):
    """The smoke preset's matrices are tiny: one thread beats several that spin on barriers
    (8x faster on a loaded 2-core machine). The previous setting comes back afterwards."""
    previous = torch.get_num_threads()
    if preset == "smoke":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run(args):
    preset = PRESETS[args.preset]
    if args.parity_steps is not None:
        preset = dataclasses.replace(preset, parity_steps=args.parity_steps)
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)

    import transformers
    corpus = Corpus(max_files=args.max_files)
    log.info("corpus: %d files, %d train and %d held-out byte tokens", corpus.files,
             len(corpus.train), len(corpus.heldout))
    started = time.time()
    results = {"environment": {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "command": " ".join(["python", *sys.argv]), "preset": args.preset,
        "tokens_per_step": preset.tokens_per_step, "warmup_steps": preset.warmup_steps,
        "timed_steps": preset.timed_steps}}

    def save():
        """Written after every phase: a run cut short by a time limit keeps what it measured."""
        results["environment"]["seconds"] = time.time() - started
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        (args.out / "results.md").write_text(markdown(results))

    if "benchmark" in args.phases:
        results["benchmark"] = benchmark(args, preset, corpus, device)
        save()
    # The parity phases use both kernels under these names (benchmark() registers them too).
    kernels = [name for name, why in (("varpack", varpack_available(device)),
                                      ("torch_varlen", torch_varlen_available(device))) if why is None]
    if "torch_varlen" in kernels:
        varpack.hf.register_varlen_function("torch_varlen", torch_varlen_function())
    if "varpack" in kernels:
        varpack.hf.register()
    if "sample_parity" in args.phases:
        try:
            results["sample_parity"] = sample_parity(args, preset, corpus, device, kernels)
        except Exception as error:
            log.exception("per-sample parity failed")
            results["sample_parity"] = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        save()
    if "parity" not in args.phases or preset.parity_steps <= 0:
        results["parity"] = {"status": "skipped", "reason": "--parity-steps 0"}
    else:
        try:  # the varlen side: varpack's kernel, else torch's
            results["parity"] = parity(args, preset, corpus, device, kernels[0] if kernels else None)
        except Exception as error:
            log.exception("parity run failed")
            results["parity"] = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
    save()
    try:
        written = plots(results, args.out)
    except Exception:  # the numbers are written already; a plot is a convenience
        log.exception("plotting failed")
        written = []
    log.info("wrote results.json, results.md%s to %s", "".join(", " + w for w in written), args.out)
    return results


if __name__ == "__main__":
    main()
