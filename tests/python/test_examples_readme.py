"""examples/README.md's CPU commands run as written: each command line of its code blocks that
runs an example script is run from the repository root with its own interpreter and environment,
its arguments replaced by --help (the runs themselves are test_train_example.py's). Before, the
README's `PYTHONPATH=python python ...` shadowed the installed package with the source tree, which
has no compiled extension ("cannot import name '_C'")."""

import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"^    (?P<prefix>.*?)(?P<script>examples/\w+\.py)\b")


def readme_commands():
    commands = []
    for line in (ROOT / "examples/README.md").read_text().splitlines():
        match = COMMAND.match(line)
        if match and not match["prefix"].startswith("bash"):
            commands.append((match["prefix"].strip(), match["script"]))
    return commands


def test_the_readme_lists_the_cpu_commands():
    scripts = {script for _, script in readme_commands()}
    assert {"examples/train_packed.py", "examples/saving_curve.py", "examples/train_vla.py",
            "examples/train_ddp.py"} <= scripts


@pytest.mark.parametrize("prefix,script", readme_commands())
def test_readme_command_runs_as_written(prefix, script):
    words = shlex.split(prefix)
    env_words = [w for w in words if re.match(r"^\w+=", w)]
    program = [w for w in words if w not in env_words]
    found = program and ((ROOT / program[0]).exists() if "/" in program[0] else shutil.which(program[0]))
    if not found:  # a GPU machine's command (its torchrun), or no .venv (run scripts/setup.sh)
        pytest.skip(f"{program[0] if program else '(none)'} is not installed here")
    program = program + [script]
    env_prefix = ["env", *env_words] if env_words else []
    r = subprocess.run([*env_prefix, *program, "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{prefix} {script} --help:\n{r.stderr[-2000:]}"
    assert "usage:" in r.stdout
