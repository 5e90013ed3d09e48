"""Context parallelism (varpack.context_parallel): the zigzag split and its inverse, the packer's
marking and padding of long samples, cp_attention over 2 gloo processes against
flash_attn_varlen_func on the whole sample in one process (outputs and gradients, fp32 and bf16),
and a Llama model's loss and gradients with its attention context-parallel over 2 processes
against the same model on the whole sample in one."""
import numpy as np
import pytest
import torch

import varpack
from varpack.context_parallel import (cp_attention, cp_padded_length, cp_sample_batch, split_long_samples,
                                      zigzag_chunks, zigzag_indices, zigzag_shard, zigzag_unshard)

from gloo_ranks import run_ranks

# (chunk tokens, heads, kv heads, head dim, dtype): odd chunks that cross the CPU kernel's 64-row
# tiles, tile-aligned ones, grouped-query attention, and one chunk of a single token.
CASES = [(37, 4, 2, 16, torch.float32), (64, 2, 2, 32, torch.float32), (1, 3, 1, 8, torch.float32),
         (50, 4, 1, 16, torch.bfloat16)]


def full_inputs(case, cp, seed):
    chunk, heads, kv_heads, d, dtype = case
    g = torch.Generator().manual_seed(seed)
    length = 2 * cp * chunk
    q = torch.randn(length, heads, d, generator=g)
    k = torch.randn(length, kv_heads, d, generator=g)
    v = torch.randn(length, kv_heads, d, generator=g)
    w = torch.randn(length, heads, d, generator=g)  # the loss is sum(out * w)
    return [x.to(dtype) for x in (q, k, v)] + [w]


def reference(case, cp, seed):
    q, k, v, w = full_inputs(case, cp, seed)
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
    out = varpack.flash_attn_varlen_func(q, k, v, cu, cu, q.shape[0], q.shape[0], causal=True)
    (out.float() * w).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def cp_rank_run(rank, world, cases):
    # Both checks in one pair of processes: starting one (torch, transformers) takes seconds.
    return attention_on_rank(rank, world, cases), model_step_on_rank(rank, world)


def attention_on_rank(rank, world, cases):
    results = []
    for i, case in enumerate(cases):
        full = full_inputs(case, world, seed=i)
        q, k, v, w = (zigzag_shard(x, world, rank) for x in full)
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
        out = cp_attention(q, k, v)
        (out.float() * w).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    return results


def test_zigzag_split_is_a_permutation_with_even_causal_work():
    for cp in (1, 2, 3, 4):
        length = 2 * cp * 5
        held = np.concatenate([zigzag_indices(length, cp, r) for r in range(cp)])
        assert sorted(held.tolist()) == list(range(length))
        # Causal work of a rank: sum over its query positions of (position + 1) keys.
        work = {int((zigzag_indices(length, cp, r) + 1).sum()) for r in range(cp)}
        assert len(work) == 1
        x = torch.arange(length * 3).reshape(length, 3)
        assert torch.equal(zigzag_unshard([zigzag_shard(x, cp, r) for r in range(cp)]), x)
    assert zigzag_chunks(2, 0) == (0, 3) and zigzag_chunks(2, 1) == (1, 2)
    with pytest.raises(ValueError, match="not a multiple of 2 \\* cp = 4"):
        zigzag_indices(10, 2, 0)
    with pytest.raises(ValueError, match="rank 2 of cp=2"):
        zigzag_chunks(2, 2)


def test_long_samples_are_marked_and_padded():
    lengths = [10, 100, 0, 101, 64, 250]
    split = split_long_samples(lengths, capacity=64, cp=4)
    assert split.short.tolist() == [0, 2, 4] and split.long.tolist() == [1, 3, 5]
    assert split.padded_lengths.tolist() == [104, 104, 256]
    assert all(cp_padded_length(n, 4) == p for n, p in zip([100, 101, 250], split.padded_lengths))
    with pytest.raises(ValueError, match="sample 5 has 250 tokens, 126 per rank over cp=2 ranks.*at least 4"):
        split_long_samples(lengths, capacity=64, cp=2)
    with pytest.raises(ValueError, match="sample 1 has length -1"):
        split_long_samples([1, -1], capacity=4, cp=1)


