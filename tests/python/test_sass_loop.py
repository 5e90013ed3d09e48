"""scripts/sass_loop.py on a small hand-written disassembly (nvdisasm -g -c's layout): it finds the
loop that holds the wgmma instructions, counts its instructions and lists its local-memory ones."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sass_loop.py"

SASS = """
//--------------------- .text._Z6kernelv --------------------------
        .section .text._Z6kernelv,"ax",@progbits
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
	//## File "/src/k.cuh", line 10
        /*0010*/                   LDL R2, [R1+0x4] ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
	//## File "/src/k.cuh", line 12
        /*0040*/                   STL [R1+0x8], R3 ;
        /*0050*/               @P0 BRA `(.L_x_1) ;
        /*0060*/                   EXIT ;
//--------------------- .text._Z5otherv --------------------------
        /*0000*/                   EXIT ;
"""


def run(tmp_path, kernel):
    sass = tmp_path / "k.sass"
    sass.write_text(SASS)
    return subprocess.run([sys.executable, str(SCRIPT), str(sass), kernel], capture_output=True,
                          text=True)


def test_loop_mix_and_local_memory(tmp_path):
    result = run(tmp_path, "kernel")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "_Z6kernelv"
    assert lines[1].strip() == "loop 0x10-0x50: 5 instructions"
    assert "HGMMA 2" in lines[2] and "LDL 1" in lines[2] and "BRA 1" in lines[2]
    assert "MOV" not in lines[2] and "EXIT" not in lines[2]  # outside the loop
    assert "k.cuh:10" in lines[3] and "LDL" in lines[3]
    assert "k.cuh:12" in lines[4] and "STL" in lines[4]


# A wait's retry placed out of line past the exit, with a branch back into the body: its range
# holds more HGMMA instructions than the loop, and an EXIT.
SASS_RETRY = """
//--------------------- .text._Z6kernelv --------------------------
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_2:
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
.L_x_1:
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0040*/               @P0 BRA `(.L_x_1) ;
        /*0050*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0060*/                   EXIT ;
        /*0070*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R0 ;
        /*0080*/                   BRA `(.L_x_2) ;
"""


def test_out_of_line_retry_is_not_the_loop(tmp_path):
    sass = tmp_path / "k.sass"
    sass.write_text(SASS_RETRY)
    result = subprocess.run([sys.executable, str(SCRIPT), str(sass), "kernel"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].strip() == "loop 0x20-0x40: 3 instructions"


def test_unknown_kernel_is_an_error(tmp_path):
    result = run(tmp_path, "missing")
    assert result.returncode != 0
    assert "no function whose name holds 'missing'" in result.stderr


def test_missing_disassembly_is_an_error(tmp_path):
    missing = tmp_path / "none.sass"
    result = subprocess.run([sys.executable, str(SCRIPT), str(missing), "kernel"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert f"{missing}: cannot read it" in result.stderr
