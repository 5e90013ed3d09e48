"""Every file the reference documents cite exists in the repository.

The project cites only files it contains. Checked: markdown link targets (relative to the
document), repository paths (src/..., tests/..., ...; a glob must match something) and bare
file names (hopper_forward.cuh), the last anywhere in the tree. A path or name that a paragraph
cites as of a commit it names (a command recorded as it was run) may instead exist at that commit.
bench/results/history/ is left out: it is the verbatim record of its time, and names files as
they were then.
"""
import functools
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "examples/README.md", "bench/results/cuda.md",
             *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
TOP_DIRS = "src|include|python|tests|bench|scripts|docs|examples"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(rf"(?<![\w./-])(?:{TOP_DIRS})/[\w./*-]*")
BARE_NAME = re.compile(r"(?<![\w./}-])[\w-]+\.(?:cuh|cu|cpp|h|py|sh|md|txt)(?![\w/-])")
# A path segment in capitals (TARGET, PREFIX) stands for a name the reader picks.
PLACEHOLDER = re.compile(r"(?:^|/)[A-Z][A-Z_]+(?:/|$)")
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules"}


@functools.lru_cache(maxsize=1)
def tree_names():
    """The names of the repository's files and folders (not of builds, caches or the venv)."""
    names = set()
    for _, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders
                         if d not in SKIPPED_DIRS and not d.startswith(("build", "."))]
        names.update(subfolders)
        names.update(files)
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def names_at(commit):
    """The file names of the tree at `commit` (empty if the clone lacks it)."""
    done = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit],
                          capture_output=True, text=True)
    return frozenset(pathlib.PurePosixPath(p).name for p in done.stdout.split())


def exists_at(commit, path):
    done = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:{path}"],
                          capture_output=True)
    return done.returncode == 0


def paragraphs(text):
    """(first line number, lines) of each paragraph: lines up to a blank one."""
    block, first = [], 1
    for number, row in enumerate(text.split("\n"), start=1):
        if row.strip():
            if not block:
                first = number
            block.append(row)
        elif block:
            yield first, block
            block = []
    if block:
        yield first, block


def cited(text):
    """(line number, kind, citation, the paragraph's commits) for every citation in a text."""
    for first, rows in paragraphs(text):
        commits = set(COMMIT.findall("\n".join(rows)))
        for number, row in enumerate(rows, start=first):
            for target in LINK.findall(row):
                if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                    yield number, "link", target.split("#")[0], commits
            for path in REPO_PATH.findall(row):
                yield number, "path", path.rstrip(".,;:"), commits
            for name in BARE_NAME.findall(row):
                yield number, "name", name, commits


def missing(document, names):
    """The citations of `document` (a path) that name no file of the repository."""
    found_not = []
    for number, kind, citation, commits in cited(document.read_text()):
        if kind == "link":
            found = document.parent.joinpath(citation).resolve().exists()
        elif kind == "path" and PLACEHOLDER.search(citation):
            continue
        elif kind == "path" and "*" in citation:
            found = any(ROOT.glob(citation))
        elif kind == "path":
            found = (ROOT / citation).exists() or any(exists_at(c, citation.rstrip("/"))
                                                       for c in commits)
        else:
            found = citation in names or any(citation in names_at(c) for c in commits)
        if not found:
            found_not.append(f"{number}: {kind} {citation}")
    return found_not


@pytest.mark.parametrize("document", DOCUMENTS)
def test_cited_files_exist(document):
    gone = missing(ROOT / document, tree_names())
    assert not gone, f"{document} cites what the repository does not hold (fix the citation or " \
        "the file):\n" + "\n".join(f"{document}:{line}" for line in gone)


def test_a_missing_file_is_reported(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("See src/attn/cuda/hopper_forward.cuh and hopper_forward.cuh,\n"
                   "[the format](FORMAT.md), src/attn/cuda/no_such_kernel.cuh and no_such.cuh.\n\n"
                   "A placeholder: tests/fuzz/corpus/TARGET/.\n")
    gone = missing(doc, tree_names())
    assert gone == ["2: link FORMAT.md", "2: path src/attn/cuda/no_such_kernel.cuh",
                    "2: name no_such.cuh"]


def test_a_path_of_a_named_commit_counts(tmp_path):
    # bench/cuda/softcap_shift_model.py was removed after c0a7108.
    if not exists_at("c0a7108", "bench/cuda/softcap_shift_model.py"):
        pytest.skip("c0a7108 is not in this clone's history")
    doc = tmp_path / "doc.md"
    doc.write_text("As run at c0a7108: bench/cuda/softcap_shift_model.py.\n\n"
                   "Now: bench/cuda/softcap_shift_model.py.\n")
    assert missing(doc, tree_names()) == ["3: path bench/cuda/softcap_shift_model.py"]
