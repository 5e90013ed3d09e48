"""A small vision-language-action model, hand-written in torch: a ViT (patch embedding, learned
row/column embeddings, pre-norm transformer blocks, bidirectional attention within each image)
whose tokens a linear projection scatters into a causal decoder (RoPE on position_ids) at the
image placeholders. Next-token loss on the labelled (action) tokens.

It runs either layout of varpack.multimodal_batch from the same weights:
  varlen   x is [T, d]; attention is varpack.flash_attn_varlen_func over cu_seqlens (each image
           its own sequence in the vision tower, each sample its own in the decoder)
  padded   x is [B, L, d]; attention is torch's scaled_dot_product_attention (masked in the vision
           tower, causal in the decoder)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import varpack


@dataclass(frozen=True)
class ModelConfig:
    patch_dim: int         # values per patch (patch * patch * channels)
    max_grid: int          # most patches per image side
    vocab: int
    vision_layers: int
    vision_dim: int
    vision_heads: int
    decoder_layers: int
    decoder_dim: int
    decoder_heads: int
    mlp_ratio: int = 4


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [..., tokens, heads, head_dim] at integer positions [..., tokens]."""
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angle = positions.to(torch.float32)[..., None] * freq            # [..., tokens, half]
    cos, sin = angle.cos()[..., None, :].to(x.dtype), angle.sin()[..., None, :].to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, layout: dict, positions=None):
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, -1)).unbind(-3)   # [..., L, H, hd]
        if positions is not None:
            q, k = rope(q, positions), rope(k, positions)
        if "cu_seqlens" in layout:  # varlen: [T, H, hd]
            y = varpack.flash_attn_varlen_func(q, k, v, layout["cu_seqlens"], layout["cu_seqlens"],
                                               layout["max_seqlen"], layout["max_seqlen"], causal=self.causal)
        else:  # padded: [B, L, H, hd] -> [B, H, L, hd]
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            mask = layout.get("mask")
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal and mask is None)
            y = y.transpose(1, 2)
        return self.out(y.flatten(-2))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool, mlp_ratio: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attention = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x, layout, positions=None):
        x = x + self.attention(self.norm1(x), layout, positions)
        return x + self.mlp(self.norm2(x))


class VLAModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.patch_embed = nn.Linear(c.patch_dim, c.vision_dim)
        self.row_embed = nn.Embedding(c.max_grid, c.vision_dim)
        self.col_embed = nn.Embedding(c.max_grid, c.vision_dim)
        self.vision = nn.ModuleList(Block(c.vision_dim, c.vision_heads, False, c.mlp_ratio)
                                    for _ in range(c.vision_layers))
        self.vision_norm = nn.LayerNorm(c.vision_dim)
        self.project = nn.Linear(c.vision_dim, c.decoder_dim)
        self.embed = nn.Embedding(c.vocab, c.decoder_dim)
        self.decoder = nn.ModuleList(Block(c.decoder_dim, c.decoder_heads, True, c.mlp_ratio)
                                     for _ in range(c.decoder_layers))
        self.norm = nn.LayerNorm(c.decoder_dim)
        self.head = nn.Linear(c.decoder_dim, c.vocab, bias=False)

    def encode_images(self, batch: dict) -> torch.Tensor:
        """The vision tower's output, flattened to [vision tokens incl. padding, decoder_dim]."""
        x = self.patch_embed(batch["pixel_patches"]) + self.row_embed(batch["patch_rows"]) \
            + self.col_embed(batch["patch_cols"])
        if "vision_mask" in batch:
            # Key 0 always visible: an empty padding slot then attends to something (no NaN that
            # the backward would spread); a real image's key 0 is a real patch anyway.
            mask = batch["vision_mask"].clone()
            mask[:, 0] = True
            layout = {"mask": mask[:, None, None, :]}
        else:
            layout = {"cu_seqlens": batch["vision_cu_seqlens"], "max_seqlen": batch["vision_max_seqlen"]}
        for block in self.vision:
            x = block(x, layout)
        return self.project(self.vision_norm(x)).flatten(0, -2)

    def hidden(self, batch: dict) -> torch.Tensor:
        """The decoder's last hidden states, [T, d] (varlen) or [B, L, d] (padded)."""
        x = self.embed(batch["input_ids"])
        if len(batch["image_token_index"]):
            visual = self.encode_images(batch)[batch["vision_token_index"]]
            flat = x.flatten(0, -2).index_copy(0, batch["image_token_index"], visual.to(x.dtype))
            x = flat.view(x.shape)
        layout = ({"cu_seqlens": batch["cu_seqlens"], "max_seqlen": batch["max_seqlen"]}
                  if "cu_seqlens" in batch else {})
        for block in self.decoder:
            x = block(x, layout, batch["position_ids"])
        return self.norm(x)

    def forward(self, batch: dict, reduction: str = "mean") -> torch.Tensor:
        """Next-token cross-entropy on the labelled tokens: the mean, the sum, or one per token
        ("none", in the order of the labelled tokens). The head runs only where a label is."""
        hidden, labels = self.hidden(batch), batch["labels"]
        hidden, targets = hidden[..., :-1, :], labels[..., 1:]
        where = targets != -100
        logits = self.head(hidden[where])
        return F.cross_entropy(logits.float(), targets[where], reduction=reduction)
