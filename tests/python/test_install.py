"""The installed extension is self-contained: it needs torch and the C++ runtime, not libsimdjson
(which a pip user, or the GPU image, may lack). The JSONL reader that uses it stays in the command."""
import varpack
import varpack._C


def test_extension_does_not_link_simdjson():
    with open(varpack._C.__file__, "rb") as f:
        binary = f.read()
    # Neither a NEEDED entry (libsimdjson.so.N) nor an undefined simdjson symbol.
    assert b"libsimdjson" not in binary
    assert b"simdjson" not in binary


def test_token_files_still_read_through_the_extension(tmp_path):
    import numpy as np

    np.save(tmp_path / "t.npy", np.arange(6, dtype=np.int32))
    np.save(tmp_path / "t.offsets.npy", np.array([0, 2, 6], dtype=np.int64))
    tokens = varpack.read_tokens(str(tmp_path / "t.npy"))
    assert list(tokens.lengths) == [2, 4]
