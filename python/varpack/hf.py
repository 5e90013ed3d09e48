"""Hugging Face transformers integration: one call registers varpack's varlen attention with
transformers' AttentionInterface, so a model made with attn_implementation="varpack" trains on
packed batches (varpack.collator.PackingCollator or DataCollatorWithFlattening) with no other change.

    import varpack.hf
    varpack.hf.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="varpack")
    loss = model(**packed_batch).loss

Where the sequence boundaries come from, in the order transformers' flash-attention path uses:
  1. a 2D padding mask (attention_mask, ordinary padded batches): the padded tokens are dropped
     before the kernel and the output is scattered back (one host sync for the longest row);
  2. cu_seq_lens_q/k with max_length_q/k (what the collator emits): used as given, no host sync
     when max_length_* are Python ints;
  3. position_ids of a single flattened row that restart (DataCollatorWithFlattening without the
     flash kwargs): a new sequence starts wherever the position does not continue by +1; finding
     the boundaries costs one host sync;
  4. otherwise each row of the batch is one sequence: rows of equal length run through the
     fixed-length kernel (torch's SDPA), a cached decode (fewer queries than keys) through the
     varlen kernel, causal aligned bottom-right.
The kernel is any function with FlashAttention-2's flash_attn_varlen_func signature; register()
uses varpack.flash_attn_varlen_func, register_varlen_function() takes another (the training
benchmark registers torch's varlen_attn through it for a like-for-like comparison).

prepare(model) is the one call for the fastest packed training step of a stock causal LM: varpack
attention, the loss through varpack.linear_cross_entropy (no [tokens, vocab] logits), and each
decoder layer compiled once for every batch shape (docs/ARCHITECTURE.md, "The training step").
"""
from __future__ import annotations

from typing import Callable

import torch

DEFAULT_NAME = "varpack"


