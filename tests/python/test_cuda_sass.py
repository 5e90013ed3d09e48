"""scripts/cuda_sass.py (the CUDA library's SASS against its digest) and scripts/bench_compare.py
(the standalone benchmark of two builds side by side) on small hand-written inputs: a renamed
kernel with the same code compares equal, a changed instruction does not, and the benchmark's
rounds become medians and ratios."""
import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SASS = """
Fatbin elf code:
================
arch = sm_90a

\tcode for sm_90a
\t\tFunction : {name}
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;            /* 0x00000a00ff017b82 */
        /*0010*/                   {op} ;                            /* 0x000fe20000000a00 */
        /*0020*/                   CALL.REL.NOINC `({callee}) ;     /* 0x000fea0003c00000 */
"""


def sass(name, op="EXIT", callee="_ZN7varpack4cuda6helperEv"):
    return SASS.format(name=name, op=op, callee=callee)


def test_a_renamed_kernel_with_the_same_code_compares_equal():
    cuda_sass = load("cuda_sass")
    old = cuda_sass.parse_sass(sass("_ZN7varpack4cuda6kernelINS0_19HopperForwardConfigILi128EEEEvv",
                                    callee="_ZN7varpack4cuda3oldEv"))
    new = cuda_sass.parse_sass(sass("_ZN7varpack4cuda6kernelINS0_11ForwardD128EEEvv",
                                    callee="_ZN7varpack4cuda3newEv"))
    assert [f[0] for f in old] == ["sm_90a"] and old[0][2] == new[0][2]
    line = lambda f: f"forward.cu.o {f[0]} {f[2]} {f[1]}"
    assert cuda_sass.differences([line(old[0])], [line(new[0])]) == []


def test_a_changed_instruction_is_named():
    cuda_sass = load("cuda_sass")
    base = cuda_sass.parse_sass(sass("_Z1kv"))[0]
    changed = cuda_sass.parse_sass(sass("_Z1kv", op="BRA 0x10"))[0]
    assert base[2] != changed[2]
    diff = cuda_sass.differences([f"a.o sm_90a {base[2]} _Z1kv"], [f"a.o sm_90a {changed[2]} _Z1kv"])
    assert len(diff) == 2 and "was" in diff[0] and "now" in diff[1]
    # A kernel gone from one object is named too.
    assert cuda_sass.differences([f"a.o sm_90a {base[2]} _Z1kv"], []) != []


def test_the_help_exits_zero():
    out = subprocess.run([sys.executable, str(SCRIPTS / "cuda_sass.py"), "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "Usage" in out.stdout


BENCH_LOG = """\
==== bench_baseline_1: build-baseline/bench_attention_cuda 20
case                   tokens    fwd ms  fwd TF/s  bwd det ms    det TF/s bwd atom ms   atom TF/s det/atom
64 x 1k                 65536     0.300     400.0       1.000       300.0       0.900       333.3     1.11
16 x 4096 3% pad        65536     0.900     500.0       3.000       375.0       2.800       401.8     1.07
==== bench_this_1: build-gpu/bench/bench_attention_cuda 20
case                   tokens    fwd ms  fwd TF/s  bwd det ms    det TF/s bwd atom ms   atom TF/s det/atom
64 x 1k                 65536     0.300     404.0       1.000       300.0       0.900       330.0     1.11
16 x 4096 3% pad        65536     0.900     500.0       3.000       375.0       2.800       401.8     1.07
==== bench_baseline_2: build-baseline/bench_attention_cuda 20
64 x 1k                 65536     0.300     396.0       1.000       300.0       0.900       333.3     1.11
"""


def test_bench_compare_takes_medians_and_ratios(tmp_path):
    log = tmp_path / "bench.log"
    log.write_text(BENCH_LOG)
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_compare.py"), str(log)],
                         capture_output=True, text=True, check=True).stdout
    rows = {line[:22].strip(): line[22:].split() for line in out.splitlines()[1:]}
    assert set(rows) == {"64 x 1k", "16 x 4096 3% pad"}
    fwd_base, fwd_this, fwd_ratio = rows["64 x 1k"][:3]
    assert (fwd_base, fwd_this, fwd_ratio) == ("398.0", "404.0", "1.015")
    assert rows["64 x 1k"][8] == "0.990"  # atomic: 330.0 / 333.3
    assert rows["16 x 4096 3% pad"][2] == "1.000"
