#!/usr/bin/env bash
# Build and run the kernel lab on a GPU machine, from the repository root:
#   bash kernels/lab/run.sh            (logs to $OUT/lab_<lab>.log when OUT is set)
# Standalone: needs only nvcc and the CUDA runtime (and nccl.h, which runtime/check.h includes).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '#define HAVE_CUDA 1' >"$tmp/config.h"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=${OUT:-$tmp}
# LAB_ONLY=gemv or persist: one of the two labs (default: both). LAB_EF=1: the persist lab's
# weight loads with an L2 evict-first policy (a build flag, so the timed code has no switch)
for lab in ${LAB_ONLY:-gemv persist}; do
    "$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -fopenmp \
        -DLAB_EF="${LAB_EF:-0}" -I"$tmp" -I"$top" -I"$top/kernels" "$top/kernels/lab/${lab}_lab.cu" \
        -o "$tmp/${lab}_lab" -lgomp
    "$tmp/${lab}_lab" | tee "$out/lab_${lab}.log"
done
