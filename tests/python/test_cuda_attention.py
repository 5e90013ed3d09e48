"""The CUDA varlen attention (varpack::varlen_fwd / varlen_bwd on CUDA tensors) against a float32
reference written with plain torch ops, under FlashAttention's rule: the kernel's max error is at
most 2x that of the same reference computed in the input dtype (3x for gradients). Also leakage
(perturbing one sample changes no other, bit for bit), determinism, offsets past 2^31 elements,
rows past cu_seqlens[-1], and torch.compile. The backward runs in both modes: deterministic=True (two
passes, no atomics) and False (dQ summed with fp32 atomics, whose order varies run to run, so dq is
compared up to that reordering where other tests compare bits). Skipped where CUDA or the CUDA build
is missing."""

from __future__ import annotations

import pytest
import torch

varpack = pytest.importorskip("varpack")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DEV = "cuda"


def cu_of(lengths):
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=DEV)


def visible_mask(lq, lk, causal, window, device):
    """[lq, lk] bool: key j visible from query i, diagonal aligned bottom-right."""
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    off = lk - lq
    left, right = window
    if causal:
        right = 0
    m = torch.ones(lq, lk, dtype=torch.bool, device=device)
    if left >= 0:
        m &= j >= i + off - left
    if right >= 0:
        m &= j <= i + off + right
    return m


