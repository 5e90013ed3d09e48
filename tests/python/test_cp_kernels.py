"""Varlen context parallelism in one process (varpack.cp_layout, cp_kernels, cp_cost): layouts
partition the row; every rank's attention built block by block from other ranks' K/V pieces, merged
by LSE, equals the whole row's kernel call for causal, non-causal, sliding-window and softcap masks,
forward and backward; the variant rule's choices."""
import numpy as np
import pytest
import torch

import varpack
from varpack.cp_cost import choose_variant, pairs, variant_costs
from varpack.cp_kernels import Merged, attend, attend_backward, plan_calls
from varpack.cp_layout import SPLIT, cp_layout

# (causal, window, softcap)
MASKS = [(True, (-1, -1), 0.0), (False, (-1, -1), 0.0), (True, (5, -1), 0.0), (False, (7, 3), 0.0),
         (True, (-1, -1), 2.0), (False, (0, 0), 0.0)]
ROW = [0, 0, 1, 40, 41, 130, 136, 200]  # zero-length, length-1, long and short documents


def test_layout_partitions_the_row_and_splits_by_cost():
    for cp in (1, 2, 3, 4):
        layout = cp_layout(ROW, cp)
        held = np.concatenate([layout.global_index(r) for r in range(cp)])
        assert sorted(held.tolist()) == list(range(ROW[-1]))
        x = torch.arange(ROW[-1] * 2).reshape(-1, 2)
        assert torch.equal(layout.unshard([layout.shard(x, r) for r in range(cp)]), x)
        assert [len(layout.positions(r)) for r in range(cp)] == list(layout.tokens)
    layout = cp_layout([0, 1000, 1010, 1020, 1030], 4)
    assert layout.owner[0] == SPLIT and all(o >= 0 for o in layout.owner[1:])
    assert max(layout.tokens) - min(layout.tokens) <= 30
    # Zigzag: rank r holds chunks r and 2CP-1-r of a split document.
    layout = cp_layout([0, 16], 2, owner=[SPLIT])
    assert layout.global_index(0).tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    with pytest.raises(ValueError, match="document 1 has owner 5"):
        cp_layout([0, 4, 8], 2, owner=[0, 5])
    with pytest.raises(ValueError, match="start at 0"):
        cp_layout([1, 4], 2)


def reference(q, k, v, mask, want_grad=True):
    causal, window, softcap = mask
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    cu = torch.tensor(ROW, dtype=torch.int32)
    out, lse, _ = varpack.flash_attn_varlen_func(q, k, v, cu, cu, 100, 100, causal=causal, window_size=window,
                                                  softcap=softcap, return_attn_probs=True)
    return out, lse, q, k, v


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("cp,heads,kv_heads", [(3, 4, 2), (4, 2, 1)])
def test_blockwise_attention_merged_by_lse_equals_the_whole_row(mask, cp, heads, kv_heads):
    causal, window, softcap = mask
    left, right = window[0], (0 if causal else window[1])
    g = torch.Generator().manual_seed(cp)
    n = ROW[-1]
    q, k, v = (torch.randn(n, h, 8, generator=g) for h in (heads, kv_heads, kv_heads))
    dout = torch.randn(n, heads, 8, generator=g)
    out_ref, lse_ref, *leaves = reference(q, k, v, mask)
    out_ref.backward(dout)
    layout = cp_layout(ROW, cp)
    outs, lses, grads = [], [], [[], [], []]
    dk_sum = [torch.zeros(n, kv_heads, 8) for _ in range(2)]
    for rank in range(cp):
        ql = layout.shard(q, rank)
        merged = Merged(ql)
        for src in range(cp):  # the ring's blocks, in the order rank `rank` sees them
            block = (rank - src) % cp
            calls = plan_calls(layout.pieces[rank], layout.pieces[block], left, right)
            attend(ql, layout.shard(k, block), layout.shard(v, block), calls, 8 ** -0.5, softcap, merged)
        out, lse = merged.result(q.dtype)
        outs.append(out)
        lses.append(lse.t())
        dq = torch.zeros(ql.shape)
        for block in range(cp):
            dk, dv = torch.zeros(layout.tokens[block], kv_heads, 8), torch.zeros(layout.tokens[block], kv_heads, 8)
            calls = plan_calls(layout.pieces[rank], layout.pieces[block], left, right)
            attend_backward(layout.shard(dout, rank), ql, layout.shard(k, block), layout.shard(v, block), out, lse,
                            calls, 8 ** -0.5, softcap, False, dq, dk, dv)
            index = torch.from_numpy(layout.global_index(block))
            dk_sum[0].index_add_(0, index, dk)
            dk_sum[1].index_add_(0, index, dv)
        grads[0].append(dq)
    torch.testing.assert_close(layout.unshard(outs), out_ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layout.unshard(lses), lse_ref.detach().t(), rtol=1e-5, atol=1e-5)
    for got, leaf in zip([layout.unshard(grads[0]), *dk_sum], leaves):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-5, atol=1e-5)


