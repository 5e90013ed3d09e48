"""torch.ops.varpack.merge_partial, the log-sum-exp merge of one partial attention result into a
running one: the CPU implementation against the rule written out in float64, row by row (parts that
saw no key, accumulators that hold nothing yet and garbage under them, strided slices, zero and one
rows), and the CUDA implementation against the CPU one."""
from __future__ import annotations

import math

import pytest
import torch

import varpack  # noqa: F401  registers torch.ops.varpack

INF = float("inf")


def rule(out, lse, o, l):
    """The merge, one (row, head) at a time in float64: what the operator must compute."""
    out, lse = out.double().clone(), lse.double().clone()
    for h in range(lse.shape[0]):
        for r in range(lse.shape[1]):
            part, old = float(l[h, r]), float(lse[h, r])
            if math.isinf(part):
                continue  # the part saw no key
            if old == -INF:
                out[r, h], lse[h, r] = o[r, h].double(), part
                continue
            new = max(old, part) + math.log1p(math.exp(min(old, part) - max(old, part)))
            out[r, h] = out[r, h] * math.exp(old - new) + o[r, h].double() * math.exp(part - new)
            lse[h, r] = new
    return out, lse


def inputs(rows, heads, d, dtype, device="cpu", seed=0, total=None):
    """A running (out, lse) as slices of larger buffers, and a part (o, l), with every special case."""
    g = torch.Generator().manual_seed(seed)
    total = total or rows + 5
    out_all = torch.randn(total, heads, d, generator=g)
    lse_all = torch.randn(heads, total, generator=g) * 3
    o = torch.randn(rows, heads, d, generator=g).to(dtype)
    l = torch.randn(heads, rows, generator=g) * 3
    if rows:
        lse_all[:, 2:2 + rows][:, ::3] = -INF   # nothing merged yet
        out_all[2:2 + rows][::3] = float("nan")  # ...so whatever is there must not be read
        l[:, ::4] = INF                          # the part saw no key
        l[0, -1] = -INF
    to = lambda t: t.to(device)  # noqa: E731
    out_all, lse_all, o, l = map(to, (out_all, lse_all, o, l))
    return out_all, lse_all, out_all[2:2 + rows], lse_all[:, 2:2 + rows], o, l


@pytest.mark.parametrize("rows,heads,d", [(0, 2, 4), (1, 1, 8), (7, 3, 12), (33, 2, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_merge_follows_the_rule(rows, heads, d, dtype):
    out_all, lse_all, out, lse, o, l = inputs(rows, heads, d, dtype)
    want_out, want_lse = rule(out, lse, o, l)
    before_all = out_all.clone()
    torch.ops.varpack.merge_partial(out, lse, o, l)
    assert torch.allclose(lse.double(), want_lse, rtol=1e-6, atol=1e-6)
    seen = ~torch.isnan(want_out)
    assert torch.equal(seen, ~torch.isnan(out))  # NaN only where a never-merged row got no part
    assert torch.allclose(out.double()[seen], want_out[seen], rtol=1e-5, atol=1e-5)
    # Rows outside the slice are untouched.
    assert torch.equal(out_all[:2], before_all[:2]) and torch.equal(out_all[2 + rows:], before_all[2 + rows:])


def test_first_part_is_copied_exactly():
    out, lse = torch.zeros(5, 2, 4), torch.full((2, 5), -INF)
    o, l = torch.randn(5, 2, 4).bfloat16(), torch.randn(2, 5)
    torch.ops.varpack.merge_partial(out, lse, o, l)
    assert torch.equal(out, o.float()) and torch.equal(lse, l)


def test_bad_arguments_name_the_tensor():
    out, lse = torch.zeros(5, 2, 4), torch.zeros(2, 5)
    with pytest.raises(ValueError, match="o .* must have out's shape"):
        torch.ops.varpack.merge_partial(out, lse, torch.zeros(5, 2, 3), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="lse must be float32"):
        torch.ops.varpack.merge_partial(out, torch.zeros(5, 2), torch.zeros(5, 2, 4), torch.zeros(2, 5))
    with pytest.raises(ValueError, match="out must be float32"):
        torch.ops.varpack.merge_partial(out.double(), lse, torch.zeros(5, 2, 4), torch.zeros(2, 5))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("rows,heads,d", [(0, 2, 64), (1, 1, 64), (1000, 3, 96), (257, 4, 128), (40, 2, 256), (9, 2, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_merge_matches_cpu(rows, heads, d, dtype):
    results = []
    for device in ("cpu", "cuda"):
        out_all, lse_all, out, lse, o, l = inputs(rows, heads, d, dtype, device, seed=rows)
        torch.ops.varpack.merge_partial(out, lse, o, l)
        results.append((out_all.cpu(), lse_all.cpu()))
    (out_cpu, lse_cpu), (out_gpu, lse_gpu) = results
    assert torch.equal(torch.isnan(out_cpu), torch.isnan(out_gpu))
    assert torch.allclose(out_gpu.nan_to_num(), out_cpu.nan_to_num(), rtol=1e-5, atol=1e-6)
    assert torch.allclose(lse_gpu, lse_cpu, rtol=1e-6, atol=1e-6)
