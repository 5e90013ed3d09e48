"""The report's saving curve, measured: time saved by varlen over fixed-length at padding rates
3, 10, 25, 50, 75 and 90%, for attention alone (forward + backward) and for a whole training step
(the training benchmark's model, forward + backward + AdamW), plotted against the report's
2.28% (at 3%) .. 89.73% (at 90%) and against the padding rate itself (the ideal saving).

Layout, as in the reference measurements: 8 rows of 4096, each one sample padded to 4096 (SDPA, cuDNN first), vs the
same samples unpadded through a varlen kernel (torch's varlen_attn; varpack's where its kernel is
registered for the device). Outputs saving_curve.json, saving_curve.md, saving_curve.png in --out.

    python examples/saving_curve.py --out $OUT              # H200
    python examples/saving_curve.py --preset smoke --out /tmp/x
"""
from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import train_packed as tp  # noqa: E402
from corpus import Corpus  # noqa: E402

import varpack  # noqa: E402
import varpack.hf  # noqa: E402

log = logging.getLogger("saving_curve")
PADDING_RATES = (0.03, 0.10, 0.25, 0.50, 0.75, 0.90)
REPORT = {0.03: 0.0228, 0.90: 0.8973}  # the report's measured savings at these padding rates
SHAPES = {"h200": dict(rows=8, width=4096, heads=16, head_dim=128, repeats=10, steps=5),
          "smoke": dict(rows=2, width=64, heads=2, head_dim=16, repeats=2, steps=2)}


def varlen_kernels(device) -> dict:
    """name -> (FA2-style function, attn_implementation name) for every kernel that runs here."""
    kernels = {}
    if tp.torch_varlen_available(device) is None:
        kernels["torch_varlen"] = tp.torch_varlen_function()
    if tp.varpack_available(device) is None:
        kernels["varpack"] = varpack.flash_attn_varlen_func
    return kernels


