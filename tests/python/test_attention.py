"""Tests of varpack.flash_attn_varlen_func and the varpack::varlen_fwd / varlen_bwd operators.

Every result is compared with an independent plain-torch reference (softmax of masked scores, one
sequence at a time) or with torch's own scaled_dot_product_attention run per sample; gradients go
through gradcheck in float64. The operators are checked with torch.library.opcheck and traced by
torch.compile(fullgraph=True). Inputs are random varlen batches with zero-length and length-1
sequences, q lengths different from k lengths, and rows past cu_seqlens[-1].
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import varpack

INF = float("inf")


def reference_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, scale, causal=False, window=(-1, -1), softcap=0.0):
    """Plain torch, one sequence at a time: softmax of the masked scores. Differentiable.

    Query i of a sequence with lq queries and lk keys sits at key position i + lk - lq (bottom
    right); it sees keys j with diag - left <= j <= diag + right (a side of -1 is unbounded; causal
    means right = 0). A query that sees no key, and every row past cu_seqlens[-1], gets out 0 and
    lse +inf.
    """
    heads, group = q.shape[1], q.shape[1] // k.shape[1]
    out = q.new_zeros(q.shape)
    lse = torch.full((heads, q.shape[0]), INF, dtype=torch.float64)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qs = q[cq[b]:cq[b + 1]]
        ks = k[ck[b]:ck[b + 1]].repeat_interleave(group, dim=1)
        vs = v[ck[b]:ck[b + 1]].repeat_interleave(group, dim=1)
        lq, lk = qs.shape[0], ks.shape[0]
        if lq == 0:
            continue
        s = torch.einsum("qhd,khd->hqk", qs, ks) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(lq)[:, None]
        j = torch.arange(lk)[None, :]
        diag = i + lk - lq
        allowed = torch.ones(lq, lk, dtype=torch.bool)
        if window[0] >= 0:
            allowed &= j >= diag - window[0]
        right = 0 if causal else window[1]
        if right >= 0:
            allowed &= j <= diag + right
        has_key = allowed.any(dim=-1)
        # Rows without a key softmax over zeros instead of all -inf (which would give NaN and NaN
        # gradients), then are zeroed.
        s = s.masked_fill(~allowed, -INF).masked_fill(~has_key[:, None], 0.0)
        p = torch.softmax(s, dim=-1) * has_key[:, None]
        out[cq[b]:cq[b + 1]] = torch.einsum("hqk,khd->qhd", p, vs)
        row_lse = torch.logsumexp(s.double(), dim=-1)
        lse[:, cq[b]:cq[b + 1]] = torch.where(has_key, row_lse, INF).detach()
    return out, lse.float()


def make_batch(q_lens, k_lens=None, heads=4, kv_heads=2, head_dim=16, past_end=3, dtype=torch.float32,
               requires_grad=False):
    """Random q, k, v for sequences of the given lengths, with `past_end` extra rows after them."""
    k_lens = q_lens if k_lens is None else k_lens
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(k_lens).cumsum(0).tolist()), dtype=torch.int32)
    total_q, total_k = int(cu_q[-1]) + past_end, int(cu_k[-1]) + past_end
    q = torch.randn(total_q, heads, head_dim, dtype=dtype, requires_grad=requires_grad)
    k = torch.randn(total_k, kv_heads, head_dim, dtype=dtype, requires_grad=requires_grad)
    v = torch.randn(total_k, kv_heads, head_dim, dtype=dtype, requires_grad=requires_grad)
    return q, k, v, cu_q, cu_k, max(q_lens, default=0), max(k_lens, default=0)


def random_lengths(rng, n, high):
    """n lengths in [0, high], always including a zero-length and a length-1 sequence."""
    lens = rng.integers(0, high + 1, size=n).tolist()
    lens[rng.integers(n)] = 0
    lens[rng.integers(n)] = 1
    return lens


def max_error(got, want):
    """Largest absolute difference over the finite entries (lse is +inf where no key is seen)."""
    finite = torch.isfinite(want)
    return (got.double()[finite] - want.double()[finite]).abs().max().item() if finite.any() else 0.0


def leaf(t, dtype=None):
    return t.detach().to(dtype or t.dtype).requires_grad_(True)


def reference_results(q, k, v, cu_q, cu_k, dout, dtype, scale, causal=False, window_size=(-1, -1), softcap=0.0):
    """(out, lse, dq, dk, dv) of the reference computed in `dtype`."""
    qr, kr, vr = leaf(q, dtype), leaf(k, dtype), leaf(v, dtype)
    out, lse = reference_attention(qr, kr, vr, cu_q, cu_k, scale, causal, window_size, softcap)
    out.backward(dout.to(dtype))
    return out.detach(), lse, qr.grad, kr.grad, vr.grad


def varpack_results(q, k, v, cu_q, cu_k, max_q, max_k, dout, **kw):
    """(out, lse, dq, dk, dv) of flash_attn_varlen_func."""
    qv, kv, vv = leaf(q), leaf(k), leaf(v)
    out, lse, _ = varpack.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, max_q, max_k, return_attn_probs=True, **kw)
    out.backward(dout)
    return out.detach(), lse, qv.grad, kv.grad, vv.grad


CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "gqa3_causal": dict(heads=6, kv_heads=2, causal=True),
    "mha_odd_dim": dict(heads=3, kv_heads=3, head_dim=59),
    "window": dict(window_size=(4, 2)),
    "window_left_causal": dict(window_size=(5, -1), causal=True),
    "softcap": dict(softcap=3.0),
    "q_ne_k_causal": dict(causal=True, different_k=True),
    "q_ne_k_window": dict(window_size=(3, 1), different_k=True, heads=9, kv_heads=1),
    "scale": dict(softmax_scale=0.9),
}


def split_case(case):
    shape = {key: case[key] for key in ("heads", "kv_heads", "head_dim") if key in case}
    kw = {key: val for key, val in case.items() if key not in ("heads", "kv_heads", "head_dim", "different_k")}
    return shape, kw, case.get("different_k", False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference(rng, name, dtype):
    shape, kw, different_k = split_case(CASES[name])
    q_lens = random_lengths(rng, 7, 40)
    k_lens = random_lengths(rng, 7, 40) if different_k else None
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(q_lens, k_lens, dtype=dtype, **shape)
    dout = torch.randn_like(q)
    got = varpack_results(q, k, v, cu_q, cu_k, max_q, max_k, dout, **kw)
    ref_kw = dict(kw)
    scale = ref_kw.pop("softmax_scale", q.shape[-1] ** -0.5)
    # The kernels take the scale as a float32 (as FlashAttention does), float64 as given: give the
    # reference the same.
    if dtype != torch.float64:
        scale = float(torch.tensor(scale, dtype=torch.float32))
    want = reference_results(q, k, v, cu_q, cu_k, dout, torch.float64, scale, **ref_kw)
    if dtype == torch.float64:
        # lse is float32 whatever the input, and the backward recomputes probabilities from it.
        tolerances = [1e-10, 1e-5, 1e-5, 1e-5, 1e-5]
    elif dtype == torch.bfloat16:
        # FlashAttention's rule for bf16: against the float64 reference on the same (bf16) inputs,
        # at most twice (outputs) or three times (gradients) the error of that reference computed
        # in bf16, whose scores, probabilities and products are rounded to bf16 as they go.
        naive = reference_results(q, k, v, cu_q, cu_k, dout, torch.bfloat16, scale, **ref_kw)
        tolerances = [factor * max_error(n, w) + 1e-5 for factor, n, w in zip((2, 2, 3, 3, 3), naive, want)]
    else:
        # Twice the error of the same reference run in float32 (as FlashAttention's tests do), with
        # a floor for the cases where the float32 reference happens to be nearly exact.
        naive = reference_results(q, k, v, cu_q, cu_k, dout, torch.float32, scale, **ref_kw)
        tolerances = [2 * max_error(n, w) + 1e-5 for n, w in zip(naive, want)]
    for what, g, w, tol in zip(("out", "lse", "dq", "dk", "dv"), got, want, tolerances):
        assert g.dtype == (torch.float32 if what == "lse" else dtype), what
        assert g.shape == w.shape, what
        assert torch.equal(torch.isfinite(g), torch.isfinite(w)), f"{what}: +inf rows differ"
        err = max_error(g, w)
        assert err <= tol, f"{name} {dtype}: {what} max error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("causal", [False, True])
def test_lengths_around_tile_sizes(causal):
    """Lengths just below and above powers of two (where CPU and GPU tiles end), one long among short."""
    q_lens = [1, 31, 32, 33, 63, 64, 65, 0, 127, 129, 200, 2]
    k_lens = [n + d for n, d in zip(q_lens, [0, 2, 1, 0, 5, 0, 3, 4, 0, 1, 0, 7])]
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(q_lens, k_lens, heads=6, kv_heads=2, head_dim=40)
    dout = torch.randn_like(q)
    got = varpack_results(q, k, v, cu_q, cu_k, max_q, max_k, dout, causal=causal)
    scale = float(torch.tensor(40 ** -0.5, dtype=torch.float32))
    want = reference_results(q, k, v, cu_q, cu_k, dout, torch.float64, scale, causal=causal)
    naive = reference_results(q, k, v, cu_q, cu_k, dout, torch.float32, scale, causal=causal)
    for what, g, w, n in zip(("out", "lse", "dq", "dk", "dv"), got, want, naive):
        err, tol = max_error(g, w), 2 * max_error(n, w) + 1e-5
        assert err <= tol, f"{what} max error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("name", ["plain", "causal", "gqa3_causal", "q_ne_k_causal", "softcap"])
def test_rows_past_the_end_are_zero(rng, name):
    shape, kw, different_k = split_case(CASES[name])
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(random_lengths(rng, 5, 20),
                                                   random_lengths(rng, 5, 20) if different_k else None,
                                                   past_end=6, requires_grad=True, **shape)
    out, lse, _ = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_attn_probs=True, **kw)
    out.backward(torch.randn_like(out))
    end_q, end_k = int(cu_q[-1]), int(cu_k[-1])
    assert torch.count_nonzero(out[end_q:]) == 0
    assert torch.all(lse[:, end_q:] == INF)
    assert torch.count_nonzero(q.grad[end_q:]) == 0
    assert torch.count_nonzero(k.grad[end_k:]) == 0
    assert torch.count_nonzero(v.grad[end_k:]) == 0
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


@pytest.mark.parametrize("q_rows, k_rows", [(0, 0), (0, 4), (4, 0)])
def test_empty_tensors_and_empty_batch(q_rows, k_rows):
    q = torch.randn(q_rows, 2, 8, requires_grad=True)
    k = torch.randn(k_rows, 1, 8, requires_grad=True)
    v = torch.randn(k_rows, 1, 8, requires_grad=True)
    cu = torch.zeros(1, dtype=torch.int32)  # batch of 0 sequences: every row is past the end
    out, lse, _ = varpack.flash_attn_varlen_func(q, k, v, cu, cu, 0, 0, causal=True, return_attn_probs=True)
    assert out.shape == q.shape and lse.shape == (2, q_rows)
    assert torch.count_nonzero(out) == 0 and torch.all(lse == INF)
    out.sum().backward()
    assert torch.count_nonzero(q.grad) == 0 and torch.count_nonzero(k.grad) == 0


def test_queries_without_keys():
    # Sequence 0 has 3 queries and no keys; sequence 1 has 2 keys and 4 queries, so under causal
    # bottom-right alignment its first two queries see no key either.
    q, k, v, cu_q, cu_k, _, _ = make_batch([3, 4], [0, 2], past_end=0, requires_grad=True)
    out, lse, _ = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 2, causal=True, return_attn_probs=True)
    assert torch.count_nonzero(out[:5]) == 0 and torch.all(lse[:, :5] == INF)
    assert torch.isfinite(lse[:, 5:]).all() and torch.count_nonzero(out[5:]) > 0
    out.backward(torch.randn_like(out))
    assert torch.count_nonzero(q.grad[:5]) == 0 and torch.isfinite(k.grad).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_sdpa_per_sample(rng, causal, kv_heads):
    q_lens = rng.integers(1, 30, size=6).tolist() + [1]
    # Causal with fewer queries than keys (bottom right) and self-attention (top left == bottom right).
    k_lens = [lq + int(rng.integers(0, 5)) for lq in q_lens] if causal else rng.integers(1, 30, size=7).tolist()
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(q_lens, k_lens, heads=4, kv_heads=kv_heads, head_dim=32,
                                                   past_end=0, requires_grad=True)
    out = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal)
    dout = torch.randn_like(out)
    out.backward(dout)
    for b, (lq, lk) in enumerate(zip(q_lens, k_lens)):
        qs = q[cu_q[b]:cu_q[b + 1]].detach().transpose(0, 1)[None].requires_grad_(True)
        ks = k[cu_k[b]:cu_k[b + 1]].detach().transpose(0, 1)[None].requires_grad_(True)
        vs = v[cu_k[b]:cu_k[b + 1]].detach().transpose(0, 1)[None].requires_grad_(True)
        if causal and lq != lk:
            want = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=causal_lower_right(lq, lk),
                                                  enable_gqa=True)
        else:
            want = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, enable_gqa=True)
        want.backward(dout[cu_q[b]:cu_q[b + 1]].transpose(0, 1)[None])
        torch.testing.assert_close(out[cu_q[b]:cu_q[b + 1]], want[0].transpose(0, 1), atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(q.grad[cu_q[b]:cu_q[b + 1]], qs.grad[0].transpose(0, 1), atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(k.grad[cu_k[b]:cu_k[b + 1]], ks.grad[0].transpose(0, 1), atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(v.grad[cu_k[b]:cu_k[b + 1]], vs.grad[0].transpose(0, 1), atol=5e-5, rtol=1e-4)


GRADCHECK_CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "gqa": dict(heads=4, kv_heads=2, causal=True),
    "window": dict(window_size=(2, 1)),
    "softcap": dict(softcap=2.0, causal=True),
    "q_ne_k": dict(causal=True, different_k=True, window_size=(3, -1)),
}


@pytest.mark.parametrize("name", list(GRADCHECK_CASES))
def test_gradcheck(name):
    shape, kw, different_k = split_case(GRADCHECK_CASES[name])
    shape = {"heads": 2, "kv_heads": 1, "head_dim": 3, **shape}
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([3, 0, 4, 1], [2, 1, 5, 1] if different_k else None,
                                                   past_end=2, dtype=torch.float64, requires_grad=True, **shape)

    def through_function(q, k, v):
        return varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)

    def through_op(q, k, v):
        window = kw.get("window_size", (-1, -1))
        return torch.ops.varpack.varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, q.shape[-1] ** -0.5,
                                            kw.get("causal", False), window[0], window[1], kw.get("softcap", 0.0))[0]

    assert torch.autograd.gradcheck(through_function, (q, k, v))
    assert torch.autograd.gradcheck(through_op, (q, k, v))


def op_args(causal=True, window=(-1, -1), softcap=0.0, dtype=torch.float32, requires_grad=True):
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([5, 0, 7, 1], [6, 2, 7, 1], heads=4, kv_heads=2, head_dim=8,
                                                   past_end=2, dtype=dtype, requires_grad=requires_grad)
    return (q, k, v, cu_q, cu_k, max_q, max_k, 8 ** -0.5, causal, window[0], window[1], softcap)


@pytest.mark.parametrize("variant", [dict(), dict(causal=False, window=(2, 3)), dict(softcap=4.0),
                                     dict(dtype=torch.bfloat16)])
def test_opcheck_forward(variant):
    torch.library.opcheck(torch.ops.varpack.varlen_fwd.default, op_args(**variant))


@pytest.mark.parametrize("variant", [dict(), dict(causal=False, window=(2, 3))])
@pytest.mark.parametrize("deterministic", [False, True])
def test_opcheck_attn(variant, deterministic):
    """varlen_attn (flash_attn_varlen_func's operator, autograd in C++): schema, fake tensors, autograd
    registration and AOT tracing of forward and backward."""
    torch.library.opcheck(torch.ops.varpack.varlen_attn.default, op_args(**variant) + (deterministic,))


def test_attn_matches_forward_op():
    """varlen_attn's output and gradients are varlen_fwd's bit for bit (one C++ autograd serves both)."""
    args = op_args(softcap=4.0)
    q, k, v = args[:3]
    dout = torch.randn_like(q)
    results = []
    for call in (lambda *a: torch.ops.varpack.varlen_fwd(*a), lambda *a: torch.ops.varpack.varlen_attn(*a, False)):
        qs, ks, vs = leaf(q), leaf(k), leaf(v)
        out, lse = call(qs, ks, vs, *args[3:])
        out.backward(dout)
        assert not lse.requires_grad
        results.append((out.detach(), lse, qs.grad, ks.grad, vs.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_backward(dtype):
    q, k, v, cu_q, cu_k, max_q, max_k, *rest = op_args(dtype=dtype, requires_grad=False)
    out, lse = torch.ops.varpack.varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, *rest)
    torch.library.opcheck(torch.ops.varpack.varlen_bwd.default,
                          (torch.randn_like(out), q, k, v, out, lse, cu_q, cu_k, max_q, max_k, *rest, True))


@pytest.mark.parametrize("backend, dynamic", [("aot_eager", False), ("aot_eager", True), ("inductor", False)])
def test_torch_compile_fullgraph(backend, dynamic):
    def loss_fn(q, k, v, cu_q, cu_k, max_q, max_k):
        out = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, window_size=(6, -1))
        return (out * out).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, fullgraph=True, backend=backend, dynamic=dynamic)
    for lengths in ([5, 0, 9, 1], [3, 12, 2, 2]):  # a second batch re-uses or re-traces the graph
        eager_inputs = make_batch(lengths, heads=4, kv_heads=2, head_dim=8, requires_grad=True)
        compiled_inputs = [leaf(t) if t.is_floating_point() else t for t in eager_inputs[:3]] + list(eager_inputs[3:])
        loss_fn(*eager_inputs).backward()
        got = compiled(*compiled_inputs)
        got.backward()
        torch.testing.assert_close(got, loss_fn(*eager_inputs).detach())
        for a, b in zip(compiled_inputs[:3], eager_inputs[:3]):
            torch.testing.assert_close(a.grad, b.grad)


def test_other_samples_unaffected_bit_for_bit(rng):
    """Changing one sample's K and V changes no other sample's output or gradient."""
    lens = [7, 12, 1, 9]
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(lens, heads=4, kv_heads=2, past_end=2)
    dout = torch.randn_like(q)

    def run(k, v):
        qs, ks, vs = leaf(q), leaf(k), leaf(v)
        out = varpack.flash_attn_varlen_func(qs, ks, vs, cu_q, cu_k, max_q, max_k, causal=True)
        out.backward(dout)
        return out.detach(), qs.grad, ks.grad, vs.grad

    before = run(k, v)
    k2, v2 = k.clone(), v.clone()
    a, b = int(cu_k[1]), int(cu_k[2])  # sample 1
    k2[a:b] += torch.randn_like(k2[a:b])
    v2[a:b] *= 3
    after = run(k2, v2)
    others_q = torch.ones(q.shape[0], dtype=torch.bool)
    others_q[int(cu_q[1]):int(cu_q[2])] = False
    others_k = torch.ones(k.shape[0], dtype=torch.bool)
    others_k[a:b] = False
    for (x, y), rows in zip(zip(before, after), (others_q, others_q, others_k, others_k)):
        assert torch.equal(x[rows], y[rows])
    assert not torch.equal(before[0][~others_q], after[0][~others_q])


def test_deterministic_bits():
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([40, 3, 0, 77, 1], heads=4, kv_heads=1, head_dim=24)
    dout = torch.randn_like(q)
    results = []
    for _ in range(2):
        qs, ks, vs = leaf(q), leaf(k), leaf(v)
        out = varpack.flash_attn_varlen_func(qs, ks, vs, cu_q, cu_k, max_q, max_k, causal=True, deterministic=True)
        out.backward(dout)
        results.append((out, qs.grad, ks.grad, vs.grad))
    for x, y in zip(*results):
        assert torch.equal(x, y)


def test_return_values_follow_flash_attention():
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([4, 6], heads=4, kv_heads=2, head_dim=8, past_end=0)
    out = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape and out.dtype == q.dtype
    out2, lse, probs = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, return_attn_probs=True)
    assert torch.equal(out, out2) and probs is None
    assert lse.shape == (4, 10) and lse.dtype == torch.float32
    # The default scale is 1/sqrt(headdim).
    explicit = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=1 / math.sqrt(8))
    assert torch.equal(out, explicit)


def test_non_contiguous_inputs_are_accepted():
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([5, 3], heads=2, kv_heads=2, head_dim=8, past_end=0)
    # Head dimension strided (transposed storage) and rows strided (a slice of a fused qkv tensor).
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    qkv = torch.cat([q, k, v], dim=1)
    want = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    got = varpack.flash_attn_varlen_func(q_t, qkv[:, 2:4], qkv[:, 4:6], cu_q, cu_k, max_q, max_k, causal=True)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---- input checks: the message names the argument and says what to do ----

def bad_call(**override):
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([4, 2, 5], heads=4, kv_heads=2, head_dim=8, past_end=1)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k)
    args.update(override)
    return varpack.flash_attn_varlen_func(**args)


@pytest.mark.parametrize("override, message", [
    (dict(q=torch.randn(12, 4, 8).to(torch.int32)), r"q is torch\.int32; attention takes torch\.float32"),
    (dict(k=torch.randn(12, 2, 8, dtype=torch.float64), v=torch.randn(12, 2, 8, dtype=torch.float64)),
     r"k and v are torch\.float64 but q is torch\.float32"),
    (dict(v=torch.randn(12, 2, 8, dtype=torch.float64)), r"k is torch\.float32 but v is torch\.float64"),
    (dict(q=torch.randn(1, 12, 4, 8)), r"q must be 3-D \[total_q, heads, head_dim\], got shape \[1, 12, 4, 8\]"),
    (dict(k=torch.randn(12, 3, 8), v=torch.randn(12, 3, 8)), r"q has 4 heads, not a multiple of the 3 heads of k"),
    (dict(k=torch.randn(12, 2, 4), v=torch.randn(12, 2, 4)), r"k and v have head_dim 4 but q has 8"),
    (dict(v=torch.randn(11, 2, 8)), r"k has shape \[12, 2, 8\] but v has shape \[11, 2, 8\]"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 6, 11])), r"cu_seqlens_q must be torch\.int32, got torch\.int64"),
    (dict(cu_seqlens_k=torch.tensor([[0, 4, 6, 11]], dtype=torch.int32)), r"cu_seqlens_k must be 1-D"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 11], dtype=torch.int32)),
     r"cu_seqlens_q has 3 entries and cu_seqlens_k 4"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 3, 11], dtype=torch.int32)), r"cu_seqlens_q is not monotone at index 2"),
    (dict(cu_seqlens_k=torch.tensor([1, 4, 6, 11], dtype=torch.int32)), r"cu_seqlens_k\[0\] = 1 must be 0"),
    (dict(cu_seqlens_q=torch.tensor([0, 4, 6, 13], dtype=torch.int32), max_seqlen_q=7),
     r"cu_seqlens_q\[3\] = 13 \(the last entry\) exceeds the 12 rows"),
    (dict(max_seqlen_q=4), r"sequence 2 has 5 query and 5 key rows, more than max_seqlen_q = 4"),
    (dict(max_seqlen_k=-1), r"max_seqlen_k = -1 must be >= 0"),
])
def test_input_errors(override, message):
    with pytest.raises(ValueError, match=message):
        bad_call(**override)


def test_unsupported_features_raise():
    with pytest.raises(NotImplementedError, match=r"dropout_p = 0\.1 is not supported"):
        bad_call(dropout_p=0.1)
    with pytest.raises(NotImplementedError, match="alibi_slopes is not supported"):
        bad_call(alibi_slopes=torch.ones(4))
    with pytest.raises(ValueError, match=r"window_size must be a pair \(left, right\)"):
        bad_call(window_size=3)
    with pytest.raises(ValueError, match=r"window = \(-2, -1\) is invalid"):
        bad_call(window_size=(-2, -1))
    with pytest.raises(ValueError, match="softcap = -1 must be finite and >= 0"):
        bad_call(softcap=-1.0)
    with pytest.raises(TypeError, match="max_seqlen_q must be a Python int, got a tensor"):
        bad_call(max_seqlen_q=torch.tensor(5))
    q, k, v = (torch.randn(12, h, 8, dtype=torch.float16) for h in (4, 2, 2))
    with pytest.raises(ValueError, match=r"q is torch\.float16, which the CPU kernels do not take; use torch\.bfloat16"):
        bad_call(q=q, k=k, v=v)


def test_double_backward_raises():
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch([4, 3], requires_grad=True)
    out = varpack.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k)
    (dq,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(NotImplementedError, match="varpack attention has no double backward"):
        dq.sum().backward()


def test_operator_checks_strides_of_direct_calls():
    q, k, v, cu_q, cu_k, max_q, max_k, *rest = op_args(requires_grad=False)
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match=r"q must have a contiguous last dimension \(stride 1\)"):
        torch.ops.varpack.varlen_fwd(q_strided, k, v, cu_q, cu_k, max_q, max_k, *rest)
    out, lse = torch.ops.varpack.varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, *rest)
    with pytest.raises(ValueError, match=r"lse must be torch\.float32 of shape \[heads, total_q\]"):
        torch.ops.varpack.varlen_bwd(out, q, k, v, out, lse.t(), cu_q, cu_k, max_q, max_k, *rest, False)


@pytest.mark.parametrize("head_dim", [1, 3, 5, 8, 24, 40, 48, 64, 80, 96, 100, 128, 160, 192, 256])
def test_float64_is_exact_at_every_head_dim(rng, head_dim):
    """float64 is the oracle mode: against a float64 reference with the float64 scale 1/sqrt(d)
    (not the float32 one the other tests hand their reference), the output agrees to 1e-12 at
    every head dim; it was off by 2e-8 to 7e-8 where 1/sqrt(d) is not a power of two."""
    q, k, v, cu_q, cu_k, max_q, max_k = make_batch(random_lengths(rng, 5, 30), dtype=torch.float64,
                                                   heads=2, kv_heads=1, head_dim=head_dim)
    dout = torch.randn_like(q)
    for scale in (None, 0.3):
        kw = {} if scale is None else {"softmax_scale": scale}
        got = varpack_results(q, k, v, cu_q, cu_k, max_q, max_k, dout, **kw)
        want = reference_results(q, k, v, cu_q, cu_k, dout, torch.float64,
                                 head_dim ** -0.5 if scale is None else scale)
        assert max_error(got[0], want[0]) <= 1e-12, f"out, head_dim {head_dim}, scale {scale}"
        # lse is float32 (FlashAttention's layout); the gradients recompute from it.
        assert max_error(got[1], want[1]) <= 1e-5
        for what, g, w in zip(("dq", "dk", "dv"), got[2:], want[2:]):
            assert max_error(g, w) <= 1e-5, f"{what}, head_dim {head_dim}"
