#!/usr/bin/env bash
# One command for the GPU machine, from the repository root: builds varpack's extension in place
# (examples/build_extension.sh; BUILD=0 skips it) and times each context-parallel variant's
# per-rank kernel work on a 64k-token document against the one-process kernel
# (bench/distributed/cp_split_cost.py; arguments are passed on to it).
set -euo pipefail
cd "$(dirname "$0")/../.."
source examples/build_extension.sh
build_extension
python3 bench/distributed/cp_split_cost.py "$@" 2>&1 | tee "${OUT:-.}/cp_split_cost.txt"
