"""DataLoader collation for padding-free training: packs tokenised samples into rows of a capacity
with varpack's planner and batch builder, and emits the keys Hugging Face's flash-attention path
reads, so it drops in where transformers' DataCollatorWithFlattening is used.

Two entry points:
  PackingCollator   collate_fn for a map-style dataset: the DataLoader's list of samples becomes
                    one flattened batch (all rows concatenated, [1, T]).
  PackedStream      an IterableDataset over a stream of samples: a bounded buffer is planned,
                    well-filled rows are emitted `rows_per_batch` at a time, the samples of the
                    under-filled last rows wait in the buffer for more company. Use it with
                    DataLoader(stream, batch_size=None).
Both are deterministic per (seed, epoch): call set_epoch(epoch) as with DistributedSampler.

A sample is a 1-D sequence of token ids, or a mapping with "input_ids" and optionally "labels"
(the batch builder reads them; -100 in a sample's labels stays -100). Arrow data is read from its
buffers (varpack.read_tokens, "labels" used where the table has it): PackingCollator takes a batch
given as a pyarrow Table or RecordBatch, PackedStream a Table, a datasets.Dataset or the path of a
Parquet / Arrow file or token file. Emitted keys:
    input_ids, labels, position_ids           [1, T] int64 (labels -100 at each sample's start)
    cu_seq_lens_q, cu_seq_lens_k              [segments + 1] int32
    max_length_q, max_length_k                Python ints: the kernel needs no device sync
    loss_weight                               [1, T] float32, if return_loss_weights: per-token or
                                              per-sample normalisation (varpack.loss explains)
    segment_sample, segment_offset            if return_segments: where each segment came from
With a varpack.auto.PathChooser, PackingCollator picks per batch between that packed layout and a
padded one (one right-padded row per sample, [n, longest]: input_ids, labels -100 on padding, and
loss_weight [n, longest] if asked), whichever the fitted cost model predicts faster; the choice
is logged. The padded layout has no attention mask: it is for causal models, where no valid
token sees the padding after it. A model with attn_implementation="varpack" (varpack.hf) runs
the packed layout through the varlen kernel and the padded one through the fixed-length kernel.

The packing itself (planning, copying tokens, labels, weights) happens in C++; this file only
chooses rows and lays out and renames the results.
"""
from __future__ import annotations

import functools
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from .token_files import as_samples

NORMALISATIONS = ("token", "sample")


def epoch_seed(seed: int, epoch: int, index: int = 0) -> int:
    """A 64-bit seed for (seed, epoch, index) that differs for every triple, so epochs and buffer
    flushes shuffle differently but reproducibly."""
    return int(np.random.SeedSequence([seed, epoch, index]).generate_state(1, dtype=np.uint64)[0])


def sample_length(sample: Any, index: int) -> int:
    ids = sample["input_ids"] if hasattr(sample, "keys") else sample
    if isinstance(ids, (str, bytes)):  # has a length, but of characters: tokenize first
        raise ValueError(f"sample {index}: got text ({type(ids).__name__} {ids[:40]!r}), not token ids; "
                         "tokenize it first (e.g. tokenizer(text)[\"input_ids\"])")
    try:
        return len(ids)
    except TypeError:
        raise ValueError(f"sample {index}: expected a sequence of token ids or a mapping with "
                         f"\"input_ids\", got {type(ids).__name__}") from None


def pad_rows(flat: torch.Tensor, row_offsets: torch.Tensor, width: int, fill) -> torch.Tensor:
    """[rows, width] from a flat [T] tensor whose rows are [row_offsets[r], row_offsets[r+1]),
    each row left-aligned and filled up with `fill`."""
    rows = len(row_offsets) - 1
    counts = row_offsets.diff()
    if rows and int(counts.max()) > width:
        raise ValueError(f"a row of {int(counts.max())} tokens does not fit a width of {width}")
    row = torch.repeat_interleave(torch.arange(rows), counts)
    column = torch.arange(len(flat)) - row_offsets[row]
    out = torch.full((rows, width), fill, dtype=flat.dtype)
    out[row, column] = flat
    return out



