"""Energy per call of varpack's attention and of cuDNN's padded SDPA, under a sustained load.

Why: the H200 runs these kernels at its power cap (700 W), where the clock, and so the time, follows
the energy each step takes. Timed alone for ten steps (trace_step.py) varpack's 16 x 4k step took
7.180 ms against cuDNN's 7.987 ms, yet the five-round peer table (bench_attention_gpu.py) had them
equal (2026-12-03 12:41 UTC). This measures, per implementation, a few seconds of back-to-back
calls: time per call (CUDA events), energy per call (NVML's total energy counter of the device),
mean power and the SM clock NVML reports at the end. bf16, 16 heads x 128, causal, the
benchmark's 64 x 1k and 16 x 4k points; forward alone and forward+backward steps. Implementations
alternate, in --rounds rounds (each round starting one later).

NVML is read through ctypes (libnvidia-ml.so.1 comes with the driver); device index 0, so run it
on a machine with one GPU visible.

Run: python bench/cuda/energy_per_step.py [--seconds 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import ctypes
import time

import torch
import torch.nn.functional as F

import varpack

H, D = 16, 128
DT = torch.bfloat16


class Nvml:
    """The three NVML calls used here, on device 0."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)),
                    "nvmlDeviceGetHandleByIndex_v2")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned NVML error {rc}")

    def energy_mj(self):
        e = ctypes.c_ulonglong()
        self._check(self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)),
                    "nvmlDeviceGetTotalEnergyConsumption")
        return e.value

    def sm_clock_mhz(self):
        c = ctypes.c_uint()
        self._check(self.lib.nvmlDeviceGetClockInfo(self.handle, 1, ctypes.byref(c)),  # 1: SM
                    "nvmlDeviceGetClockInfo")
        return c.value


def implementations(rows, length):
    """label -> (forward callable, inputs, output gradient) for one point."""
    total = rows * length
    cu = torch.arange(0, total + 1, length, dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(total, H, D, device="cuda", dtype=DT, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(total, H, D, device="cuda", dtype=DT)
    qp, kp, vp = (torch.randn(rows, H, length, D, device="cuda", dtype=DT, requires_grad=True)
                  for _ in range(3))
    dp = torch.randn(rows, H, length, D, device="cuda", dtype=DT)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "varpack": (lambda q, k, v: varpack.flash_attn_varlen_func(
            q, k, v, cu, cu, length, length, causal=True), (q, k, v), dout),
        "cuDNN SDPA padded": (cudnn, (qp, kp, vp), dp),
    }


def sustained(nvml, call, seconds):
    """(ms per call, J per call, mean W, SM MHz at the end) over about `seconds` of calls queued
    back to back (the host waits only when the queue is far ahead)."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    e0 = nvml.energy_mj()
    start.record()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        call()
        calls += 1
        if calls % 50 == 0:  # keep the queue bounded
            torch.cuda.synchronize()
    end.record()
    end.synchronize()
    mhz = nvml.sm_clock_mhz()
    joules = (nvml.energy_mj() - e0) / 1000.0
    ms = start.elapsed_time(end)
    return ms / calls, joules / calls, joules / (ms / 1000.0), mhz


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0, help="of calls per measurement")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    nvml = Nvml()
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print("| point | implementation | call | round | ms | J | W | SM MHz at end |")
    print("|---|---|---|---|---|---|---|---|")
    for rows, length in ((64, 1024), (16, 4096)):
        impls = implementations(rows, length)
        labels = list(impls)
        for kind in ("fwd", "fwd+bwd"):
            for round_no in range(args.rounds):
                turn = round_no % len(labels)
                for label in labels[turn:] + labels[:turn]:
                    fn, inputs, grad = impls[label]
                    if kind == "fwd":
                        def call(fn=fn, inputs=inputs):
                            with torch.no_grad():
                                fn(*inputs)
                    else:
                        def call(fn=fn, inputs=inputs, grad=grad):
                            for t in inputs:
                                t.grad = None
                            fn(*inputs).backward(grad)
                    ms, j, w, mhz = sustained(nvml, call, args.seconds)
                    print(f"| {rows} x {length // 1024}k | {label} | {kind} | {round_no + 1} | "
                          f"{ms:.3f} | {j:.3f} | {w:.0f} | {mhz} |", flush=True)
        del impls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
