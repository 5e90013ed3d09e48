"""scripts/tune_summary.py on a small hand-written bench.log: tile_shapes' rows of two rounds and
two head dims, a name longer than the name column, a hang line, a wrong result."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tune_summary.py"

LOG = """\
==== tile_shapes_1: build/tile_shapes 10 128 64
variant                              point          ms   TFLOP/s    max|diff|
wgmma bwd (lib)                      64x1k       2.574     200.0    3.906e-03
wgmma bwd softcap (lib)              64x1k       2.900     100.0    0.000e+00
wgmma bwd dQ by red, own keys, pp, zeros ahead 64x1k       2.500     210.0    3.906e-03
wgmma bwd softcap, P before dP       64x1k       2.800     120.0    5.000e-02
wgmma bwd (lib)                      16x4k       7.172     400.0    1.953e-03
wgmma bwd dQ by red, own keys, pp, zeros ahead 16x4k       7.000     390.0    1.953e-03
wgmma bwd d64 (lib, atomic q128)     64x1k       2.000     300.0    0.000e+00
wgmma bwd d64 dQ by red              64x1k       1.900     330.0    1.000e-03
wgmma bwd d64 (lib, atomic q128)     smallgqa    0.010       5.0    0.000e+00
wgmma bwd d64 dQ by red              smallgqa    0.010       4.0    1.000e-03
==== tile_shapes_2: build/tile_shapes 10 128 64
wgmma bwd (lib)                      64x1k       2.574     250.0    3.906e-03
wgmma bwd dQ by red, own keys, pp, zeros ahead 64x1k       2.500     200.0    3.906e-03
HANG: wgmma bwd softcap, P before dP at 16x4k (not finished after 20 s)
"""


def summary(tmp_path, *args):
    log = tmp_path / "bench.log"
    log.write_text(LOG)
    done = subprocess.run([sys.executable, str(SCRIPT), str(log), *args], capture_output=True,
                          text=True, check=True)
    return {line.split(" | ")[0]: line.split(" | ")[1:] for line in done.stdout.splitlines()
            if " | " in line and not line.startswith("variant")}


def test_ratios_to_the_first_of_each_kind_round_by_round(tmp_path):
    rows = summary(tmp_path)
    assert rows["wgmma bwd (lib)"] == ["200.0 1.000 / 250.0 1.000", "400.0 1.000"]
    assert rows["wgmma bwd dQ by red, own keys, pp, zeros ahead"] == [
        "210.0 1.050 / 200.0 0.800", "390.0 0.975"]
    # Softcap's variants against the softcap library, marked where the result is wrong.
    assert rows["wgmma bwd softcap, P before dP"] == ["120.0 1.200!", "-"]
    # The second head dim against its own first variant.
    assert rows["wgmma bwd d64 dQ by red"] == ["330.0 1.100", "4.0 0.800"]


def test_the_diff_bound_is_an_option(tmp_path):
    rows = summary(tmp_path, "--diff", "0.1")
    assert rows["wgmma bwd softcap, P before dP"] == ["120.0 1.200", "-"]


def test_an_unreadable_log_is_named(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.log")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "missing.log" in done.stderr
