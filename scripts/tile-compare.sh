#!/usr/bin/env bash
# Compares Hopper tile configurations on the GPU machine in one call (no
# Rust needed: a prebuilt target/release/codac, override with CODAC_BIN).
#
#   CONFIGS="Sm90Cfg128x128pp Sm90Cfg128x192pps" bash scripts/tile-compare.sh
#
# For every configuration in $CONFIGS (default: the rules' own choice, then
# the ping-pong ones) it
#   1. checks the forward (and, with COMPARE_GRAD=1, the training step) of
#      every file in $COMPARE_FILES (default examples/llama3_block.coda) at a
#      ragged M (333, 1000) with `codac run --check` (outputs poisoned with
#      NaN, compared with the interpreter);
#   2. times the bare GEMMs of bench/bare_gemms.coda and the fused blocks at
#      M = $COMPARE_M (default 8192) with `codac bench --tile-config`, each
#      kernel interleaved with its bare GEMM on the rules' configuration, so
#      the ratio column says what the configuration gains or costs.
# Logs go under $OUT (default /tmp/codac-tile-compare); printed last: each
# configuration's GEMM rows and block totals, then one line per check and
# bench with its exit code.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=${CODAC_BIN:-target/release/codac}
OUT=${OUT:-/tmp/codac-tile-compare}
M=${COMPARE_M:-8192}
ITERS=${COMPARE_ITERS:-100}
CONFIGS=${CONFIGS:-"rules Sm90Cfg128x128pp Sm90Cfg128x192pps"}
FILES=${COMPARE_FILES:-examples/llama3_block.coda}
mkdir -p "$OUT"
export CODAC_CACHE_DIR=${CODAC_CACHE_DIR:-/tmp/codac-tile-cache}
if [ -z "${CUDA_HOME:-}" ] && [ -f /usr/local/cuda/include/cuda_bf16.h ]; then
    export CUDA_HOME=/usr/local/cuda
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/device.txt"

SUMMARY=$(mktemp)
flags_of() { [ "$1" = rules ] || echo "--tile-config $1"; }

for cfg in $CONFIGS; do
    log="$OUT/$cfg.log"
    : >"$log"
    # shellcheck disable=SC2046
    for file in $FILES; do
        for m in 333 1000; do
            timeout 200 "$BIN" run "$file" --dims "M=$m" --random --check --color never $(flags_of "$cfg") >>"$log" 2>&1
            rc=$?
            echo "check $cfg $(basename "$file") M=$m rc=$rc" | tee -a "$SUMMARY"
            if [ "${COMPARE_GRAD:-0}" = 1 ]; then
                timeout 300 "$BIN" run "$file" --grad --dims "M=$m" --random --check --color never $(flags_of "$cfg") >>"$log" 2>&1
                rc=$?
                echo "check $cfg $(basename "$file") --grad M=$m rc=$rc" | tee -a "$SUMMARY"
            fi
        done
    done
    for file in bench/bare_gemms.coda $FILES; do
        echo "== bench $cfg $file" >>"$log"
        timeout 300 "$BIN" bench "$file" --dims "M=$M" --iters "$ITERS" --color never $(flags_of "$cfg") >>"$log" 2>>"$OUT/$cfg.err"
        echo "bench $cfg $(basename "$file") rc=$?" >>"$SUMMARY"
        if [ "${COMPARE_GRAD:-0}" = 1 ] && [ "$file" != bench/bare_gemms.coda ]; then
            timeout 400 "$BIN" bench "$file" --grad --dims "M=$M" --iters "$ITERS" --color never $(flags_of "$cfg") >>"$log" 2>>"$OUT/$cfg.err"
            echo "bench $cfg $(basename "$file") --grad rc=$?" >>"$SUMMARY"
        fi
    done
done

for cfg in $CONFIGS; do
    echo "=== $cfg"
    # GEMM kernel rows (name, config, time, TFLOP/s, bare, bare config,
    # ratio, cold compile, registers) and the block and step totals.
    awk '/^== bench/ {print} $2 == "gemm" {print $1, $3, $5, $6, $8, $9, $10, $11 $12, $15} /^(block:|bare GEMMs|training step)/ {print}' "$OUT/$cfg.log"
done
echo
cat "$SUMMARY"
