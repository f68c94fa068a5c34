#!/usr/bin/env bash
# run.sh -- runs the NVRTC production-path check and the GEMM harness on a
# machine with a GPU.  Arguments go to the harness (--ragged-only skips the
# large shapes; --profile does one launch of a few kernels, for ncu; --sm90
# tests and times the Hopper mainloop instead of the sm80 one).
#
# Environment: NVCC (to locate the CUDA toolkit; default nvcc on PATH),
# BUILD_DIR (default ./build next to this script), CODA_CUBLAS_LIB (path of
# libcublas.so.*; searched for when unset).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=${BUILD_DIR:-$HERE/build}
NVCC=${NVCC:-nvcc}
CUDA_ROOT=$(cd "$(dirname "$(command -v "$NVCC")")/.." && pwd)
CUDA_INC="$CUDA_ROOT/include"
[ -f "$CUDA_INC/cuda_bf16.h" ] || CUDA_INC=$(dirname "$(find "$CUDA_ROOT" -name cuda_bf16.h | head -1)")
export LD_LIBRARY_PATH="$CUDA_ROOT/lib64:$CUDA_ROOT/lib:${LD_LIBRARY_PATH:-}"
if [ -z "${CODA_CUBLAS_LIB:-}" ]; then
    CODA_CUBLAS_LIB=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.1[0-9] /{print $NF; exit}')
    [ -n "$CODA_CUBLAS_LIB" ] || CODA_CUBLAS_LIB=$(find "$CUDA_ROOT" /usr/local /opt /usr/lib -name 'libcublas.so.1[0-9]' \
        2>/dev/null | head -1)
fi
if [ -n "$CODA_CUBLAS_LIB" ]; then
    export CODA_CUBLAS_LIB
    export LD_LIBRARY_PATH="$(dirname "$CODA_CUBLAS_LIB"):$LD_LIBRARY_PATH"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>/dev/null
rc=0
case " $* " in *" --profile "*) profiling=1 ;; *) profiling=0 ;; esac
if [ $profiling = 0 ]; then
    "$B/nvrtc_check" "$ROOT/crates/coda-cuda/cuda" "$CUDA_INC" --run || rc=1
fi
"$B/harness" "$@" || rc=1
exit $rc