def attention_alone(shape, kernels, device, dtype) -> dict:
    rows, width, heads, dim = shape["rows"], shape["width"], shape["heads"], shape["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)
    out = {}
    for rate in PADDING_RATES:
        length = max(1, round(width * (1 - rate)))
        q, k, v = (torch.randn(rows, heads, width, dim, device=device, dtype=dtype, generator=gen,
                               requires_grad=True) for _ in range(3))
        grad = torch.randn(rows, heads, width, dim, device=device, dtype=dtype, generator=gen)

        def padded():
            with tp.sdpa_context(device):
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(grad)

        padded()
        times = {"padded_sdpa": tp.timed(padded, device, shape["repeats"])}
        flat = [x[:, :, :length].transpose(1, 2).reshape(rows * length, heads, dim).detach()
                .requires_grad_() for x in (q, k, v)]
        flat_grad = grad[:, :, :length].transpose(1, 2).reshape(rows * length, heads, dim)
        cu = torch.arange(rows + 1, device=device, dtype=torch.int32) * length
        for name, fn in kernels.items():
            def varlen(fn=fn):
                fn(*flat, cu, cu, length, length, causal=True).backward(flat_grad)
            try:
                varlen()
                times[name] = tp.timed(varlen, device, shape["repeats"])
            except Exception as error:  # reported, never replaced
                log.exception("attention %s at %.0f%% padding failed", name, 100 * rate)
                times[name] = f"failed: {type(error).__name__}: {error}"
        out[rate] = times
        log.info("attention, padding %2.0f%%: %s", 100 * rate,
                 {k: (f"{v * 1e3:.3f} ms" if isinstance(v, float) else v) for k, v in times.items()})
    return out


def whole_step(shape, preset, kernels, corpus, device) -> dict:
    rows, width = shape["rows"], shape["width"]
    model = tp.make_model(preset.layers, preset.hidden, preset.heads, preset.intermediate, width,
                          device, seed=0)
    trainer = tp.Trainer(model, preset.lr, device)
    for name, fn in kernels.items():
        if name == "torch_varlen":
            varpack.hf.register_varlen_function("torch_varlen", fn)
        else:
            varpack.hf.register()
    out = {}
    for rate in PADDING_RATES:
        length = max(2, round(width * (1 - rate)))
        samples = corpus.cut([length] * rows)
        layouts = {"padded_sdpa": tp.padded_batch(samples, width)}
        for name in kernels:
            layouts[name] = tp.packed_batch(samples, rows * length, name)
        times = {}
        for name, batch in layouts.items():
            trainer.reset()
            try:
                trainer.run(batch)
                times[name] = tp.timed(lambda: trainer.run(batch), device, shape["steps"])
            except Exception as error:
                log.exception("step %s at %.0f%% padding failed", name, 100 * rate)
                times[name] = f"failed: {type(error).__name__}: {error}"
        out[rate] = times
        log.info("whole step, padding %2.0f%%: %s", 100 * rate,
                 {k: (f"{v * 1e3:.1f} ms" if isinstance(v, float) else v) for k, v in times.items()})
    return out


def savings(times: dict) -> dict:
    """Per varlen kernel and padding rate: 1 - t_varlen / t_padded."""
    result = {}
    for rate, t in times.items():
        for name, value in t.items():
            if name != "padded_sdpa" and isinstance(value, float) and isinstance(t["padded_sdpa"], float):
                result.setdefault(name, {})[rate] = 1.0 - value / t["padded_sdpa"]
    return result


def plot(results, out: pathlib.Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no PNG (saving_curve.json has the numbers)")
        return False
    fig, ax = plt.subplots(figsize=(7, 5))
    rates = np.array(PADDING_RATES) * 100
    ax.plot(rates, rates, "k--", label="padding rate (ideal saving)")
    ax.plot([100 * r for r in REPORT], [100 * s for s in REPORT.values()], "r*", markersize=12,
            label="the report (2.28% .. 89.73%)")
    for part, style in (("attention", "-o"), ("step", "-s")):
        for name, curve in results["savings"][part].items():
            ax.plot([100 * r for r in curve], [100 * s for s in curve.values()], style,
                    label=f"{part}: {name} vs padded SDPA")
    ax.set(xlabel="padding rate (%)", ylabel="time saved by varlen (%)",
           title=f"Saving curve, {results['environment']['device']}")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "saving_curve.png", dpi=110)
    return True


def markdown(results) -> str:
    env = results["environment"]
    lines = [f"# Saving curve ({env['date']}, {env['device']})", "", f"Command: `{env['command']}`", "",
             f"{env['rows']} rows of {env['width']}, one sample per row; saving = 1 - t_varlen / "
             "t_padded (SDPA, cuDNN first). The report: 2.28% at 3%, 89.73% at 90%.", "",
             "| part | kernel | " + " | ".join(f"{100 * r:.0f}%" for r in PADDING_RATES) + " |",
             "|---|---|" + "---|" * len(PADDING_RATES)]
    for part in ("attention", "step"):
        for name, curve in results["savings"][part].items():
            lines.append(f"| {part} | {name} | " + " | ".join(
                f"{100 * curve[r]:.1f}%" if r in curve else "-" for r in PADDING_RATES) + " |")
        for rate in PADDING_RATES:
            failed = {k: v for k, v in results["times"][part][rate].items() if isinstance(v, str)}
            for name, why in failed.items():
                lines.append(f"| {part} | {name} at {100 * rate:.0f}% | {why} |")
    lines += ["", "Times (ms):", ""]
    for part in ("attention", "step"):
        for rate in PADDING_RATES:
            cells = ", ".join(f"{k} {v * 1e3:.3f}" for k, v in results["times"][part][rate].items()
                              if isinstance(v, float))
            lines.append(f"- {part} at {100 * rate:.0f}%: {cells}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--preset", choices=sorted(SHAPES), default="h200")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-files", type=int, default=None, help="read only this many stdlib files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    with tp.cpu_threads(args.preset):
        return run(args)


def run(args):
    device = torch.device(args.device)
    shape, preset = SHAPES[args.preset], tp.PRESETS[args.preset]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.out.mkdir(parents=True, exist_ok=True)
    kernels = varlen_kernels(device)
    if not kernels:
        log.warning("no varlen kernel runs on %s: only the padded times are measured", device)
    times = {"attention": attention_alone(shape, kernels, device, dtype),
             "step": whole_step(shape, preset, kernels, Corpus(max_files=args.max_files), device)}
    results = {
        "environment": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
                        "torch": torch.__version__, "command": " ".join(["python", *sys.argv]),
                        "rows": shape["rows"], "width": shape["width"]},
        "times": times,
        "savings": {part: savings(t) for part, t in times.items()},
    }
    serialisable = json.loads(json.dumps(results, default=str))
    (args.out / "saving_curve.json").write_text(json.dumps(serialisable, indent=1))
    (args.out / "saving_curve.md").write_text(markdown(results))
    plot(results, args.out)
    log.info("wrote saving_curve.* to %s", args.out)
    return results


if __name__ == "__main__":
    main()
