#!/usr/bin/env bash
# phase-probes.sh -- where a fused GEMM kernel's cycles go, phase by phase
# (docs/benchmarks.md, session 17).  For each probe block (bench/*_parts.coda
# and bench/bare_gemms.coda: a GEMM with one part of a fused epilogue, or
# none), it emits the CUDA source with codac, inserts clock64 marks into the
# GEMM kernel (bench/experiments/instrument_phases.py --tile-only), runs the
# block once with `codac run --random --time --out` through
# CODAC_KERNEL_OVERRIDE_DIR, and prints the kernel's median time and the
# average cycles per tile of each phase, which the instrumented kernel left
# in the first elements of its output.  GPU machine only (python3 with
# numpy); a release build of codac.
#   OUT=$OUT bash scripts/phase-probes.sh [M] [PROBE...]
# A probe is FILE:BLOCK (FILE under bench/ without .coda).  Logs (codac's
# output per probe) under $OUT; sources in a temporary directory.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/codac-phases}
CODAC=${CODAC:-target/release/codac}
M=${1:-8192}
shift 2>/dev/null || true
PROBES=("$@")
if [ ${#PROBES[@]} -eq 0 ]; then
    PROBES=(k5_parts:out_bare k5_parts:res1 k5_parts:res_two k5_parts:res_sumsq
        k8_parts:qkv_bare k8_parts:qkv_scale k8_parts:qkv_rope_half
        bare_gemms:bare_gate_up k6_parts:gu_halves k6_parts:gu_interleaved_scale)
fi
if ! nvidia-smi >/dev/null 2>&1; then echo "skipped: no GPU"; exit 0; fi
if [ -z "${CUDA_HOME:-}" ] && [ -f /usr/local/cuda/include/cuda_bf16.h ]; then export CUDA_HOME=/usr/local/cuda; fi
export CODAC_CACHE_DIR=${CODAC_CACHE_DIR:-/tmp/codac-phase-cache}
mkdir -p "$OUT"
WORK=$(mktemp -d)  # generated and instrumented sources
trap 'rm -rf "$WORK"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
printf '%-22s %9s %6s | %6s %6s %7s | %6s %6s %6s %6s %6s\n' probe "time us" tiles pre ring "K loop" m3 m4 m5 m6 end
status=0
for probe in "${PROBES[@]}"; do
    file=bench/${probe%%:*}.coda block=${probe#*:}
    gen="$WORK/gen-$block" over="$WORK/override-$block" saved="$WORK/out-$block"
    rm -rf "$gen" "$over" "$saved" && mkdir -p "$gen" "$over" "$saved"
    "$CODAC" compile "$file" --block "$block" --dims "M=$M" --emit cu -o "$gen" >"$OUT/$block.log" 2>&1 || {
        echo "$probe: compile failed (see $OUT/$block.log)"; status=1; continue; }
    kernel=$(grep -l '^    coda::gemm_sm90' "$gen"/*.cu | head -1)
    # The instrumented kernel writes into its first 16-bit output, which
    # must be one of the block's outputs for `--out` to save it.
    field=$(sed -n '/^struct Epi_k[0-9]*/,/^    };/p' "$kernel" | grep -m1 '^        __nv_bfloat16\* ' | sed 's/.*\* \(.*\);/\1/')
    python3 bench/experiments/instrument_phases.py "$kernel" "$over/$(basename "$kernel")" "$field" --tile-only || {
        echo "$probe: not instrumented"; status=1; continue; }
    CODAC_KERNEL_OVERRIDE_DIR="$over" timeout 200 "$CODAC" run "$file" --block "$block" --dims "M=$M" --random --time \
        --out "$saved" --color never >>"$OUT/$block.log" 2>&1 || { echo "$probe: run failed (see $OUT/$block.log)"; status=1; continue; }
    kname=$(basename "$kernel" .cu); kname=${kname##*_}
    time=$(awk -v k="$kname" '$1 == "time" && $2 == k {print $5; exit}' "$OUT/$block.log")
    python3 - "$saved/$field.npy" "$probe" "$time" <<'PY'
import sys
import numpy as np
a = np.load(sys.argv[1]).reshape(-1)[:9]
print('%-22s %9s %6.1f | %6.0f %6.0f %7.0f | %6.0f %6.0f %6.0f %6.0f %6.0f' % ((sys.argv[2][sys.argv[2].index(':') + 1:], sys.argv[3]) + tuple(a)))
PY
done
echo "(cycles per tile, averaged over every tile; pre: until the residual prefetch is issued, ring: the first ring slot,"
echo " m3..m6: marks in the functor where it has them, end: the rest; see bench/experiments/instrument_phases.py)"
exit $status