def reference(q, k, v, cu_q, cu_k, causal, window, softcap, scale, dtype):
    """out [Tq, H, D] and lse [H, Tq] with every product in `dtype`; rows past the end get 0/+inf."""
    heads, kv_heads = q.shape[1], k.shape[1]
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    outs, lses = [], []
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        qs, ks, vs = q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]
        ks = ks.repeat_interleave(heads // kv_heads, dim=1)
        vs = vs.repeat_interleave(heads // kv_heads, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        vis = visible_mask(qs.shape[0], ks.shape[0], causal, window, q.device)
        any_vis = vis.any(-1)
        # Rows that see no key get a harmless all-zero row before softmax, then probability 0.
        s = s.float().masked_fill(~vis, float("-inf")).masked_fill(~any_vis[:, None], 0.0)
        p = torch.softmax(s, dim=-1) * vis
        lse = torch.logsumexp(s, dim=-1).masked_fill(~any_vis, float("inf"))
        outs.append(torch.einsum("hqk,khd->qhd", p.to(dtype), vs))
        lses.append(lse)
    tail = q.shape[0] - cq[-1]
    outs.append(q.new_zeros(tail, heads, q.shape[2]))
    lses.append(torch.full((heads, tail), float("inf"), device=q.device))
    return torch.cat(outs), torch.cat(lses, dim=1)


def make_inputs(q_lens, k_lens, heads, kv_heads, d, dtype, extra_q=3, extra_k=2, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    tq, tk = sum(q_lens) + extra_q, sum(k_lens) + extra_k
    q = torch.randn(tq, heads, d, device=DEV, dtype=dtype, generator=g)
    k = torch.randn(tk, kv_heads, d, device=DEV, dtype=dtype, generator=g)
    v = torch.randn(tk, kv_heads, d, device=DEV, dtype=dtype, generator=g)
    dout = torch.randn(tq, heads, d, device=DEV, dtype=dtype, generator=g)
    return q, k, v, dout


def run_kernel(q, k, v, dout, cu_q, cu_k, lq, lk, causal, window, softcap, deterministic=False):
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out, lse, _ = varpack.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lq, default=0), max(lk, default=0), causal=causal,
        window_size=window, softcap=softcap, deterministic=deterministic, return_attn_probs=True)
    out.backward(dout)
    return out.detach(), lse, q.grad, k.grad, v.grad


def run_reference(q, k, v, dout, cu_q, cu_k, causal, window, softcap, dtype):
    q, k, v = (x.detach().to(dtype).requires_grad_() for x in (q, k, v))
    out, lse = reference(q, k, v, cu_q, cu_k, causal, window, softcap, q.shape[-1] ** -0.5, dtype)
    out.backward(dout.to(dtype))
    return out.detach(), lse, q.grad, k.grad, v.grad


def max_err(a, b):
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


def assert_equal_up_to_atomic_order(a, b, name):
    """a == b up to the order of fp32 additions before rounding to 16 bits (a few ulps at most);
    any real dependence (a leak, a wrong row) changes values by far more."""
    a, b = a.float(), b.float()
    scale = b.abs().max().item() if b.numel() else 0.0
    assert torch.allclose(a, b, rtol=2 ** -6, atol=1e-3 * scale), (
        f"{name} differs by {max_err(a, b):.3e} (values up to {scale:.3e})")


def assert_outputs_match(got, ref, low):
    """out, dq, dk, dv finite and within a small multiple of the error that the same arithmetic in
    the inputs' dtype (low) makes against fp32 (ref)."""
    for name, i, factor in (("out", 0, 2), ("dq", 2, 3), ("dk", 3, 3), ("dv", 4, 3)):
        assert torch.isfinite(got[i]).all(), f"{name} has non-finite values"
        err, base = max_err(got[i], ref[i]), max_err(low[i], ref[i])
        assert err <= factor * base + 1e-4, f"{name}: max error {err:.3e} > {factor} x {base:.3e}"


def causal_self_attention_checked(q, k, v, dout, lens, deterministic):
    """The kernel on one causal batch (q and k of the same lengths), its outputs checked against
    the references; returns the kernel's outputs and the fp32 reference's."""
    cu = cu_of(lens)
    got = run_kernel(q, k, v, dout, cu, cu, lens, lens, True, (-1, -1), 0.0, deterministic)
    ref = run_reference(q, k, v, dout, cu, cu, True, (-1, -1), 0.0, torch.float32)
    low = run_reference(q, k, v, dout, cu, cu, True, (-1, -1), 0.0, q.dtype)
    assert_outputs_match(got, ref, low)
    return got, ref


MODES = pytest.mark.parametrize("deterministic", [True, False], ids=["determ", "atomic"])


EDGES = [0, 1, 63, 64, 65, 127, 128, 129, 17, 300]

CASES = [
    # (dtype, d, heads, kv_heads, causal, window, softcap, q_lens, k_lens)
    (torch.bfloat16, 128, 4, 4, False, (-1, -1), 0.0, EDGES, EDGES),
    (torch.bfloat16, 128, 4, 4, True, (-1, -1), 0.0, EDGES, EDGES),
    (torch.bfloat16, 64, 6, 2, True, (-1, -1), 0.0, EDGES, EDGES),
    (torch.bfloat16, 128, 9, 1, True, (-1, -1), 0.0, EDGES, EDGES),
    (torch.bfloat16, 128, 3, 3, True, (-1, -1), 0.0, EDGES, [n + 37 for n in EDGES]),
    (torch.bfloat16, 128, 3, 3, True, (-1, -1), 0.0, [n + 37 for n in EDGES], EDGES),
    (torch.bfloat16, 64, 2, 1, False, (50, 10), 0.0, EDGES, EDGES),
    (torch.bfloat16, 128, 2, 2, True, (100, -1), 0.0, [700, 1, 257], [700, 1, 257]),
    (torch.bfloat16, 128, 4, 2, True, (-1, -1), 3.0, EDGES, EDGES),
    (torch.float16, 64, 4, 4, False, (-1, -1), 0.0, EDGES, EDGES),
    (torch.float16, 128, 8, 2, True, (-1, -1), 0.0, EDGES, EDGES),
    (torch.float16, 128, 2, 1, True, (20, 0), 5.0, [513, 2, 1000], [513, 2, 1000]),
    # Head dims 96 and 256 (on Hopper the wgmma forward and the mma.sync backward).
    (torch.bfloat16, 96, 4, 2, False, (-1, -1), 0.0, EDGES, EDGES),
    (torch.float16, 96, 4, 1, True, (-1, -1), 0.0, EDGES, [n + 37 for n in EDGES]),
    (torch.bfloat16, 96, 2, 2, True, (100, -1), 2.0, [700, 1, 257], [700, 1, 257]),
    (torch.float16, 96, 4, 2, False, (50, 10), 0.0, [n + 37 for n in EDGES], EDGES),
    (torch.bfloat16, 256, 4, 1, True, (-1, -1), 0.0, EDGES, EDGES),
    (torch.float16, 256, 4, 2, False, (-1, -1), 0.0, EDGES, [n + 37 for n in EDGES]),
    (torch.bfloat16, 256, 2, 1, True, (20, 0), 5.0, [513, 2, 1000], [513, 2, 1000]),
    (torch.float16, 256, 3, 3, True, (-1, -1), 3.0, [n + 37 for n in EDGES], EDGES),
]


@MODES
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[2]}/{c[3]}-"
                         f"causal{int(c[4])}-w{c[5][0]}_{c[5][1]}-cap{c[6]:g}")
