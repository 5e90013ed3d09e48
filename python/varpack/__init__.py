"""varpack: padding-free transformer training.

Sequence packing (plan rows from lengths, build packed batches) and variable-length attention
(flash_attn_varlen_func, a torch operator with autograd and torch.compile support), on a C++ core;
a numpy reader of the packed binary format (PackedFile); memory-mapped token-file readers
(read_tokens: .npy + offsets, Megatron .bin/.idx, and Arrow data: Parquet, Feather, datasets;
token_lengths: their lengths alone); varpack.export for packed rows as Parquet (TRL's columns);
BalancedPackedDataset, a data-parallel dataset of packed rows balanced by cost across ranks, and
PackedFileDataset, the same over a packed binary file (varpack.sharding: the contract of both and
of PackedStream; varpack.trainer: HF Trainer); CostModel, the row cost they balance (fitted by
python -m varpack calibrate); varpack.context_parallel for samples longer than one rank holds.
"""

import torch  # noqa: F401  libtorch must be loaded before the extension that links against it

from . import _C  # noqa: F401  the C++ core; loading it registers the torch.ops.varpack operators
from .attention import flash_attn_varlen_func
from . import loss  # noqa: F401  varpack.loss.global_count and data_parallel_loss, for data-parallel loops
from .auto import CostModel
from .balance import Balance, balance_rows, row_costs, select_rows
from .balanced_dataset import BalancedPackedDataset
from .collator import PackedStream, PackingCollator
from .packed_dataset import PackedFileDataset
from .packed_file import PackedFile, PackedFileError, PackedRow
from .packing import Plan, build_batch, plan
from .token_files import ArrowTokens, TokenFile, read_tokens, token_lengths

__version__ = "0.1.0"

__all__ = ["ArrowTokens", "Balance", "BalancedPackedDataset", "CostModel", "PackedFile", "PackedFileDataset", "PackedFileError", "PackedRow", "PackedStream",
           "PackingCollator", "Plan", "TokenFile", "balance_rows", "build_batch", "flash_attn_varlen_func", "plan",
           "read_tokens", "row_costs", "select_rows", "token_lengths"]
