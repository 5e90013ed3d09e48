"""varpack.linear_cross_entropy against torch's cross-entropy of the full logits, and
varpack.hf.prepare(model) against the stock model on packed batches (loss, gradients, compiled
layers without graph breaks or recompiles)."""
import os
import subprocess
import sys

import pytest
import torch

import varpack
from varpack.linear_cross_entropy import linear_cross_entropy, shift_labels

transformers = pytest.importorskip("transformers")
import varpack.hf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reference_loss(hidden, weight, targets, num_items=None):
    logits = hidden @ weight.T
    reduction = "mean" if num_items is None else "sum"
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, weight.shape[0]),
                                             targets.reshape(-1), reduction=reduction)
    return loss if num_items is None else loss / num_items


@pytest.mark.parametrize("tokens,chunk", [(1, 4), (7, 1), (33, 8), (64, 64), (65, 64), (40, 1000)])
def test_linear_cross_entropy_matches_full_logits(tokens, chunk):
    gen = torch.Generator().manual_seed(tokens * 31 + chunk)
    hidden = torch.randn(tokens, 24, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 24, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (tokens,), generator=gen)
    targets[torch.rand(tokens, generator=gen) < 0.3] = -100
    targets[0] = 3  # at least one counted target
    mine = linear_cross_entropy(hidden, weight, targets, chunk_tokens=chunk)
    mine_grads = torch.autograd.grad(mine * 1.7, (hidden, weight))
    ref = reference_loss(hidden, weight, targets)
    ref_grads = torch.autograd.grad(ref * 1.7, (hidden, weight))
    torch.testing.assert_close(mine, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(mine_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_linear_cross_entropy_without_gradients():
    """Under no_grad (evaluation) only the loss is computed, and it is the same loss."""
    hidden = torch.randn(9, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (9,))
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets, chunk_tokens=4)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, reference_loss(hidden, weight, targets).detach())


def test_linear_cross_entropy_num_items_and_no_targets():
    hidden = torch.randn(2, 5, 8, dtype=torch.float64)
    weight = torch.randn(11, 8, dtype=torch.float64)
    targets = torch.randint(0, 11, (2, 5))
    torch.testing.assert_close(linear_cross_entropy(hidden, weight, targets, num_items_in_batch=17),
                               reference_loss(hidden, weight, targets, num_items=17))
    none = torch.full((2, 5), -100)
    assert torch.isnan(linear_cross_entropy(hidden, weight, none))  # as torch's mean of nothing
    assert linear_cross_entropy(hidden, weight, none, num_items_in_batch=4) == 0


def test_linear_cross_entropy_rejects_bad_shapes():
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(torch.randn(4, 8), torch.randn(11, 8), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="weight"):
        linear_cross_entropy(torch.randn(4, 8), torch.randn(11, 7), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="chunk_tokens"):
        linear_cross_entropy(torch.randn(4, 8), torch.randn(11, 8),
                             torch.zeros(4, dtype=torch.long), chunk_tokens=0)


def test_shift_labels_never_crosses_a_packed_boundary():
    # Two packed samples [5, 6, 7] and [8, 9]; the collator marks each sample's first label -100.
    labels = torch.tensor([[-100, 6, 7, -100, 9]])
    assert shift_labels(labels).tolist() == [[6, 7, -100, 9, -100]]


def tiny_llama(seed=0, layers=2):
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).double()


def packed_batch(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    samples = [torch.randint(0, 97, (n,), generator=gen).tolist() for n in lengths]
    return varpack.PackingCollator()(samples)


def grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("lengths", [(1, 7, 33, 64, 2), (128,), (5, 1, 1, 9)])
def test_prepare_matches_stock_model(lengths):
    varpack.hf.register()
    stock = tiny_llama()
    stock.set_attn_implementation("varpack")
    prepared = varpack.hf.prepare(tiny_llama(), compile=False, chunk_tokens=16)
    batch = packed_batch(lengths)
    expected = stock(**batch).loss
    expected.backward()
    out = prepared(**batch)
    out.loss.backward()
    assert out.logits is None
    # transformers' loss runs in float32 even for a float64 model; the fused one keeps float64.
    torch.testing.assert_close(out.loss, expected, rtol=1e-6, atol=1e-7, check_dtype=False)
    torch.testing.assert_close(grads(prepared), grads(stock), rtol=1e-5, atol=1e-7)


def test_prepare_num_items_in_batch_and_logits_without_labels():
    prepared = varpack.hf.prepare(tiny_llama(), compile=False)
    stock = tiny_llama()
    stock.set_attn_implementation("varpack")
    batch = packed_batch((9, 4))
    n = torch.tensor(40)
    torch.testing.assert_close(prepared(**batch, num_items_in_batch=n).loss,
                               stock(**batch, num_items_in_batch=n).loss, check_dtype=False)
    batch.pop("labels")
    torch.testing.assert_close(prepared(**batch).logits, stock(**batch).logits)


def test_prepare_refuses_a_head_it_would_get_wrong():
    model = tiny_llama()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        varpack.hf.prepare(model, compile=False)


def test_prepared_layers_compile_once_for_every_batch_shape():
    """fullgraph=True fails on a graph break; the counter shows one graph for all layers and
    shapes (aot_eager: the compiler's tracing and autograd without Inductor's slow CPU codegen)."""
    import torch._dynamo.utils as dynamo_utils

    torch._dynamo.reset()
    dynamo_utils.counters.clear()  # other tests' compilations count in the same process
    eager = varpack.hf.prepare(tiny_llama(layers=3).float(), compile=False)
    compiled = varpack.hf.prepare(tiny_llama(layers=3).float(), compile=True,
                                  compile_backend="aot_eager")
    for i, lengths in enumerate([(1, 7, 33), (5, 9, 2, 60), (100,), (3, 3, 3)]):
        batch = packed_batch(lengths, seed=i)
        torch.testing.assert_close(compiled(**batch).loss, eager(**batch).loss,
                                   rtol=1e-5, atol=1e-6)
    assert dynamo_utils.counters["stats"]["unique_graphs"] == 1
    assert not dynamo_utils.counters["graph_break"]


def test_training_step_benchmark_runs_on_cpu():
    """The GPU benchmark's code path, tiny and on the CPU, so a device call is never spent on a
    script error."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench/train/hf_step.py"), "--tiny",
                          "--device", "cpu", "--profiles", "short", "--steps", "2", "--warmup", "1",
                          "--tokens", "512", "--workers", "1", "--trace-modes", "",
                          "--modes", "padded_sdpa,flat_sdpa,varpack,varpack_prepared"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "varpack_prepared against varpack" in out.stdout