def check_planner_names(owner: str, algorithm: str, overlong: str) -> None:
    """Refuses unknown planner names at construction, not at the first batch."""
    from varpack.packing import ALGORITHMS, OVERLONG_POLICIES, check_choice

    check_choice(f"{owner}: algorithm", algorithm, ALGORITHMS)
    check_choice(f"{owner}: overlong", overlong, OVERLONG_POLICIES)


class _BatchFormat:
    """Turns the batch builder's flat tensors into the emitted dict (shared by both entry points)."""

    def __init__(self, pad_to_multiple: int, pad_token_id: int, loss_normalization: str,
                 return_flash_attn_kwargs: bool, return_loss_weights: bool, return_segments: bool):
        if loss_normalization not in NORMALISATIONS:
            raise ValueError(f"loss_normalization={loss_normalization!r}: choose \"token\" (every "
                             "labelled token weighs the same) or \"sample\" (every sample weighs "
                             "the same)")
        self.pad_to_multiple = pad_to_multiple
        self.pad_token_id = pad_token_id
        self.loss_normalization = loss_normalization
        self.return_flash_attn_kwargs = return_flash_attn_kwargs
        self.return_loss_weights = return_loss_weights
        self.return_segments = return_segments

    def build(self, plan, samples: Sequence, rows: tuple[int, int] | None = None) -> dict:
        import varpack

        return self.emit(varpack.build_batch(plan, samples, rows=rows, pad_to_multiple=self.pad_to_multiple,
                                             pad_token_id=self.pad_token_id))

    def emit(self, built: dict) -> dict:
        """The emitted dict from build_batch's keys (or the same keys built elsewhere)."""
        out = {
            "input_ids": built["input_ids"].unsqueeze(0),
            "labels": built["labels"].unsqueeze(0),
            "position_ids": built["position_ids"].unsqueeze(0),
        }
        if self.return_flash_attn_kwargs:
            out["cu_seq_lens_q"] = built["cu_seqlens"]
            out["cu_seq_lens_k"] = built["cu_seqlens"]
            out["max_length_q"] = int(built["max_seqlen"])
            out["max_length_k"] = int(built["max_seqlen"])
        if self.return_loss_weights:
            out["loss_weight"] = built[f"loss_weight_per_{self.loss_normalization}"].unsqueeze(0)
        if self.return_segments:
            out["segment_sample"] = built["segment_sample"]
            out["segment_offset"] = built["segment_offset"]
            out["row_offsets"] = built["row_offsets"]
        return out

    def build_padding(self) -> dict:
        """One row of pad tokens with no target (labels -100, loss weight 0): the batch of a rank
        that has no rows in a step, so its model still runs and collectives line up. Its one
        segment's segment_sample is -1, as for padding."""
        import varpack

        width = max(1, self.pad_to_multiple)
        out = self.build(varpack.plan([width], width),
                         [{"input_ids": [self.pad_token_id] * width, "labels": [-100] * width}])
        if self.return_segments:
            out["segment_sample"] = torch.full_like(out["segment_sample"], -1)
        return out

    def build_padded(self, plan, samples: Sequence, width: int) -> dict:
        """The rows of a one-sample-per-row plan, right-padded to `width`: [rows, width]."""
        import varpack

        built = varpack.build_batch(plan, samples, pad_token_id=self.pad_token_id)
        offsets = built["row_offsets"]
        out = {"input_ids": pad_rows(built["input_ids"], offsets, width, self.pad_token_id),
               "labels": pad_rows(built["labels"], offsets, width, -100)}
        if self.return_loss_weights:
            weights = built[f"loss_weight_per_{self.loss_normalization}"]
            out["loss_weight"] = pad_rows(weights, offsets, width, 0.0)
        if self.return_segments:
            out["segment_sample"] = built["segment_sample"]
            out["segment_offset"] = built["segment_offset"]
            out["row_offsets"] = offsets
        return out