def test_matches_reference(case, deterministic):
    dtype, d, heads, kv_heads, causal, window, softcap, lq, lk = case
    q, k, v, dout = make_inputs(lq, lk, heads, kv_heads, d, dtype)
    cu_q, cu_k = cu_of(lq), cu_of(lk)
    got = run_kernel(q, k, v, dout, cu_q, cu_k, lq, lk, causal, window, softcap, deterministic)
    ref = run_reference(q, k, v, dout, cu_q, cu_k, causal, window, softcap, torch.float32)
    low = run_reference(q, k, v, dout, cu_q, cu_k, causal, window, softcap, dtype)
    assert_outputs_match(got, ref, low)
    # lse: fp32 arithmetic on the same inputs; +inf exactly where no key is visible.
    assert torch.equal(torch.isinf(got[1]), torch.isinf(ref[1]))
    fin = torch.isfinite(ref[1])
    assert max_err(got[1][fin], ref[1][fin]) < 1e-3


@MODES
@pytest.mark.parametrize("d", [128, 64])  # at d64 past 4096 queries, the forward's three consumers
def test_long_sequence_among_short(deterministic, d):
    lens = [16384] + [37, 1, 0, 129, 64, 500, 191, 192, 193] * 8
    q, k, v, dout = make_inputs(lens, lens, 2, 1, d, torch.bfloat16, seed=1)
    causal_self_attention_checked(q, k, v, dout, lens, deterministic)


@MODES
@pytest.mark.parametrize("d", [256, 128, 64])
def test_scores_whose_row_maximum_jumps(deterministic, d):
    # q scaled by 6: scores of standard deviation 6, so a row's running maximum now and then jumps
    # by more than 2^8 from one key tile to the next (the Hopper forward at d256 rescales only then).
    lens = [5000, 700, 129, 1]
    q, k, v, dout = make_inputs(lens, lens, 2, 1, d, torch.bfloat16, seed=3)
    got, ref = causal_self_attention_checked(q * 6, k, v, dout, lens, deterministic)
    fin = torch.isfinite(ref[1])
    assert max_err(got[1][fin], ref[1][fin]) < 1e-3


@MODES
def test_no_leakage_between_samples(deterministic):
    lens = [300, 517, 1, 64, 129]
    q, k, v, dout = make_inputs(lens, lens, 4, 2, 128, torch.bfloat16, seed=2)
    cu = cu_of(lens)
    base = run_kernel(q, k, v, dout, cu, cu, lens, lens, True, (-1, -1), 0.0, deterministic)
    s, e = 300, 817  # sample 1
    q2, k2, v2, do2 = q.clone(), k.clone(), v.clone(), dout.clone()
    for t in (q2, k2, v2, do2):
        t[s:e] = torch.randn_like(t[s:e])
    pert = run_kernel(q2, k2, v2, do2, cu, cu, lens, lens, True, (-1, -1), 0.0, deterministic)
    keep_q = torch.ones(q.shape[0], dtype=torch.bool, device=DEV)
    keep_k = torch.ones(k.shape[0], dtype=torch.bool, device=DEV)
    keep_q[s:e] = False
    keep_k[s:e] = False
    for i, name, keep in ((0, "out", keep_q), (2, "dq", keep_q), (3, "dk", keep_k),
                          (4, "dv", keep_k)):
        if name == "dq" and not deterministic:
            assert_equal_up_to_atomic_order(pert[i][keep], base[i][keep], "dq of other samples")
            continue
        assert torch.equal(base[i][keep], pert[i][keep]), f"{name} of other samples changed"
    assert torch.equal(base[1][:, keep_q], pert[1][:, keep_q]), "lse of other samples changed"


