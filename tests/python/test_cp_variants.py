"""Varlen context parallelism over 2 and 4 gloo processes (varpack.context_parallel.cp_varlen_attention):
every variant (allgather, ring, ulysses, hybrid) on a packed row of documents, split and whole,
causal, non-causal, sliding window and softcap, GQA and MQA, against flash_attn_varlen_func on the
whole row in one process (fp32 within 1e-5); a small transformer with FSDP2, activation
checkpointing and torch.compile(fullgraph=True) against the same model in one process; ranks that
disagree get one ValueError each, naming the rank and value, before any other collective."""
import numpy as np
import pytest
import torch

import varpack
from varpack.context_parallel import cp_layout, cp_varlen_attention

from gloo_ranks import run_ranks

ROW = [0, 1, 1, 60, 61, 190, 197, 230]  # a zero-length and a length-1 document, long and short ones
# (causal, window, softcap)
MASKS = [(True, (-1, -1), 0.0), (False, (-1, -1), 0.0), (True, (9, -1), 0.0), (False, (6, 4), 1.5)]
HEADS = [(4, 2), (4, 1)]


def variants(world):
    found = [("allgather", None, 1), ("allgather", None, 2), ("ring", None, 1), ("ulysses", None, 1)]
    return found + ([("hybrid", 2, 1)] if world == 4 else [])


def row_inputs(heads, kv_heads, seed):
    g = torch.Generator().manual_seed(seed)
    n = ROW[-1]
    return [torch.randn(n, h, 8, generator=g) for h in (heads, kv_heads, kv_heads, heads)]


def whole_row(q, k, v, dout, mask):
    causal, window, softcap = mask
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    cu = torch.tensor(ROW, dtype=torch.int32)
    out = varpack.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, causal=causal, window_size=window,
                                         softcap=softcap)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def attention_cases(world):
    return [(variant, ulysses, groups, mask, heads) for variant, ulysses, groups in variants(world)
            for mask in MASKS for heads in HEADS if heads[1] % groups == 0]


def attention_on_rank(rank, world):
    layout = cp_layout(ROW, world)
    results = []
    for i, (variant, ulysses, groups, mask, (heads, kv_heads)) in enumerate(attention_cases(world)):
        q, k, v, dout = (layout.shard(x, rank) for x in row_inputs(heads, kv_heads, i))
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
        causal, window, softcap = mask
        out = cp_varlen_attention(q, k, v, layout, causal=causal, window_size=window, softcap=softcap,
                                  variant=variant, ulysses=ulysses, head_groups=groups)
        out.backward(dout)
        results.append((out.detach(), q.grad, k.grad, v.grad))
    return results


def mismatch_on_rank(rank, world):
    """Rank 1 passes one token less than the layout gives it, then a different head count."""
    layout = cp_layout(ROW, world)
    errors = []
    for cut, heads in ((1, 4), (0, 2 + 2 * (rank == 1))):
        q, k, v, _ = (layout.shard(x, rank) for x in row_inputs(4, 2, 0))
        if rank == 1:
            q, k, v = q[:len(q) - cut], k[:len(k) - cut], v[:len(v) - cut]
        try:
            cp_varlen_attention(q[:, :heads], k, v, layout, variant="ring")
            errors.append(None)
        except ValueError as e:
            errors.append(str(e))
    return errors


# ---------------------------------------------------------------- a model step

class Block(torch.nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.d, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.GELU(), torch.nn.Linear(64, dim))

    def forward(self, x, attention):
        q, k, v = self.qkv(x).split([self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], dim=-1)
        out = attention(q.unflatten(-1, (self.heads, self.d)), k.unflatten(-1, (self.kv_heads, self.d)),
                        v.unflatten(-1, (self.kv_heads, self.d)))
        x = x + self.proj(out.flatten(1))
        return x + self.mlp(x)


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 32)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(32, 64, bias=False)

    def forward(self, ids, attention, checkpoint=False):
        x = self.embed(ids)
        for block in self.blocks:
            if checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, attention, use_reentrant=False)
            else:
                x = block(x, attention)
        return self.head(x)


ROW_IDS = np.random.default_rng(3).integers(0, 64, size=ROW[-1])