class PackingCollator:
    """collate_fn that packs the DataLoader's list of samples into rows of `capacity` tokens and
    returns them flattened as one [1, T] batch.

    capacity=None packs everything into one row (what DataCollatorWithFlattening does); a capacity
    keeps each row within a kernel-friendly size and applies the over-length policy ("error",
    "truncate" or "split") to longer samples. shuffle=True permutes the rows with a seed derived
    from (seed, epoch). chooser (a varpack.auto.PathChooser) makes the layout automatic: batches
    it predicts faster padded come out padded (see the module notes), each row padded to the
    longest sample rounded up to padded_multiple; last_decision keeps the latest choice."""

    def __init__(self, capacity: int | None = None, algorithm: str = "bfd",
                 overlong: str = "error", seed: int = 0, shuffle: bool = False,
                 pad_to_multiple: int = 1, pad_token_id: int = 0,
                 loss_normalization: str = "token", return_flash_attn_kwargs: bool = True,
                 return_loss_weights: bool = False, return_segments: bool = False,
                 chooser=None, padded_multiple: int = 8):
        if capacity is not None and capacity <= 0:
            raise ValueError(f"PackingCollator: capacity={capacity}; give a positive number of "
                             "tokens per row, or None for one row holding the whole batch")
        if padded_multiple <= 0:
            raise ValueError(f"PackingCollator: padded_multiple={padded_multiple}; it must be positive")
        check_planner_names("PackingCollator", algorithm, overlong)
        self.chooser = chooser
        self.padded_multiple = padded_multiple
        self.last_decision = None
        self.batches = 0
        self.capacity = capacity
        self.algorithm = algorithm
        self.overlong = overlong
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.format = _BatchFormat(pad_to_multiple, pad_token_id, loss_normalization,
                                   return_flash_attn_kwargs, return_loss_weights, return_segments)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, features: Sequence) -> dict:
        import varpack

        features = as_samples(features)  # a pyarrow Table or RecordBatch of the batch's rows
        if len(features) == 0:
            raise ValueError("PackingCollator: got an empty batch; the DataLoader passes at least "
                             "one sample per batch unless the dataset is empty")
        lengths = [sample_length(f, i) for i, f in enumerate(features)]
        if self.chooser is not None:
            from varpack.auto import PADDED

            longest = max(1, max(lengths) if self.capacity is None else min(max(lengths), self.capacity))
            # Rows padded to a multiple of 8 tokens: the shapes tensor cores and cuDNN run fastest
            # (what DataCollatorWithPadding(pad_to_multiple_of=8) does).
            width = -(-longest // self.padded_multiple) * self.padded_multiple
            self.last_decision = self.chooser.choose(lengths, width=width, step=self.batches)
            self.batches += 1
            if self.last_decision.path == PADDED:
                plan = varpack.plan(lengths, longest, algorithm="none", overlong=self.overlong)
                return self.format.build_padded(plan, features, width)
        capacity = self.capacity if self.capacity is not None else max(1, sum(lengths))
        plan = varpack.plan(lengths, capacity, algorithm=self.algorithm, overlong=self.overlong,
                            seed=epoch_seed(self.seed, self.epoch), shuffle=self.shuffle)
        return self.format.build(plan, features)


class PackedStream(torch.utils.data.IterableDataset):
    """Packs an iterable of samples into batches of `rows_per_batch` rows of `capacity` tokens,
    holding at most `buffer_size` samples in memory.

    When the buffer is full it is planned as a whole; the trailing rows that are less than
    `min_fill` full keep their samples in the buffer (at most half of it, so the stream always
    advances), the rest leave as batches in an order shuffled per (seed, epoch, flush). At the end
    of the stream everything left is emitted, the last batch possibly with fewer rows.

    Data parallel (varpack.sharding has the contract): every rank and DataLoader worker reads the
    whole stream and plans it alike (planning needs only lengths), and builds only its own batches:
    batch j of the stream goes to rank j % world_size, and a rank's m-th batch of the pass to
    worker m % num_workers, so a rank's batches are the same, in the same order, with any
    num_workers.
    Every rank ends with ceil(batches / world_size) steps, a rank short of one getting a padding
    row. rank, world_size: None takes torch.distributed's when initialised, else rank 0 of 1."""

    def __init__(self, samples: Iterable, capacity: int, rows_per_batch: int = 1,
                 buffer_size: int = 1024, algorithm: str = "bfd", overlong: str = "error",
                 seed: int = 0, shuffle: bool = True, min_fill: float = 0.99,
                 pad_to_multiple: int = 1, pad_token_id: int = 0,
                 loss_normalization: str = "token", return_flash_attn_kwargs: bool = True,
                 return_loss_weights: bool = False, return_segments: bool = False,
                 rank: int | None = None, world_size: int | None = None):
        from .sharding import EpochCell, distributed_defaults

        super().__init__()
        for name, value in (("capacity", capacity), ("rows_per_batch", rows_per_batch),
                            ("buffer_size", buffer_size)):
            if value <= 0:
                raise ValueError(f"PackedStream: {name}={value}; it must be positive")
        if not 0.0 <= min_fill <= 1.0:
            raise ValueError(f"PackedStream: min_fill={min_fill}; give the fraction of a row "
                             "(0..1) below which trailing rows wait for more samples")
        check_planner_names("PackedStream", algorithm, overlong)
        self.rank, self.world_size = distributed_defaults(rank, world_size, "PackedStream")
        self.samples = as_samples(samples)  # Arrow data or a path: its samples, read once
        self.capacity = capacity
        self.rows_per_batch = rows_per_batch
        self.buffer_size = buffer_size
        self.algorithm = algorithm
        self.overlong = overlong
        self.seed = seed
        self.shuffle = shuffle
        self.min_fill = min_fill
        self.format = _BatchFormat(pad_to_multiple, pad_token_id, loss_normalization,
                                   return_flash_attn_kwargs, return_loss_weights, return_segments)
        self._cell = EpochCell()
        self._resume_epoch = None
        self._resume_worker = None
        self._yielded = 0

    @property
    def epoch(self) -> int:
        return self._cell.get()[0]

    def set_epoch(self, epoch: int) -> None:
        """The next pass streams `epoch` from its first batch, or from the step load_state_dict
        gave for this epoch; reaches running DataLoader workers too."""
        start = self._cell.get()[1] if epoch == self._resume_epoch else 0
        if epoch != self._resume_epoch:
            self._resume_epoch = self._resume_worker = None
        self._cell.set(epoch, start)

    def layout(self) -> dict:
        """What a saved position is valid for: the same layout gives the same batches."""
        return {"world_size": self.world_size, "rank": self.rank, "seed": self.seed}

    def state_dict(self, steps_done: int | None = None) -> dict:
        """The position after `steps_done` batches of the current pass (a plain DataLoader's
        count); None: the batches this copy yielded, which is the loader's count with
        num_workers=0 and, inside a DataLoader worker (torchdata's StatefulDataLoader asks them),
        that worker's own progress."""
        epoch, start = self._cell.get()
        state = {"epoch": epoch, "step": start, **self.layout()}
        info = torch.utils.data.get_worker_info()
        if steps_done is not None:
            state["step"] += steps_done
        elif info is None:
            state["step"] += self._yielded
        else:
            state["worker"] = [info.id, info.num_workers, self._yielded]
        return state

    def load_state_dict(self, state: dict) -> None:
        """The next pass streams epoch state["epoch"] from this rank's batch state["step"]."""
        from .sharding import check_state

        epoch, step = check_state("PackedStream", state, self.layout())
        self._resume_epoch = epoch
        self._resume_worker = state.get("worker")
        self._cell.set(epoch, step)

    def __iter__(self):
        epoch, start = self._cell.get()
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        skip = 0
        if self._resume_worker is not None and epoch == self._resume_epoch:
            # A DataLoader worker restored by torchdata goes on after its own last batch.
            saved_id, saved_workers, done = self._resume_worker
            if (saved_id, saved_workers) == (worker, workers):
                skip = done
        self._resume_worker = None
        self._yielded = skip
        mine = 0  # this rank's batches in the stream so far
        total = 0
        for total, build in enumerate(self._batches(epoch), start=1):
            if (total - 1) % self.world_size == self.rank:
                mine += 1
                yield from self._if_mine(mine - 1, start, worker, workers, skip, build)
        steps = -(-total // self.world_size)
        for step in range(mine, steps):  # a rank short of batches pads up to every rank's count
            yield from self._if_mine(step, start, worker, workers, skip, self.format.build_padding)

    def _if_mine(self, step: int, start: int, worker: int, workers: int, skip: int, build):
        """This copy's batch for the rank's `step`, if the step is this worker's and past the
        `skip` batches a restored worker had already given."""
        if step < start or (step - start) % workers != worker:
            return
        if (step - start) // workers < skip:
            return
        self._yielded += 1
        yield build()

    def _batches(self, epoch: int):
        """Every batch of the stream for `epoch`, in order, each as a function that builds it."""
        buffer: list = []
        flush = 0
        for sample in self.samples:
            buffer.append(sample)
            if len(buffer) >= self.buffer_size:
                batches, buffer = self._drain(buffer, epoch, flush, final=False)
                flush += 1
                yield from batches
        while buffer:
            batches, buffer = self._drain(buffer, epoch, flush, final=True)
            flush += 1
            yield from batches

    def _drain(self, buffer: list, epoch: int, flush: int, final: bool) -> tuple[list, list]:
        """Plans the buffer; returns (functions building the batches to emit, samples kept for
        the next flush)."""
        import varpack

        lengths = [sample_length(s, i) for i, s in enumerate(buffer)]
        plan = varpack.plan(lengths, self.capacity, algorithm=self.algorithm,
                            overlong=self.overlong, seed=epoch_seed(self.seed, epoch, flush))
        pieces, row_begin = np.asarray(plan.pieces), np.asarray(plan.row_begin)
        rows = len(row_begin) - 1
        emit = rows
        if not final:
            emit = self._rows_to_emit(pieces, row_begin, lengths)
        kept_samples = set()
        for piece in range(row_begin[emit], row_begin[rows]):
            kept_samples.add(int(pieces[piece, 0]))
        kept = [buffer[i] for i in sorted(kept_samples)]

        ranges = [(first, min(first + self.rows_per_batch, emit))
                  for first in range(0, emit, self.rows_per_batch)]
        order = np.arange(len(ranges))
        if self.shuffle:
            order = np.random.default_rng(epoch_seed(self.seed, epoch, flush)).permutation(order)
        batches = [functools.partial(self.format.build, plan, buffer, rows=ranges[i]) for i in order]
        return batches, kept

    def _rows_to_emit(self, pieces: np.ndarray, row_begin: np.ndarray, lengths: list) -> int:
        """How many leading rows leave now. Trailing rows under min_fill, and the rows of a last
        incomplete batch, wait for the next flush as long as they hold only whole samples and at
        most half the buffer; past that budget a smaller batch leaves rather than stall the stream."""
        rows = len(row_begin) - 1
        budget = len(lengths) // 2
        held = 0
        emit = rows
        while emit > 0:
            row = pieces[row_begin[emit - 1]:row_begin[emit]]
            whole = all(p[1] == 0 and p[2] == lengths[p[0]] for p in row)
            fill = row[:, 2].sum() / self.capacity if len(row) else 0.0
            incomplete_batch = emit % self.rows_per_batch != 0
            if not whole or held + len(row) > budget or not (fill < self.min_fill or incomplete_batch):
                break
            held += len(row)
            emit -= 1
        return emit