def test_deterministic_backward_is_bitwise_repeatable():
    lens = [4096, 1000, 3, 2000]
    q, k, v, dout = make_inputs(lens, lens, 8, 2, 128, torch.bfloat16, seed=3)
    cu = cu_of(lens)
    a = run_kernel(q, k, v, dout, cu, cu, lens, lens, True, (-1, -1), 0.0, deterministic=True)
    b = run_kernel(q, k, v, dout, cu, cu, lens, lens, True, (-1, -1), 0.0, deterministic=True)
    for i, name in ((0, "out"), (2, "dq"), (3, "dk"), (4, "dv")):
        assert torch.equal(a[i], b[i]), f"{name} differs between two identical runs"


@MODES
def test_rows_past_the_end_are_zero(deterministic):
    lens = [65, 0, 130]
    q, k, v, dout = make_inputs(lens, lens, 2, 2, 64, torch.bfloat16, extra_q=40, extra_k=33,
                                seed=4)
    cu = cu_of(lens)
    out, lse, dq, dk, dv = run_kernel(q, k, v, dout, cu, cu, lens, lens, False, (-1, -1), 0.0,
                                      deterministic)
    end = sum(lens)
    assert torch.all(out[end:] == 0) and torch.all(torch.isinf(lse[:, end:]))
    assert torch.all(dq[end:] == 0) and torch.all(dk[end:] == 0) and torch.all(dv[end:] == 0)


@MODES
def test_offsets_past_2_pow_31_elements(deterministic):
    # 1025 sequences of 1024 rows x 16 heads x 128: q holds 2^31 + 2^21 elements, so the last
    # sequence starts past 2^31. Its result must equal, bit for bit, the same sequence run alone.
    heads, d, n, count = 16, 128, 1024, 1025
    lens = [n] * count
    total = n * count
    assert total * heads * d > 2 ** 31
    g = torch.Generator(device=DEV).manual_seed(5)
    q = torch.randn(total, heads, d, device=DEV, dtype=torch.bfloat16, generator=g)
    k = torch.randn(total, heads, d, device=DEV, dtype=torch.bfloat16, generator=g)
    v = torch.randn(total, heads, d, device=DEV, dtype=torch.bfloat16, generator=g)
    cu = cu_of(lens)
    out, lse = torch.ops.varpack.varlen_fwd(q, k, v, cu, cu, n, n, d ** -0.5, True, -1, -1, 0.0)
    dout = torch.randn_like(q)
    dq, dk, dv = torch.ops.varpack.varlen_bwd(dout, q, k, v, out, lse, cu, cu, n, n, d ** -0.5, True,
                                              -1, -1, 0.0, deterministic)
    last = slice(total - n, total)
    one = cu_of([n])
    out1, lse1 = torch.ops.varpack.varlen_fwd(q[last], k[last], v[last], one, one, n, n, d ** -0.5,
                                              True, -1, -1, 0.0)
    dq1, dk1, dv1 = torch.ops.varpack.varlen_bwd(dout[last], q[last], k[last], v[last], out1, lse1,
                                                 one, one, n, n, d ** -0.5, True, -1, -1, 0.0,
                                                 deterministic)
    assert torch.equal(out[last], out1) and torch.equal(lse[:, last], lse1)
    assert torch.equal(dk[last], dk1) and torch.equal(dv[last], dv1)
    if deterministic:
        assert torch.equal(dq[last], dq1)
    else:
        assert_equal_up_to_atomic_order(dq[last], dq1, "dq of the last sequence")


def test_torch_compile_fullgraph():
    lens = [100, 0, 260]
    q, k, v, dout = make_inputs(lens, lens, 4, 4, 64, torch.bfloat16, seed=6)
    cu = cu_of(lens)

    def f(q, k, v):
        return varpack.flash_attn_varlen_func(q, k, v, cu, cu, 260, 260, causal=True)

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    assert torch.equal(eager, compiled)