def test_one_call_covers_a_row_of_whole_documents():
    layout = cp_layout([0, 3, 9, 10, 30], 1)
    assert len(plan_calls(layout.pieces[0], layout.pieces[0], -1, 0)) == 1


def test_the_rule_prefers_overlap_on_slow_links_and_allgather_on_fast_ones():
    layout = cp_layout([0, 65536], 8, owner=[SPLIT])
    assert pairs(0, 4, 4, True, (-1, -1)) == 10 and pairs(0, 4, 4, False, (1, 1)) == 10
    names = {c.variant for c in variant_costs(layout, 32, 8, 128)}
    assert names == {"allgather", "ring", "ulysses", "hybrid"}
    assert choose_variant(layout, 32, 8, 128, bandwidth=1e15, intra_bandwidth=1e15, latency=0).variant == "allgather"
    slow = choose_variant(layout, 32, 8, 128, bandwidth=45e9, intra_bandwidth=45e9)  # InfiniBand
    assert slow.variant in ("ring", "hybrid") and slow.exposed_s < slow.compute_s


def test_a_key_piece_wholly_before_causal_queries_runs_unmasked():
    # Zigzag over 2 ranks: rank 1 holds chunks 1 and 2, rank 0 chunks 0 and 3 of [0, 64).
    layout = cp_layout([0, 64], 2, owner=[SPLIT])
    calls = plan_calls(layout.pieces[1], layout.pieces[0], -1, 0)  # chunk 0 seen whole, chunk 3 not
    assert [(c.left, c.right, c.q0, c.q1, c.k0, c.k1, c.cu_q, c.cu_k) for c in calls] == \
        [(-1, -1, 0, 32, 0, 16, [0, 32], [0, 16])]
    calls = plan_calls(layout.pieces[0], layout.pieces[1], -1, 0)  # chunk 3 sees chunks 1 and 2
    assert [(c.left, c.right, c.q0, c.q1, c.k0, c.k1, c.cu_q, c.cu_k) for c in calls] == \
        [(-1, -1, 16, 32, 0, 32, [0, 16], [0, 32])]


def test_the_rule_charges_the_ring_for_merging_and_accumulating_its_blocks():
    layout = cp_layout([0, 65536], 8, owner=[SPLIT])
    costs = {(c.variant, c.ulysses): c for c in variant_costs(layout, 32, 8, 128, bandwidth=300e9)}
    # One kernel call per direction (allgather, Ulysses) merges nothing; the ring merges a block per step,
    # the hybrid (u = 2: a 4-step ring) half as many.
    assert costs["allgather", 1].split_s == 0 and costs["ulysses", 8].split_s == 0
    assert costs["ring", 1].split_s == pytest.approx(2 * costs["hybrid", 2].split_s)
    assert costs["ring", 1].total_s == pytest.approx(costs["ring", 1].compute_s + costs["ring", 1].split_s
                                                     + costs["ring", 1].exposed_s)
    # On NVLink at 64k the ring hides its transfers, but its per-rank kernel work is the largest
    # measured (bench/results/distributed.md): not chosen.
    assert choose_variant(layout, 32, 8, 128, bandwidth=300e9).variant != "ring"
    assert choose_variant(layout, 32, 8, 128, bandwidth=300e9, memory_bandwidth=float("inf")).variant == "ring"
