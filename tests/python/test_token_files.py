"""varpack.read_tokens against numpy's own writer: .npy token files written with numpy.save (every
accepted dtype, version 2.0 headers, empty and single samples), Megatron .bin/.idx written byte by
byte per Megatron-LM's index layout; every malformed file raises ValueError naming it; a TokenFile
plans and builds the same batch as the list of the same samples.
"""

import struct

import numpy as np
import pytest
import torch

import varpack


def random_samples(rng, n=300, max_length=60, vocab=60000):
    return [rng.integers(0, vocab, size=int(rng.integers(0, max_length + 1)) * int(rng.random() > 0.2))
            for _ in range(n)]


def save_npy(tmp_path, samples, dtype, name="data"):
    flat = np.concatenate([np.asarray(s, dtype=dtype) for s in samples]) if samples else np.zeros(0, dtype)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in samples], dtype=np.int64)]).astype(np.int64)
    np.save(tmp_path / f"{name}.npy", flat.astype(dtype))
    np.save(tmp_path / f"{name}.offsets.npy", offsets)
    return tmp_path / f"{name}.npy"


def write_megatron(prefix, samples, dtype, code, version=1):
    flat = np.concatenate([np.asarray(s, dtype=dtype) for s in samples]) if samples else np.zeros(0, dtype)
    lengths = np.array([len(s) for s in samples], dtype=np.int32)
    pointers = (np.concatenate([[0], np.cumsum(lengths)[:-1]]) * np.dtype(dtype).itemsize).astype(np.int64)
    documents = np.arange(len(samples) + 1, dtype=np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", version) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(samples)) + struct.pack("<Q", len(documents)))
        f.write(lengths.tobytes() + pointers[:len(samples)].tobytes() + documents.tobytes())
    flat.tofile(f"{prefix}.bin")


def check_samples(tokens, samples):
    assert len(tokens) == len(samples)
    np.testing.assert_array_equal(tokens.lengths, [len(s) for s in samples])
    assert tokens.num_tokens == sum(len(s) for s in samples)
    for i, s in enumerate(samples):
        assert tokens[i].dtype == np.int32
        np.testing.assert_array_equal(tokens[i], s)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.uint32])
def test_npy_round_trip(tmp_path, rng, dtype):
    samples = random_samples(rng)
    path = save_npy(tmp_path, samples, dtype)
    tokens = varpack.read_tokens(path)
    check_samples(tokens, samples)
    assert tokens.zero_copy == (dtype == np.int32)
    check_samples(varpack.read_tokens(str(path), offsets=tmp_path / "data.offsets.npy"), samples)
    assert not tokens[0].flags.writeable
    assert tokens[-1].shape == (len(samples[-1]),)
    with pytest.raises(IndexError):
        tokens[len(samples)]


@pytest.mark.parametrize("samples", [[], [[]], [[5, 6, 7]], [[], [2**31 - 1], []]])
def test_npy_edge_cases(tmp_path, samples):
    check_samples(varpack.read_tokens(save_npy(tmp_path, samples, np.int64)), samples)


def test_npy_version_2_header(tmp_path):
    flat = np.arange(10, dtype=np.int32)
    with open(tmp_path / "v2.npy", "wb") as f:
        np.lib.format.write_array(f, flat, version=(2, 0))
    np.save(tmp_path / "v2.offsets.npy", np.array([0, 4, 10], dtype=np.int64))
    check_samples(varpack.read_tokens(tmp_path / "v2.npy"), [flat[:4], flat[4:]])


@pytest.mark.parametrize("array, message", [
    (np.arange(4, dtype=">i4"), "big-endian"),
    (np.asfortranarray(np.arange(4, dtype=np.int32).reshape(2, 2)), "Fortran order"),
    (np.arange(4, dtype=np.int32).reshape(2, 2), "1-D array, got 2-D"),
    (np.arange(4, dtype=np.float32), "floating point"),
    (np.arange(4, dtype=np.int16), "dtype '<i2'"),
])
def test_npy_rejects_bad_tokens(tmp_path, array, message):
    np.save(tmp_path / "t.npy", array)
    np.save(tmp_path / "t.offsets.npy", np.array([0, 4], dtype=np.int64))
    with pytest.raises(ValueError, match=message) as e:
        varpack.read_tokens(tmp_path / "t.npy")
    assert str(tmp_path / "t.npy") in str(e.value)


