#!/usr/bin/env python3
"""The CUDA library's machine code against a checked-in digest (tests/cuda/sass_digest.txt).

A change that claims not to touch the kernels (code moved, comments, names) must leave every
kernel's SASS as it was: this reads `cuobjdump -sass` of the built libvarpack_cuda.a, hashes each
function's instructions with symbol names blanked (a renamed configuration type changes the mangled
name, not the code), and compares the hashes per (object, arch) with the digest. A change that
means to alter a kernel rewrites the digest (`write`) and the diff shows which instances changed.

Usage: scripts/cuda_sass.py check|write|show [LIBRARY]  (default build-cuda's libvarpack_cuda.a)
The digest is tied to the nvcc release that wrote it; with another release `check` says so and
passes (the code differs by compiler, not by change).
"""
import collections
import concurrent.futures
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIGEST = ROOT / "tests" / "cuda" / "sass_digest.txt"
SYMBOL = re.compile(r"_Z[A-Za-z0-9_$.]+")


def tool_env():
    """The environment with cuobjdump and nvdisasm on PATH: the system's, else the pip wheels'
    (requirements.txt) in this Python's site-packages."""
    env = dict(os.environ)
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return env
    wheels = pathlib.Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin"
    if not (wheels / "cuobjdump").is_file():
        raise SystemExit("cuda_sass: cuobjdump not found; pip install -r requirements.txt "
                         "(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) or put the CUDA "
                         "toolkit's bin on PATH")
    env["PATH"] = f"{wheels}{os.pathsep}{env.get('PATH', '')}"
    return env


def nvcc_release():
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def parse_sass(sass):
    """(arch, mangled name, hash of the body with names blanked) for each function of
    `cuobjdump -sass` output."""
    arch, name, body, found = None, None, [], []

    def close():
        if name is not None:
            text = SYMBOL.sub("_Z", "\n".join(body))
            found.append((arch, name, hashlib.sha256(text.encode()).hexdigest()[:16]))

    for line in sass.splitlines():
        stripped = line.strip()
        if stripped.startswith("code for "):
            close()
            arch, name, body = stripped.split()[-1], None, []
        elif stripped.startswith("Function : "):
            close()
            name, body = stripped.split(":", 1)[1].strip(), []
        elif name is not None and stripped.startswith("/*"):
            body.append(stripped)
    close()
    return found


def functions(obj, env=None):
    """parse_sass of one object file."""
    return parse_sass(subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True,
                                     text=True, check=True, env=env or tool_env()).stdout)


def library_digest(library):
    """Sorted digest lines `object arch hash name` of every kernel in the static library."""
    lines, env = [], tool_env()
    with tempfile.TemporaryDirectory() as tmp:
        members = subprocess.run(["ar", "t", str(library)], capture_output=True, text=True,
                                 check=True).stdout.split()
        subprocess.run(["ar", "x", str(pathlib.Path(library).resolve())], cwd=tmp, check=True)
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            found = pool.map(lambda m: functions(pathlib.Path(tmp) / m, env), members)
            for member, member_functions in zip(members, found):
                for arch, name, digest in member_functions:
                    lines.append(f"{member} {arch} {digest} {name}")
    return sorted(lines)


def keyed(lines):
    """(object, arch) -> multiset of hashes, and hash -> names, from digest lines."""
    hashes, names = collections.defaultdict(collections.Counter), collections.defaultdict(set)
    for line in lines:
        member, arch, digest, name = line.split(" ", 3)
        hashes[(member, arch)][digest] += 1
        names[(member, arch, digest)].add(name)
    return hashes, names


def differences(recorded, current):
    """Lines naming each (object, arch) whose multiset of function hashes differs."""
    want, want_names = keyed(recorded)
    got, got_names = keyed(current)
    changed = []
    for key in sorted(set(want) | set(got)):
        if want[key] != got[key]:
            for digest in want[key] - got[key]:
                changed.append(f"  {key[0]} {key[1]}: was {sorted(want_names[key + (digest,)])}")
            for digest in got[key] - want[key]:
                changed.append(f"  {key[0]} {key[1]}: now {sorted(got_names[key + (digest,)])}")
    return changed


def main(argv):
    if len(argv) < 2 or argv[1] not in ("check", "write", "show") or len(argv) > 3:
        print(__doc__.strip())
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    library = pathlib.Path(argv[2] if len(argv) == 3 else ROOT / "build-cuda" / "src" / "attn" /
                           "cuda" / "libvarpack_cuda.a")
    if not library.is_file():
        print(f"cuda_sass: {library} not found; build the CUDA library first", file=sys.stderr)
        return 2
    release = nvcc_release()
    current = library_digest(library)
    if argv[1] == "show":
        print("\n".join(current))
        return 0
    if argv[1] == "write":
        DIGEST.parent.mkdir(parents=True, exist_ok=True)
        tmp = DIGEST.with_suffix(".tmp")
        tmp.write_text(f"# {release}\n" + "\n".join(current) + "\n")
        tmp.replace(DIGEST)
        print(f"cuda_sass: wrote {len(current)} functions to {DIGEST.relative_to(ROOT)}")
        return 0
    recorded = DIGEST.read_text().splitlines()
    if not recorded or recorded[0] != f"# {release}":
        print(f"cuda_sass: the digest is of '{recorded[0][2:] if recorded else '?'}', nvcc is "
              f"'{release}': not compared")
        return 0
    changed = differences(recorded[1:], current)
    if changed:
        print("cuda_sass: the library's SASS differs from tests/cuda/sass_digest.txt:")
        print("\n".join(changed))
        print("A change meant to alter these kernels: scripts/cuda_sass.py write, and say so in "
              "the commit body.")
        return 1
    print(f"cuda_sass: {len(current)} functions' SASS as in the digest")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
