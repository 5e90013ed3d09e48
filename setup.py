# Builds varpack._C: the C++ core (planner, batch builder, I/O, CPU attention) compiled into one
# torch extension with thin bindings from python/csrc. On a machine with CUDA (torch built with
# CUDA and nvcc on the PATH, or VARPACK_CUDA=1) the CUDA kernels and their op registration are
# added; VARPACK_CUDA=0 forces a CPU-only build. Needs only torch and a C++ compiler (and nvcc for
# CUDA): the JSONL reader and the packed-file checker, the only users of simdjson, are not in the
# extension (Python reads token files and packed binary files, never JSONL, through C++).
# VARPACK_CORE_LIB=build/libvarpack.a links the core the CMake build already compiled instead of
# compiling it a second time (scripts/setup.sh does; the static library brings only the objects
# the bindings use, so simdjson stays out).
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension, include_paths


def sources(*patterns):
    return sorted(f for p in patterns for f in glob.glob(p))


uses_simdjson = {"src/io/jsonl_reader.cpp", "src/io/line_reader.cpp", "src/io/packed_check.cpp"}
core_lib = os.environ.get("VARPACK_CORE_LIB")
if core_lib:
    core_lib = os.path.abspath(core_lib)
    if not os.path.isfile(core_lib):
        raise SystemExit(f"VARPACK_CORE_LIB={core_lib}: no such file; build it first (cmake --build build)")
    core = []
else:
    core = [f for f in sources("src/pack/*.cpp", "src/balance/*.cpp", "src/batch/*.cpp", "src/io/*.cpp",
                               "src/attn/reference/*.cpp", "src/attn/cpu/*.cpp") if f not in uses_simdjson]
bindings = sources("python/csrc/*.cpp")
link_core = {"extra_objects": [core_lib]} if core_lib else {}
# torch's headers as system headers (gcc then drops their -I twin): their own -Wextra warnings
# would bury ours.
torch_system_includes = [f"-isystem{p}" for p in include_paths()]
cxx_flags = ["-O3", "-std=c++20", "-Wall", "-Wextra"] + torch_system_includes

want_cuda = os.environ.get("VARPACK_CUDA", "auto")
if want_cuda == "auto":
    import torch
    want_cuda = "1" if (torch.version.cuda is not None and CUDA_HOME is not None) else "0"

if want_cuda == "1":
    # The kernels' .cu files (their standalone tests and benchmark live in tests/cuda, bench/cuda).
    cuda_kernels = sources("src/attn/cuda/*.cu")
    extension = CUDAExtension(
        "varpack._C",
        bindings + core + cuda_kernels + sources("python/csrc/cuda/*.cpp"),
        include_dirs=[os.path.abspath("include"), os.path.abspath("src")],
        **link_core,
        define_macros=[("VARPACK_WITH_CUDA", "1"), ("VARPACK_SM90A", "1")],
        extra_compile_args={
            "cxx": cxx_flags,
            "nvcc": ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo",
                     "-gencode=arch=compute_80,code=sm_80",
                     # sm_90a: Hopper's wgmma kernels (and everything else for sm_90 devices).
                     "-gencode=arch=compute_90a,code=sm_90a"],
        },
    )
else:
    extension = CppExtension(
        "varpack._C", bindings + core,
        include_dirs=[os.path.abspath("include"), os.path.abspath("src")],
        **link_core,
        extra_compile_args={"cxx": cxx_flags},
    )

setup(ext_modules=[extension], cmdclass={"build_ext": BuildExtension})