def test_npy_rejects_truncated_data_and_bad_offsets(tmp_path):
    np.save(tmp_path / "t.npy", np.arange(8, dtype=np.int32))
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-5])
    np.save(tmp_path / "o.npy", np.array([0, 8], dtype=np.int64))
    with pytest.raises(ValueError, match="truncated data"):
        varpack.read_tokens(tmp_path / "t.npy", tmp_path / "o.npy")
    (tmp_path / "t.npy").write_bytes(data)
    for offsets, message in [([0, 5, 3, 8], "not monotone"), ([0, 9], "past the end"), ([0, 7], "last offset is 7"),
                             ([2, 8], r"offsets\[0\] is 2")]:
        np.save(tmp_path / "o.npy", np.array(offsets, dtype=np.int64))
        with pytest.raises(ValueError, match=message) as e:
            varpack.read_tokens(tmp_path / "t.npy", tmp_path / "o.npy")
        assert str(tmp_path / "o.npy") in str(e.value)
    np.save(tmp_path / "o.npy", np.array([0, 8], dtype=np.int32))
    with pytest.raises(ValueError, match="offsets have dtype '<i4'"):
        varpack.read_tokens(tmp_path / "t.npy", tmp_path / "o.npy")
    np.save(tmp_path / "t.npy", np.array([1, 2, 3, 2**40, 0, 0, 0, 0], dtype=np.int64))
    np.save(tmp_path / "o.npy", np.array([0, 2, 8], dtype=np.int64))
    with pytest.raises(ValueError, match="sample 1, token 1: value 1099511627776"):
        varpack.read_tokens(tmp_path / "t.npy", tmp_path / "o.npy")


@pytest.mark.parametrize("dtype, code", [(np.uint16, 8), (np.int32, 4), (np.int64, 5), (np.uint8, 1)])
def test_megatron_round_trip(tmp_path, rng, dtype, code):
    samples = random_samples(rng, vocab=200 if dtype == np.uint8 else 60000)
    write_megatron(tmp_path / "corpus", samples, dtype, code)
    check_samples(varpack.read_tokens(f"megatron:{tmp_path / 'corpus'}"), samples)
    check_samples(varpack.read_tokens(tmp_path / "corpus.bin"), samples)


def test_megatron_rejects_bad_indexes(tmp_path):
    write_megatron(tmp_path / "f", [[1.0, 2.0]], np.float32, 7)
    with pytest.raises(ValueError, match=r"f\.idx: dtype code 7 \(float32\) is floating point"):
        varpack.read_tokens(tmp_path / "f.bin")
    write_megatron(tmp_path / "v", [[1, 2]], np.int32, 4, version=2)
    with pytest.raises(ValueError, match="index version 2"):
        varpack.read_tokens(tmp_path / "v.bin")
    write_megatron(tmp_path / "t", [[1, 2], [3]], np.int32, 4)
    (tmp_path / "t.bin").write_bytes((tmp_path / "t.bin").read_bytes()[:-4])
    with pytest.raises(ValueError, match="sequence 1 .* lies outside"):
        varpack.read_tokens(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="cannot open"):
        varpack.read_tokens(tmp_path / "absent.bin")


def test_token_file_plans_and_builds_like_a_list(tmp_path, rng):
    samples = random_samples(rng, n=500, max_length=300)
    tokens = varpack.read_tokens(save_npy(tmp_path, samples, np.uint16))
    plan = varpack.plan(tokens.lengths, capacity=512)
    assert plan == varpack.plan([len(s) for s in samples], capacity=512)
    from_file = varpack.build_batch(plan, tokens, pad_to_multiple=8)
    from_list = varpack.build_batch(plan, samples, pad_to_multiple=8)
    assert from_file.keys() == from_list.keys()
    for key, value in from_file.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, from_list[key]), key
        else:
            assert value == from_list[key], key


def test_token_lengths_reads_the_offsets_or_index_alone(tmp_path, rng):
    samples = random_samples(rng, vocab=65536)
    expected = np.array([len(s) for s in samples], dtype=np.int64)
    data = save_npy(tmp_path, samples, np.uint16)
    write_megatron(tmp_path / "m", samples, np.uint16, 8)
    for path in (data, f"megatron:{tmp_path / 'm'}", tmp_path / "m.bin"):
        np.testing.assert_array_equal(varpack.token_lengths(path), expected)
        np.testing.assert_array_equal(varpack.token_lengths(path), varpack.read_tokens(path).lengths)
    # No token is read: an id outside [0, 2^31) passes here and fails read_tokens.
    bad = save_npy(tmp_path, [[1], [2, 2**31]], np.int64, name="bad")
    np.testing.assert_array_equal(varpack.token_lengths(bad), [1, 2])
    with pytest.raises(ValueError, match="2147483648"):
        varpack.read_tokens(bad)
    # The layout is still checked.
    np.save(tmp_path / "bad.offsets.npy", np.array([0, 1, 4], dtype=np.int64))
    with pytest.raises(ValueError, match="past the end"):
        varpack.token_lengths(bad)
