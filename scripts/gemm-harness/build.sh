#!/usr/bin/env bash
# build.sh -- builds the GEMM harness for sm_90a, checks that it also compiles
# for sm_80, builds nvrtc_check, and prints the ptxas register/spill summary
# of every kernel for both targets (fails if any kernel spills, except the
# accepted epilogue spills named by SPILL_OK below).  The sm_80 compile leaves
# out the sm90 mainloop (-DCODA_NO_SM90: wgmma needs sm_90a).
#
# Environment: NVCC (default: nvcc on PATH), BUILD_DIR (default: ./build next
# to this script), SKIP_SM80=1 to skip the sm_80 compile check.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
INC="$ROOT/crates/coda-cuda/cuda"
NVCC=${NVCC:-nvcc}
B=${BUILD_DIR:-$HERE/build}
mkdir -p "$B"
CUDA_ROOT=$(cd "$(dirname "$(command -v "$NVCC")")/.." && pwd)
# libnvrtc: the unversioned dev link if present, else the versioned file.
NVRTC_LIB="-lnvrtc"
if ! ls "$CUDA_ROOT"/lib64/libnvrtc.so "$CUDA_ROOT"/lib/libnvrtc.so "$CUDA_ROOT"/targets/*/lib/libnvrtc.so \
        >/dev/null 2>&1; then
    NVRTC_LIB="-l:libnvrtc.so.13"
fi
COMMON=(-O3 -std=c++17 -I"$INC" -Xcompiler -Wall,-Wextra)
echo "nvcc: $(command -v "$NVCC") ($("$NVCC" --version | tail -1))"

# The three compiles run in parallel; each writes ptxas -v output to a file.
"$NVCC" "${COMMON[@]}" -gencode=arch=compute_90a,code=sm_90a -Xptxas -v "$HERE/harness.cu" -o "$B/harness" -ldl \
    2>"$B/ptxas_sm90a.txt" &
P1=$!
if [ "${SKIP_SM80:-0}" = 1 ]; then
    true &
else
    "$NVCC" "${COMMON[@]}" -gencode=arch=compute_80,code=sm_80 -Xptxas -v -c "$HERE/harness.cu" \
        -DCODA_NO_SM90 -o "$B/harness_sm80.o" 2>"$B/ptxas_sm80.txt" &
fi
P2=$!
"$NVCC" -O2 -std=c++17 -Xcompiler -Wall,-Wextra "$HERE/nvrtc_check.cu" -o "$B/nvrtc_check" \
    -L"$CUDA_ROOT/lib64" -L"$CUDA_ROOT/lib" $NVRTC_LIB 2>"$B/nvrtc_check_build.txt" &
P3=$!
rc=0
wait $P1 || rc=1
wait $P2 || rc=1
wait $P3 || rc=1
# Compiler messages other than the ptxas resource report (warnings, errors).
for f in "$B"/ptxas_sm90a.txt "$B"/ptxas_sm80.txt "$B"/nvrtc_check_build.txt; do
    [ -f "$f" ] || continue
    if grep -v -e "ptxas info" -e "bytes stack frame" -e "^$" "$f" >/dev/null; then
        echo "== messages in $(basename "$f"):"
        grep -v -e "ptxas info" -e "bytes stack frame" -e "^$" "$f" | head -40
    fi
done
[ $rc -eq 0 ] || { echo "build FAILED"; exit 1; }
# Accepted: the SwiGLU test epilogue keeps 64 column partials next to 128
# accumulators under the BN = 256 cooperative sm90 config (~124 bytes spilled
# in the epilogue, none in the mainloop); column-partial epilogues belong on
# BN = 128 configs (see crates/coda-cuda/cuda/README.md).
export SPILL_OK=${SPILL_OK:-'sm90 128x256 coop .*Epi_swiglu'}
python3 "$HERE/ptxas_summary.py" "$B/ptxas_sm90a.txt" >"$B/regs_sm90a.txt" || rc=1
tail -1 "$B/regs_sm90a.txt"
if [ "${SKIP_SM80:-0}" != 1 ]; then
    python3 "$HERE/ptxas_summary.py" "$B/ptxas_sm80.txt" >"$B/regs_sm80.txt" || rc=1
    tail -1 "$B/regs_sm80.txt"
fi
[ $rc -eq 0 ] || { echo "SPILLS found (see $B/regs_*.txt)"; exit 1; }
echo "build OK: $B/harness, $B/nvrtc_check"