def test_cp_sample_batch_shifts_labels_before_the_split():
    ids = np.arange(100, 111)  # 11 tokens -> padded to 12 for cp = 3
    parts = [cp_sample_batch(ids, 3, r, pad_token_id=7) for r in range(3)]
    whole = {key: zigzag_unshard([p[key][0] for p in parts]) for key in ("input_ids", "position_ids", "shift_labels")}
    assert whole["input_ids"].tolist() == list(range(100, 111)) + [7]
    assert whole["position_ids"].tolist() == list(range(12))
    assert whole["shift_labels"].tolist() == list(range(101, 111)) + [-100, -100]
    assert parts[0]["max_length_q"] == 4 and parts[0]["cu_seq_lens_q"].tolist() == [0, 4]


def test_one_rank_equals_the_whole_sample_kernel():
    # Without a process group, cp_attention runs on one rank (chunks 0 and 1 of 2).
    for case in CASES[:2]:
        q, k, v, w = full_inputs(case, 1, seed=5)
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
        out = cp_attention(q, k, v)
        (out.float() * w).sum().backward()
        want = reference(case, 1, seed=5)
        torch.testing.assert_close(out, want[0], rtol=1e-6, atol=1e-6)
        for got, expected in zip((q.grad, k.grad, v.grad), want[1:]):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_ranks(cp_rank_run, 2, tmp_path_factory.mktemp("cp"), CASES)


def test_two_ranks_equal_one_process(two_ranks):
    ranks = [attention for attention, _ in two_ranks]
    for i, case in enumerate(CASES):
        want = reference(case, 2, seed=i)
        got = [zigzag_unshard([ranks[r][i][j] for r in range(2)]) for j in range(4)]
        if case[-1] == torch.float32:
            # Same kernel; only the order of the dK/dV sums over query chunks differs.
            tolerances = [dict(rtol=1e-6, atol=1e-6)] + [dict(rtol=1e-5, atol=1e-5)] * 3
        else:
            # bf16: each rank's dK/dV part is rounded to bf16 once before the fp32 sum.
            tolerances = [dict(rtol=1.6e-2, atol=1e-2)] * 4
        for j, (g, w, tol) in enumerate(zip(got, want, tolerances)):
            torch.testing.assert_close(g.float(), w.float(), **tol, msg=lambda m: f"case {case}, tensor {j}: {m}")


# ---------------------------------------------------------------- a model step under CP

SAMPLE = np.random.default_rng(3).integers(0, 64, size=203)  # padded to 204 for cp = 2


def tiny_llama(attention):
    from transformers import LlamaConfig, LlamaForCausalLM
    import varpack.hf
    varpack.hf.register()
    varpack.context_parallel.register_hf()
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    config._attn_implementation = attention
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def model_step_on_rank(rank, world):
    model = tiny_llama("varpack_cp")
    batch = cp_sample_batch(SAMPLE, world, rank)
    targets = batch.pop("shift_labels")
    logits = model(**batch).logits
    loss = torch.nn.functional.cross_entropy(logits[0], targets[0], ignore_index=-100, reduction="sum")
    loss = loss / (len(SAMPLE) - 1)
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    total = loss.detach().clone()
    for t in (grads, total):  # each rank holds part of the sum over the sample's tokens
        torch.distributed.all_reduce(t)
    return float(total), grads


def test_a_model_step_over_two_ranks_equals_one_process(two_ranks):
    model = tiny_llama("varpack")
    ids = torch.as_tensor(SAMPLE)[None]
    loss = model(input_ids=ids, labels=ids).loss  # mean over the 202 next-token targets
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    for _, (rank_loss, rank_grads) in two_ranks:
        assert rank_loss == pytest.approx(float(loss.detach()), rel=1e-5)
        torch.testing.assert_close(rank_grads, grads, rtol=1e-4, atol=1e-6)