def _boundaries_from_position_ids(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """cu_seqlens (int32) and the longest sequence of one flattened row of positions."""
    flat = position_ids.reshape(-1)
    total = flat.numel()
    restarts = torch.ones(total, dtype=torch.bool, device=flat.device)
    restarts[1:] = flat[1:] != flat[:-1] + 1
    starts = restarts.nonzero().reshape(-1).to(torch.int32)
    end = torch.tensor([total], dtype=torch.int32, device=flat.device)
    cu_seqlens = torch.cat([starts, end])
    return cu_seqlens, int(cu_seqlens.diff().max().item())


def _host_int(value):
    # A SymInt (torch.compile with dynamic shapes) passes through: int() would specialise on it.
    return int(value.item()) if isinstance(value, torch.Tensor) else value


def make_attention_forward(varlen_fn: Callable) -> Callable:
    """Wraps an FA2-style flash_attn_varlen_func into transformers' attention-function signature."""

    def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                          value: torch.Tensor, attention_mask: torch.Tensor | None,
                          dropout: float = 0.0, scaling: float | None = None,
                          sliding_window: int | None = None, softcap: float | None = None,
                          is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
        # transformers hands q/k/v as [batch, heads, seq, head_dim]; the varlen kernel wants
        # [tokens, heads, head_dim], and the caller expects [batch, seq, heads, head_dim] back.
        batch, heads, q_len, head_dim = query.shape
        k_len = key.shape[2]
        q = query.transpose(1, 2)
        k = key.transpose(1, 2)
        v = value.transpose(1, 2)
        if torch.is_autocast_enabled(query.device.type):
            # Under autocast, RoPE leaves q and k in float32 (cos/sin follow the float32 residual
            # stream) while v comes out of its projection in bf16: cast all three to the autocast
            # dtype, as transformers' flash-attention path does.
            dtype = torch.get_autocast_dtype(query.device.type)
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        causal = bool(module.is_causal if is_causal is None else is_causal)
        options = dict(dropout_p=dropout, softmax_scale=scaling, causal=causal,
                       softcap=0.0 if softcap is None else softcap)
        if sliding_window is not None:
            options["window_size"] = (sliding_window - 1, sliding_window - 1)

        cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
        position_ids = kwargs.get("position_ids")
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError(
                    f"varpack attention got a {attention_mask.dim()}D attention_mask; it takes "
                    "the 2D padding mask (batch, keys) or none. Create the model after "
                    "varpack.hf.register() so transformers builds the right mask")
            if q_len != k_len:
                raise ValueError("varpack attention with a padding mask needs as many queries as "
                                 f"keys (got {q_len} and {k_len}); use it for training, not "
                                 "cached decoding")
            mask = attention_mask[:, -k_len:].bool()
            lengths = mask.sum(dim=1, dtype=torch.int32)
            cu = torch.nn.functional.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
            longest = int(lengths.max().item())
            keep = mask.reshape(-1).nonzero().reshape(-1)
            out = varlen_fn(q.reshape(-1, heads, head_dim)[keep],
                            k.reshape(batch * k_len, -1, head_dim)[keep],
                            v.reshape(batch * k_len, -1, v.shape[-1])[keep],
                            cu, cu, longest, longest, **options)
            out = out[0] if isinstance(out, tuple) else out
            full = out.new_zeros(batch * q_len, heads, out.shape[-1])
            full[keep] = out
            return full.view(batch, q_len, heads, -1), None

        if cu_q is not None and cu_k is not None:
            max_q = kwargs.get("max_length_q")
            max_k = kwargs.get("max_length_k", max_q)
            if max_q is None:
                max_q = int(cu_q.diff().max().item())
                max_k = int(cu_k.diff().max().item())
            max_q, max_k = _host_int(max_q), _host_int(max_k)
        elif position_ids is not None and batch == 1 and q_len == k_len:
            cu_q, max_q = _boundaries_from_position_ids(position_ids)
            cu_k, max_k = cu_q, max_q
        elif q_len == k_len and sliding_window is None and not softcap:
            # Plain rows (a padded batch): every row is as long as the others, so the fixed-length
            # kernel runs it (SDPA: cuDNN or flash on CUDA, faster per FLOP than a varlen kernel).
            # This is the padded path varpack.auto chooses when padding is low.
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=dropout,
                is_causal=causal, scale=scaling, enable_gqa=key.shape[1] != heads)
            return out.transpose(1, 2), None
        else:
            # One sequence per row; a cache (k_len > q_len) aligns causal bottom-right, as FA2 does.
            rows = torch.arange(batch + 1, dtype=torch.int32, device=query.device)
            cu_q, cu_k, max_q, max_k = rows * q_len, rows * k_len, q_len, k_len

        out = varlen_fn(q.reshape(batch * q_len, heads, head_dim),
                        k.reshape(batch * k_len, -1, head_dim),
                        v.reshape(batch * k_len, -1, v.shape[-1]),
                        cu_q, cu_k, max_q, max_k, **options)
        out = out[0] if isinstance(out, tuple) else out
        return out.view(batch, q_len, heads, -1), None

    return attention_forward


