"""Property test of the command line's promise: no input ever changes and no partial file remains.

Drives `varpack` (build/varpack, or $VARPACK_CLI) with random combinations of commands, flags and
paths drawn from a pool that holds collisions on purpose (the input itself, a hard link and a
symbolic link to it, a token file's companion file, the other output) and special files (a FIFO
with a reader, /dev/null, standard input and output, a dangling symbolic link, a directory, a
missing directory). After every run: the exit status is 0, 1 or 2 with one "varpack: error:" line
on failure; every input, link and special file is as before; no temporary file is left; a failed
run changed no output; a successful one left whole outputs. Fixed seed, a bounded number of cases
(VARPACK_CLI_PROPERTY_CASES, default 120): a few seconds.
"""

import json
import os
import pathlib
import random
import stat
import subprocess
import threading

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(os.environ.get("VARPACK_CLI", ROOT / "build" / "varpack"))
CASES = int(os.environ.get("VARPACK_CLI_PROPERTY_CASES", "120"))
SEED = int(os.environ.get("VARPACK_CLI_PROPERTY_SEED", "60"))

GOOD = "".join(json.dumps({"input_ids": list(range(1, 2 + i % 7))}) + "\n" for i in range(40))
BAD = GOOD + '{"input_ids": [1, -2]}\n'
INPUTS = ["good.jsonl", "bad.jsonl", "hard.jsonl", "soft.jsonl", "tok.npy", "-", "profile:sft",
          "packed.bin", "missing.jsonl"]
OUTPUTS = ["new.jsonl", "new.bin", "old.out", "good.jsonl", "hard.jsonl", "soft.jsonl",
           "tok.offsets.npy", "tok.npy", "dangling.out", "fifo", "/dev/null", "-", "adir",
           "nodir/x.jsonl", "packed.bin"]
# Files that must never change, and what the special entries must stay.
KEPT = ["good.jsonl", "bad.jsonl", "tok.npy", "tok.offsets.npy", "packed.bin"]


def make_workspace(d: pathlib.Path) -> None:
    (d / "good.jsonl").write_text(GOOD)
    (d / "bad.jsonl").write_text(BAD)
    os.link(d / "good.jsonl", d / "hard.jsonl")
    os.symlink("good.jsonl", d / "soft.jsonl")
    os.symlink("sub/target.out", d / "dangling.out")
    (d / "sub").mkdir()
    (d / "adir").mkdir()
    (d / "old.out").write_text("previous content\n")
    np.save(d / "tok.npy", np.arange(1, 61, dtype=np.int32))
    np.save(d / "tok.offsets.npy", np.array([0, 10, 25, 25, 60], dtype=np.int64))
    subprocess.run([CLI, "pack", "good.jsonl", "-L", "16", "-o", "packed.bin"], cwd=d, check=True,
                   capture_output=True)
    os.mkfifo(d / "fifo")


def state(d: pathlib.Path) -> dict:
    """Everything the property compares: contents, link targets, file types (recursively)."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = os.lstat(p)
        rel = str(p.relative_to(d))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", p.read_bytes())
        else:
            out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


def random_args(rng: random.Random) -> list[str]:
    command = rng.choice(["pack"] * 6 + ["stats", "inspect"])
    if command == "inspect":
        return ["inspect", rng.choice(["packed.bin", "good.jsonl", "-"])] + (["--check"] if rng.random() < 0.5 else [])
    args = [command, rng.choice(INPUTS), "-L", str(rng.choice([0, 1, 4, 16, 4096, 3000000000, "abc"]))]
    if command == "pack":
        args += ["-o", rng.choice(OUTPUTS)]
        if rng.random() < 0.4:
            args += ["--report", rng.choice(OUTPUTS + ["r.json"])]
    for flag, values in (("--algorithm", ["bfd", "ffd", "none", "dynamic", "nope"]),
                         ("--overlong", ["error", "split", "truncate", "drop"]),
                         ("--format", ["jsonl", "bin", "parquet"])):
        if rng.random() < 0.3 and (command == "pack" or flag != "--format"):
            args += [flag, rng.choice(values)]
    if command == "pack":
        args += [f for f in ("--check", "--shuffle") if rng.random() < 0.3]
    if rng.random() < 0.2:
        args.append("--json" if command == "stats" else "--quiet")
    return args


class FifoReader:
    """Drains the FIFO on a thread; finish() releases a reader no writer ever opened."""

    def __init__(self, path: pathlib.Path):
        self.path, self.data = path, b""
        self.thread = threading.Thread(target=self._read)
        self.thread.start()

    def _read(self):
        with open(self.path, "rb") as f:
            self.data = f.read()

    def finish(self) -> bytes:
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # the reader already has its writer (or is done)
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the FIFO reader hangs"
        return self.data


def output_paths(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "--report")]


def check_whole(path: pathlib.Path, fmt_bin: bool) -> None:
    data = path.read_bytes()
    if fmt_bin:
        assert data.startswith(b"VARPACKB"), path
    else:
        for line in data.decode().splitlines():
            json.loads(line)


@pytest.mark.skipif(not CLI.exists(), reason=f"{CLI} not built (run scripts/setup.sh)")
def test_random_command_lines_never_destroy_or_leave_partial_files(tmp_path):
    rng = random.Random(SEED)
    statuses = {0: 0, 1: 0, 2: 0}
    for case in range(CASES):
        d = tmp_path / f"case{case}"
        d.mkdir()
        make_workspace(d)
        args = random_args(rng)
        stdin_name = rng.choice(["good.jsonl", "bad.jsonl"])
        before = state(d)
        reader = FifoReader(d / "fifo")
        with open(d / stdin_name, "rb") as stdin:
            r = subprocess.run([CLI, *args], cwd=d, stdin=stdin, capture_output=True, timeout=60)
        got = reader.finish()
        where = f"case {case}: varpack {' '.join(args)} < {stdin_name}\n{r.stderr.decode(errors='replace')}"
        assert r.returncode in statuses, where
        statuses[r.returncode] += 1
        after = state(d)
        assert not [p for p in after if ".tmp." in p], where
        for name in KEPT:
            assert after[name] == before[name], f"{name} changed; {where}"
        for name in ("soft.jsonl", "dangling.out", "hard.jsonl", "fifo", "adir"):
            assert after[name][0] == before[name][0], f"{name} changed kind; {where}"
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
        outputs = output_paths(args)
        if r.returncode != 0:
            err = r.stderr.decode(errors="replace")
            assert err.startswith("varpack: error: ") and err.count("\n") == 1, where
            assert after == before, f"a failed run changed files; {where}"
            assert got == b"", where
            continue
        fmt_bin = "--format" in args and args[args.index("--format") + 1] == "bin"
        for out in outputs:
            if out in ("-", "/dev/null", "fifo"):
                continue
            target = d / ("sub/target.out" if out == "dangling.out" else out)
            is_report = args[args.index(out) - 1] == "--report" if out in args else False
            if is_report:
                json.loads(target.read_text())
            else:
                check_whole(target, fmt_bin or (not "--format" in args and out.endswith(".bin")))
    # The pool makes every outcome common; a run where one never happens tests less than it says.
    assert min(statuses.values()) > CASES // 20, statuses