def targets():
    t = torch.full((ROW[-1],), -100)
    t[:-1] = torch.as_tensor(ROW_IDS[1:])
    t[torch.tensor(ROW[1:]) - 1] = -100
    return t


def model_variants(world):
    # Every variant once at model level: the three plain ones over 2 ranks, the hybrid over 4.
    return [("allgather", None), ("ring", None), ("ulysses", None)] if world == 2 else [("hybrid", 2)]


def model_step_on_rank(rank, world, variant, ulysses):
    from torch.distributed.fsdp import fully_shard
    model = TinyModel()
    for block in model.blocks:
        fully_shard(block)
        block.compile(fullgraph=True, backend="aot_eager")
    fully_shard(model)
    layout = cp_layout(ROW, world)

    def attention(q, k, v):
        return cp_varlen_attention(q, k, v, layout, variant=variant, ulysses=ulysses, window_size=(20, -1))

    ids = layout.shard(torch.as_tensor(ROW_IDS), rank)
    logits = model(ids, attention, checkpoint=True)
    loss = torch.nn.functional.cross_entropy(logits, layout.shard(targets(), rank), reduction="sum")
    loss.backward()
    total = loss.detach().clone()
    torch.distributed.all_reduce(total)
    grads = []
    for p in model.parameters():  # FSDP2 holds a shard of each parameter's gradient: gather it whole
        grads.append(p.grad.full_tensor().reshape(-1))
    # FSDP2 averages over its ranks (gloo has no pre-scaled sum); each rank held part of the row's
    # summed loss, so the row's gradient is the sum: world x the average.
    return float(total), torch.cat(grads) * world


def run_all(rank, world):
    checks = {"attention": attention_on_rank(rank, world), "mismatch": mismatch_on_rank(rank, world)}
    checks["model"] = [model_step_on_rank(rank, world, *v) for v in model_variants(world)]
    return checks


@pytest.fixture(scope="module", params=[2, 4])
def ranks(request, tmp_path_factory):
    world = request.param
    return world, run_ranks(run_all, world, tmp_path_factory.mktemp(f"cp{world}"))


def test_every_variant_equals_one_process(ranks):
    world, results = ranks
    layout = cp_layout(ROW, world)
    for i, (variant, ulysses, groups, mask, heads) in enumerate(attention_cases(world)):
        want = whole_row(*row_inputs(*heads, i), mask)
        for j, expected in enumerate(want):
            got = layout.unshard([results[r]["attention"][i][j] for r in range(world)])
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{variant} u={ulysses} groups={groups} {mask} {heads} "
                                                     f"tensor {j}: {m}")


def test_the_allgather_forward_is_bit_exact(ranks):
    world, results = ranks
    layout = cp_layout(ROW, world)
    for i, (variant, _, _, mask, heads) in enumerate(attention_cases(world)):
        if variant == "allgather" and mask[1] == (-1, -1):
            got = layout.unshard([results[r]["attention"][i][0] for r in range(world)])
            assert torch.equal(got, whole_row(*row_inputs(*heads, i), mask)[0])


def test_a_mismatch_is_one_error_on_every_rank(ranks):
    world, results = ranks
    for r in range(world):
        tokens, heads = results[r]["mismatch"]
        assert tokens is not None and "rank 1:" in tokens and "query tokens where the layout gives it" in tokens
        assert heads is not None and "ranks disagree on heads: rank 0: 2, rank 1: 4" in heads


def test_a_model_step_with_fsdp2_checkpointing_and_compile_equals_one_process(ranks):
    world, results = ranks
    model = TinyModel()
    cu = torch.tensor(ROW, dtype=torch.int32)

    def attention(q, k, v):
        return varpack.flash_attn_varlen_func(q, k, v, cu, cu, 130, 130, causal=True, window_size=(20, -1))

    loss = torch.nn.functional.cross_entropy(model(torch.as_tensor(ROW_IDS), attention), targets(), reduction="sum")
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    for r in range(world):
        for rank_loss, rank_grads in results[r]["model"]:
            assert rank_loss == pytest.approx(float(loss.detach()), rel=1e-5)
            torch.testing.assert_close(rank_grads, grads, rtol=1e-4, atol=1e-5)