def register_varlen_function(name: str, varlen_fn: Callable) -> Callable:
    """Registers `varlen_fn` (FA2 signature) as attention implementation `name`, with the
    flash-attention mask so transformers hands it a 2D padding mask or none. Returns the wrapped
    attention function."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    forward = make_attention_forward(varlen_fn)
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return forward


def register(name: str = DEFAULT_NAME) -> Callable:
    """Registers varpack.flash_attn_varlen_func as attention implementation `name` ("varpack").
    Safe to call more than once."""
    import varpack

    return register_varlen_function(name, varpack.flash_attn_varlen_func)


# Config fields of causal LMs whose head is more than hidden @ weight.T: the fused loss refuses them.
_HEAD_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks, by the class names transformers lists as never split across devices."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def _use_fused_loss(model: torch.nn.Module, chunk_tokens: int) -> None:
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from .linear_cross_entropy import linear_cross_entropy, shift_labels

    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise ValueError(f"varpack.hf.prepare(fused_loss=True): {type(model).__name__}'s output "
                         "layer is not a bias-free nn.Linear; pass fused_loss=False")
    for field in _HEAD_TRANSFORMS:
        if getattr(model.config, field, None) not in (None, 0, 0.0, 1, 1.0):
            raise ValueError(f"varpack.hf.prepare(fused_loss=True): {type(model).__name__} sets "
                             f"config.{field}, which the fused loss does not apply; pass "
                             "fused_loss=False")
    decoder = model.get_decoder()
    unfused_forward = model.forward

    def forward(input_ids=None, labels=None, num_items_in_batch=None, **kwargs):
        targets = kwargs.pop("shift_labels", None)
        if labels is None and targets is None:
            return unfused_forward(input_ids=input_ids, **kwargs)
        kwargs.pop("logits_to_keep", None)
        outputs = decoder(input_ids=input_ids, **kwargs)
        if targets is None:
            targets = shift_labels(labels)
        loss = linear_cross_entropy(outputs.last_hidden_state, head.weight, targets,
                                    num_items_in_batch=num_items_in_batch,
                                    chunk_tokens=chunk_tokens)
        return CausalLMOutputWithPast(loss=loss, logits=None,
                                      past_key_values=outputs.past_key_values,
                                      hidden_states=outputs.hidden_states,
                                      attentions=outputs.attentions)

    model.forward = forward


def _compile_layer(layer: torch.nn.Module, backend: str, recompute_elementwise: bool) -> None:
    """layer.forward compiled once for every batch shape; with recompute_elementwise, compiled
    with the partitioner free to recompute elementwise results a matmul reads in the backward (the
    normalised inputs, the SwiGLU product) instead of saving them: about a quarter less activation
    memory for a Llama layer, for a few elementwise passes more."""
    compiled = torch.compile(layer.forward, fullgraph=True, dynamic=True, backend=backend)
    if not recompute_elementwise:
        layer.forward = compiled
        return

    def forward(*args, **kwargs):
        # The partitioner reads this at compile time, which happens inside the call.
        with torch._functorch.config.patch(ban_recompute_materialized_backward=False):
            return compiled(*args, **kwargs)

    layer.forward = forward


def prepare(model: torch.nn.Module, *, compile: bool | None = None, fused_loss: bool = True,
            chunk_tokens: int = 4096, compile_backend: str = "inductor",
            recompute_elementwise: bool = True) -> torch.nn.Module:
    """Makes a stock Hugging Face causal LM train fast on packed batches, in place; returns it.

    - attention: varpack's varlen kernel (attn_implementation="varpack");
    - fused_loss: with labels, model(...).loss comes from varpack.linear_cross_entropy, chunks of
      `chunk_tokens` tokens, and .logits is None (the [tokens, vocab] logits are never made);
      Hugging Face's reduction, num_items_in_batch included;
    - compile (default: on CUDA): every decoder layer torch.compile'd with fullgraph=True and
      dynamic shapes, so normalisation, rotary and activation fuse and one compilation serves every
      packed length (no recompile per batch);
    - recompute_elementwise (with compile): the backward recomputes the elementwise results it
      needs (normalised inputs, the SwiGLU product) rather than keeping them from the forward:
      less activation memory, a little more time; False keeps Inductor's default.
    Sets config.use_cache = False (generate() still asks for its cache explicitly).
    Feed it the collator's batches (varpack.PackingCollator or DataCollatorWithFlattening with
    return_flash_attn_kwargs=True): max_length_q/k as Python ints keep the step free of host syncs.
    """
    register()
    model.set_attn_implementation(DEFAULT_NAME)
    # A training step needs no KV cache, and its per-layer state would recompile every layer.
    model.config.use_cache = False
    if fused_loss:
        _use_fused_loss(model, chunk_tokens)
    if compile is None:
        compile = next(model.parameters()).device.type == "cuda"
    if compile:
        layers = _decoder_layers(model)
        if not layers:
            raise ValueError(f"varpack.hf.prepare(compile=True): {type(model).__name__} names no "
                             "decoder layer class in _no_split_modules; compile it yourself or pass "
                             "compile=False")
        for layer in layers:
            _compile_layer(layer, compile_backend, recompute_elementwise)
    return model
