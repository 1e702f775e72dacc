#!/usr/bin/env bash
# Build and run the kernel lab on a GPU machine, from the repository root:
#   bash kernels/lab/run.sh            (logs to $OUT/lab_gemv.log when OUT is set)
# Standalone: needs only nvcc and the CUDA runtime (and nccl.h, which runtime/check.h includes).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo '#define HAVE_CUDA 1' >"$tmp/config.h"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xcompiler -fopenmp \
    -I"$tmp" -I"$top" -I"$top/kernels" "$top/kernels/lab/gemv_lab.cu" -o "$tmp/gemv_lab" -lgomp
out=${OUT:-$tmp}
"$tmp/gemv_lab" | tee "$out/lab_gemv.log"
