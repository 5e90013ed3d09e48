"""Tests of the Python packing API: varpack.plan and varpack.build_batch.

Plans are checked against their invariants (every token placed exactly once or counted as
truncated, rows within capacity, statistics consistent with the pieces); batches against a tiny
pure-Python builder written from batch.h's contract; errors from the C++ core must surface as
ValueError with its message.
"""

import math
import pickle

import numpy as np
import pytest
import torch

import varpack

ALGORITHMS = ["ffd", "bfd", "histogram", "none", "dynamic"]
PACKERS = ["ffd", "bfd", "histogram"]


def random_lengths(rng, n, high, zeros=3):
    lengths = rng.integers(1, high + 1, size=n)
    lengths[rng.choice(n, size=zeros, replace=False)] = 0
    return lengths


def check_plan(plan, lengths, capacity, algorithm, overlong):
    lengths = np.asarray(lengths, dtype=np.int64)
    pieces, row_begin, row_width = plan.pieces, plan.row_begin, plan.row_width
    assert pieces.dtype == np.int64 and pieces.ndim == 2 and pieces.shape[1] == 3
    assert row_begin.dtype == np.int64 and row_width.dtype == np.int64
    assert row_begin[0] == 0 and row_begin[-1] == len(pieces) and np.all(np.diff(row_begin) >= 1)
    assert len(row_begin) == len(row_width) + 1

    # Every sample's tokens are covered exactly once, in order, by its pieces (up to the capacity
    # when truncating); zero-length samples get no piece.
    kept = np.minimum(lengths, capacity) if overlong == "truncate" else lengths
    covered = np.zeros(len(lengths), dtype=np.int64)
    for sample, offset, length in sorted(map(tuple, pieces), key=lambda p: (p[0], p[1])):
        assert length >= 1 and length <= capacity
        assert offset == covered[sample], f"sample {sample}: piece at {offset}, expected {covered[sample]}"
        covered[sample] += length
    np.testing.assert_array_equal(covered, kept)

    row_tokens = np.add.reduceat(pieces[:, 2], row_begin[:-1]) if len(pieces) else np.zeros(0, np.int64)
    assert np.all(row_tokens <= row_width) and np.all(row_width <= capacity)
    if algorithm in PACKERS + ["none"]:
        assert np.all(row_width == capacity)
    if algorithm == "none":
        assert np.all(np.diff(row_begin) == 1)

    s = plan.stats
    tokens = int(kept.sum())
    assert s["samples"] == len(lengths) and s["tokens"] == tokens and s["rows"] == plan.num_rows == len(plan)
    assert s["capacity"] == capacity
    assert s["lower_bound_rows"] == math.ceil(tokens / capacity)
    assert s["gap_to_lower_bound"] == s["rows"] - s["lower_bound_rows"] >= 0
    assert s["padded_tokens"] == int(row_width.sum()) - tokens
    assert s["padding_rate_packed"] == pytest.approx(s["padded_tokens"] / max(1, row_width.sum()))
    assert s["padding_rate_unpacked"] == pytest.approx(1 - tokens / max(1, len(pieces) * capacity))
    assert s["truncated_tokens"] == (int((lengths - kept).sum()) if overlong == "truncate" else 0)
    assert s["skipped_samples"] == int((lengths == 0).sum())
    assert s["split_samples"] == (int((lengths > capacity).sum()) if overlong == "split" else 0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("overlong", ["error", "truncate", "split"])
def test_plan_invariants(rng, algorithm, overlong):
    capacity = 64
    high = capacity if overlong == "error" else 3 * capacity
    lengths = random_lengths(rng, 300, high)
    plan = varpack.plan(lengths, capacity, algorithm=algorithm, overlong=overlong, batch_size=5)
    check_plan(plan, lengths, capacity, algorithm, overlong)


def test_plan_takes_lists_and_empty_input():
    plan = varpack.plan([3, 5, 0, 8], 8)
    check_plan(plan, [3, 5, 0, 8], 8, "bfd", "error")
    assert plan.num_rows == 2  # 8 | 5 + 3
    empty = varpack.plan([], 16)
    assert empty.num_rows == 0 and empty.pieces.shape == (0, 3) and empty.stats["tokens"] == 0


def test_dynamic_rows_follow_input_order_and_batch_size():
    lengths = [5, 9, 2, 7, 3, 1, 4]
    plan = varpack.plan(lengths, 16, algorithm="dynamic", batch_size=3)
    samples = [plan.row(r)[:, 0].tolist() for r in range(plan.num_rows)]
    assert samples == [[i] for i in range(len(lengths))]  # one sample per row, in input order
    # Each row is padded to the longest sample of its batch of 3 consecutive samples.
    widths = [max(lengths[i // 3 * 3:i // 3 * 3 + 3]) for i in range(len(lengths))]
    assert widths == plan.row_width.tolist()


def test_rows_and_row_helpers():
    plan = varpack.plan([4, 4, 4, 3], 8, algorithm="ffd")
    rows = plan.rows()
    assert len(rows) == plan.num_rows
    for r, pieces in enumerate(rows):
        np.testing.assert_array_equal(pieces, plan.pieces[plan.row_begin[r]:plan.row_begin[r + 1]])
    np.testing.assert_array_equal(plan.row(-1), rows[-1])
    with pytest.raises(IndexError, match="row 2 is out of range: the plan has 2 rows"):
        plan.row(2)
    with pytest.raises(ValueError):
        plan.pieces[0, 0] = 7  # read-only views of the C++ plan
    assert "rows=2" in repr(plan)


def test_plans_pickle(rng):
    lengths = random_lengths(rng, 100, 200)
    plan = varpack.plan(lengths, 128, overlong="split")
    copy = pickle.loads(pickle.dumps(plan))
    assert copy == plan and copy.stats == plan.stats
    np.testing.assert_array_equal(copy.row_width, plan.row_width)
    samples = make_samples(rng, lengths, "lists")
    check_batch(varpack.build_batch(copy, samples), expected_batch(plan, samples, 0, plan.num_rows))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_plans_are_deterministic(rng, algorithm):
    lengths = random_lengths(rng, 500, 100)
    a = varpack.plan(lengths, 128, algorithm=algorithm, shuffle=True, seed=7)
    b = varpack.plan(lengths.tolist(), 128, algorithm=algorithm, shuffle=True, seed=7)
    assert a == b
    np.testing.assert_array_equal(a.pieces, b.pieces)
    unshuffled = varpack.plan(lengths, 128, algorithm=algorithm)
    # Shuffling permutes whole rows: the same multiset of rows.
    as_set = lambda p: sorted(tuple(map(tuple, p.row(r))) for r in range(p.num_rows))  # noqa: E731
    assert as_set(a) == as_set(unshuffled)
    if a.num_rows > 5:
        assert a != varpack.plan(lengths, 128, algorithm=algorithm, shuffle=True, seed=8)


def test_packers_come_close_to_the_lower_bound(rng):
    lengths = rng.integers(50, 801, size=5000)
    for algorithm in PACKERS:
        plan = varpack.plan(lengths, 4096, algorithm=algorithm)
        assert plan.stats["gap_to_lower_bound"] <= 0.01 * plan.stats["lower_bound_rows"] + 1, algorithm


@pytest.mark.parametrize("call, error, message", [
    (lambda: varpack.plan([3, 20, 4], 16), ValueError,
     r"sample 1 has length 20, longer than the capacity 16; choose the over-length policy 'truncate'"),
    (lambda: varpack.plan([3, -2], 16), ValueError, r"lengths\[1\] \(sample 1\) is -2; lengths must be integers >= 0"),
    (lambda: varpack.plan([3], 0), ValueError, r"capacity must be an integer in \[1, 2147483647\], got 0"),
    (lambda: varpack.plan([3], 3_000_000_000), ValueError, r"capacity must be .* got 3000000000"),
    (lambda: varpack.plan([3], 8, seed=-1, shuffle=True), ValueError, r"seed must be an integer in \[0, "),
    (lambda: varpack.plan([3], 8, batch_size=0, algorithm="dynamic"), ValueError, r"batch_size must be"),
    (lambda: varpack.plan((n for n in [3, 4]), 8), TypeError, r"got generator \(a generator or iterator\? pass list"),
    (lambda: varpack.plan(np.array([3, 2**63 + 5], dtype=np.uint64), 8), ValueError,
     r"lengths\[1\] \(sample 1\) is 9223372036854775813; lengths must be integers >= 0"),
    (lambda: varpack.plan(np.array([3, -7]), 8), ValueError, r"lengths\[1\] \(sample 1\) is -7"),
    (lambda: varpack.plan([3], 8, algorithm="best"), ValueError, r"ffd, bfd, histogram, none, dynamic"),
    (lambda: varpack.plan([3], 8, overlong="drop"), ValueError, r"error, truncate, split"),
    (lambda: varpack.plan([3.5, 2.0], 8), ValueError, r"lengths must be integers, got dtype float64"),
    (lambda: varpack.plan([[3, 2]], 8), ValueError, r"lengths must be 1-D, got shape \(1, 2\)"),
])
def test_plan_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- build_batch ----

def expected_batch(plan, samples, first, last, pad_to_multiple=1, pad_token_id=0, restart=True):
    """batch.h's contract, written out in plain Python."""
    ids, labels, positions, cu, seg_sample, seg_offset, row_offsets = [], [], [], [0], [], [], [0]

    def segment(tokens, token_labels, sample, offset, first_position):
        ids.extend(tokens)
        labels.extend([-100] + list(token_labels[1:]))
        positions.extend(range(first_position, first_position + len(tokens)))
        cu.append(len(ids))
        seg_sample.append(sample)
        seg_offset.append(offset)

    for r in range(first, last):
        row_start = len(ids)
        for sample, offset, length in plan.row(r).tolist():
            s = samples[sample]
            tokens = list(s["input_ids"]) if isinstance(s, dict) else list(s)
            own = s.get("labels") if isinstance(s, dict) else None
            token_labels = tokens if own is None else list(own)
            segment(tokens[offset:offset + length], token_labels[offset:offset + length], sample, offset,
                    0 if restart else offset)
        pad = -(len(ids) - row_start) % pad_to_multiple
        if pad:
            segment([pad_token_id] * pad, [-100] * pad, -1, 0, 0)
        row_offsets.append(len(ids))

    labelled = [lab != -100 for lab in labels]
    per_token = [1 / sum(labelled) if lab else 0.0 for lab in labelled]
    seg_labelled = [sum(labelled[cu[i]:cu[i + 1]]) for i in range(len(seg_sample))]
    n_labelled_segments = sum(n > 0 for n in seg_labelled)
    per_sample = [0.0] * len(ids)
    for i, n in enumerate(seg_labelled):
        for t in range(cu[i], cu[i + 1]):
            if labelled[t]:
                per_sample[t] = 1 / (n_labelled_segments * n)
    return dict(input_ids=ids, labels=labels, position_ids=positions, cu_seqlens=cu,
                max_seqlen=max(np.diff(cu), default=0), segment_sample=seg_sample, segment_offset=seg_offset,
                row_offsets=row_offsets, loss_weight_per_token=per_token, loss_weight_per_sample=per_sample,
                num_samples=sum(s >= 0 for s in seg_sample))


DTYPES = dict(input_ids=torch.int64, labels=torch.int64, position_ids=torch.int64, cu_seqlens=torch.int32,
              segment_sample=torch.int64, segment_offset=torch.int64, row_offsets=torch.int64,
              loss_weight_per_token=torch.float32, loss_weight_per_sample=torch.float32)


def check_batch(got, want):
    assert set(got) == set(DTYPES) | {"max_seqlen", "num_samples"}
    for key, dtype in DTYPES.items():
        assert isinstance(got[key], torch.Tensor) and got[key].dtype == dtype, key
        if dtype == torch.float32:
            torch.testing.assert_close(got[key], torch.tensor(want[key], dtype=dtype), msg=key)
        else:
            assert got[key].tolist() == want[key], key
    assert type(got["max_seqlen"]) is int and got["max_seqlen"] == want["max_seqlen"]
    assert type(got["num_samples"]) is int and got["num_samples"] == want["num_samples"]


def make_samples(rng, lengths, kind):
    samples = []
    for i, n in enumerate(lengths):
        tokens = rng.integers(1, 1000, size=n)
        if kind == "lists":
            samples.append(tokens.tolist())
        elif kind == "arrays":
            samples.append(tokens.astype([np.int32, np.int64][i % 2]))
        else:
            labels = tokens.copy()
            labels[: n // 3] = -100  # a prompt that is not trained on
            samples.append({"input_ids": tokens, "labels": labels} if i % 3 else {"input_ids": tokens.tolist()})
    return samples


@pytest.mark.parametrize("kind", ["lists", "arrays", "dicts"])
@pytest.mark.parametrize("options", [dict(), dict(pad_to_multiple=8, pad_token_id=3)])
def test_build_batch_matches_python_expectation(rng, kind, options):
    lengths = random_lengths(rng, 60, 50)
    samples = make_samples(rng, lengths, kind)
    plan = varpack.plan(lengths, 64)
    for rows, (first, last) in [(None, (0, plan.num_rows)), (slice(1, 4), (1, 4)), ((2, 3), (2, 3)),
                                (slice(-2, None), (plan.num_rows - 2, plan.num_rows))]:
        got = varpack.build_batch(plan, samples, rows=rows, **options)
        check_batch(got, expected_batch(plan, samples, first, last, **options))


@pytest.mark.parametrize("restart", [True, False])
def test_split_samples_positions(rng, restart):
    lengths = [70, 10, 150, 0, 30]
    samples = make_samples(rng, lengths, "dicts")
    plan = varpack.plan(lengths, 64, overlong="split")
    got = varpack.build_batch(plan, samples, restart_positions_per_piece=restart)
    check_batch(got, expected_batch(plan, samples, 0, plan.num_rows, restart=restart))
    assert sorted(set(got["segment_offset"].tolist())) == [0, 64, 128]


def test_build_batch_feeds_the_attention(rng):
    """cu_seqlens and max_seqlen go straight into flash_attn_varlen_func; samples stay apart."""
    lengths = random_lengths(rng, 20, 30)
    samples = make_samples(rng, lengths, "lists")
    plan = varpack.plan(lengths, 48)
    batch = varpack.build_batch(plan, samples, pad_to_multiple=16)
    embedding = torch.randn(1000, 2, 8)
    x = embedding[batch["input_ids"]]
    out = varpack.flash_attn_varlen_func(x, x, x, batch["cu_seqlens"], batch["cu_seqlens"], batch["max_seqlen"],
                                         batch["max_seqlen"], causal=True)
    for seg, sample in enumerate(batch["segment_sample"].tolist()):
        if sample < 0:
            continue
        a, b = batch["cu_seqlens"][seg:seg + 2].tolist()
        xs = embedding[torch.tensor(samples[sample])].transpose(0, 1)[None]
        alone = torch.nn.functional.scaled_dot_product_attention(xs, xs, xs, is_causal=True)[0].transpose(0, 1)
        torch.testing.assert_close(out[a:b], alone, atol=2e-5, rtol=1e-4)


class RecordingSamples:
    """A sequence that records which samples are read."""

    def __init__(self, samples):
        self.samples, self.read = samples, set()

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        self.read.add(i)
        return self.samples[i]


def test_only_the_rows_samples_are_read(rng):
    lengths = random_lengths(rng, 200, 40)
    samples = RecordingSamples(make_samples(rng, lengths, "arrays"))
    plan = varpack.plan(lengths, 64)
    varpack.build_batch(plan, samples, rows=(3, 5))
    assert samples.read == set(plan.pieces[plan.row_begin[3]:plan.row_begin[5], 0].tolist())


@pytest.mark.parametrize("samples, rows, error, message", [
    ([[1, 2, 3], [4, 5]], None, ValueError, r"sample 1 has 2 tokens but the plan takes tokens \[0, 3\)"),
    ([[1, 2, 3]], None, ValueError, r"the plan refers to sample 1 but the token source has 1 samples"),
    # Longer than planned: was silently cut to its planned prefix.
    ([[1, 2, 3], [4, 5, 6, 7]], None, ValueError, r"sample 1 has 4 tokens but was planned with 3"),
    ([{"input_ids": [1, 2, 3], "labels": [1, 2]}, [1, 2, 3]], None, ValueError,
     r"sample 0 has 3 input_ids but 2 labels"),
    ([{"tokens": [1, 2, 3]}, [1, 2, 3]], None, ValueError, r"sample 0 is a mapping without \"input_ids\""),
    ([np.ones((3, 1), dtype=np.int32), [1, 2, 3]], None, ValueError, r"sample 0: input_ids must be 1-D, got 2"),
    ([[1, 2, 3], [1.0, 2.5, 3.0]], None, ValueError, r"sample 1: input_ids must hold integer token ids, got dtype float64"),
    ([[1, 2, 3], {"input_ids": [1, 2, 3], "labels": ["a", "b", "c"]}], None, ValueError,
     r"sample 1: labels must hold integer token ids, got dtype <U1"),
    ([[1, 2, 3], [1, 2, 3]], (1, 3), ValueError, r"row range \[1, 3\) is not within the plan's 2 rows"),
    ([[1, 2, 3], [1, 2, 3]], slice(0, 2, 2), ValueError, r"rows must be a contiguous slice, got step 2"),
    # Values int32 cannot hold were wrapped by the conversion: 2^31 became -2^31, 2^32 + 7 became 7.
    ([[1, 2**31, 3], [1, 2, 3]], None, ValueError, r"sample 0: input_ids\[1\] is 2147483648; input_ids must be"),
    ([[1, 2, 3], [2**32 + 7, 2, 3]], None, ValueError, r"sample 1: input_ids\[0\] is 4294967303"),
    ([[1, 2, -1], [1, 2, 3]], None, ValueError, r"sample 0: input_ids\[2\] is -1; .* \[0, 2147483647\]$"),
    ([[1, 2, 3], {"input_ids": [1, 2, 3], "labels": [1, -1, 3]}], None, ValueError,
     r"sample 1: labels\[1\] is -1; labels must be integers in \[0, 2147483647\] or -100"),
    ([[1, 2, 3], {"input_ids": [1, 2, 3], "labels": [1, 2**33, 3]}], None, ValueError, r"labels\[1\] is 8589934592"),
    ([np.array([1, 2**63, 3], dtype=np.uint64), [1, 2, 3]], None, ValueError,
     r"sample 0: input_ids\[1\] is 9223372036854775808"),
    ([[1, 2**70, 3], [1, 2, 3]], None, ValueError, r"sample 0: input_ids must hold integer token ids, got dtype object"),
])
def test_build_batch_errors(samples, rows, error, message):
    plan = varpack.plan([3, 3], 4)
    with pytest.raises(error, match=message):
        varpack.build_batch(plan, samples, rows=rows)


def test_build_batch_rejects_other_plans():
    with pytest.raises(TypeError, match="plan must be a varpack.Plan"):
        varpack.build_batch({"pieces": []}, [[1]])
    with pytest.raises(TypeError, match="samples must be a sequence indexable by sample"):
        varpack.build_batch(varpack.plan([1], 4), iter([[1]]))
    with pytest.raises(ValueError, match=r"pad_to_multiple must be an integer in \[1, "):
        varpack.build_batch(varpack.plan([1], 4), [[1]], pad_to_multiple=0)
    with pytest.raises(ValueError, match=r"pad_token_id must be an integer in \[0, 2147483647\], got 2147483648"):
        varpack.build_batch(varpack.plan([1], 4), [[1]], pad_token_id=2**31)


def test_labels_may_be_ignored_and_ids_reach_the_int32_limit():
    plan = varpack.plan([2], 4)
    batch = varpack.build_batch(plan, [{"input_ids": [0, 2**31 - 1], "labels": [-100, 2**31 - 1]}])
    assert batch["input_ids"].tolist() == [0, 2**31 - 1]
    assert batch["labels"].tolist() == [-100, 2**31 - 1]
    batch = varpack.build_batch(plan, [np.array([5, 2**31 - 1], dtype=np.uint64)])
    assert batch["input_ids"].tolist() == [5, 2**31 - 1]


def test_collators_refuse_unknown_names_at_construction():
    with pytest.raises(ValueError, match=r"PackingCollator: algorithm must be one of ffd, bfd"):
        varpack.PackingCollator(algorithm="nope")
    with pytest.raises(ValueError, match=r"PackedStream: overlong must be one of error, truncate, split"):
        varpack.PackedStream([[1]], capacity=8, overlong="drop")


def test_collator_refuses_text():
    with pytest.raises(ValueError, match=r"sample 0: got text \(str 'hello world'\), not token ids; tokenize"):
        varpack.PackingCollator(capacity=4)(["hello world"])


def test_overlong_error_names_the_python_option():
    with pytest.raises(ValueError, match=r"overlong='split' in Python"):
        varpack.plan([3, 20], 16)
