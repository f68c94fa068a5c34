#!/usr/bin/env bash
# Benchmarks of docs/benchmarks.md, run on a machine with an NVIDIA GPU, its
# driver, NVRTC and PyTorch (no Rust needed: it uses a prebuilt binary,
# default target/release/codac, override with CODAC_BIN).
#
#   1. codac bench on the Llama-3 8B non-attention block
#      (examples/llama3_block.coda) and the 1B one
#      (bench/llama3_1b_block.coda) at M=$BENCH_M (default 8192): every
#      kernel, the whole block, the bare GEMMs, compile latency (unless
#      BENCH_NO_FORWARD=1); and the training step of each (codac bench
#      --grad: saving forward plus backward, against their bare GEMMs;
#      unless BENCH_NO_GRAD=1);
#   2. bench/compare.py: the same shapes and steps as cuBLAS GEMMs, eager
#      PyTorch and torch.compile, with the ratios to codac from step 1.
# With BENCH_SET=layers instead: codac bench, forward and --grad, of the
# layers that BENCH_LAYERS names (default all: qwen3, gemma2, lm_head,
# gpt2, gemma_mlp, parallel; examples/qwen3_layer.coda, gemma2_layer.coda,
# lm_head_ce.coda, gpt2_block.coda, gemma_mlp.coda, parallel_block.coda),
# then bench/compare_layers.py beside them (codac-<layer>[-grad].json,
# layers.json, layers.txt).
#
# Writes under $OUT (default /tmp/codac-bench): codac-8b.json,
# codac-1b.json, codac-8b-grad.json, codac-1b-grad.json (the `codac bench
# --json` documents), codac-*.txt (their tables and progress), compare.json,
# compare.txt, bench.log; prints the codac tables and then the comparison
# table last. Kernel cache: $CODAC_CACHE_DIR, default a fresh directory
# under $OUT's parent temp dir.
# Environment: BENCH_M, BENCH_ITERS (default 200), BENCH_CASES (compare.py
# --cases; default every case whose codac side runs: the forward cases
# unless BENCH_NO_FORWARD=1, step and step_1b unless BENCH_NO_GRAD=1),
# BENCH_NO_COMPILE=1 (skip torch.compile), BENCH_CODAC_TIMEOUT and
# BENCH_COMPARE_TIMEOUT (seconds per codac run, 240, and for compare.py,
# 480), BENCH_COMMIT (the commit the binary was built from, printed in the
# log).
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=${CODAC_BIN:-target/release/codac}
OUT=${OUT:-/tmp/codac-bench}
M=${BENCH_M:-8192}
ITERS=${BENCH_ITERS:-200}
mkdir -p "$OUT"
LOG="$OUT/bench.log"
: >"$LOG"
export CODAC_CACHE_DIR=${CODAC_CACHE_DIR:-$(mktemp -d /tmp/codac-bench-cache.XXXXXX)}

if [ -z "${CUDA_HOME:-}" ]; then
    if [ -f /usr/local/cuda/include/cuda_bf16.h ]; then
        export CUDA_HOME=/usr/local/cuda
    else
        CUDA_HOME=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null || true)
        export CUDA_HOME
    fi
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "binary: $BIN ($("$BIN" --version 2>&1))"
    echo "commit: ${BENCH_COMMIT:-not recorded, set BENCH_COMMIT: the copy of the tree on the GPU machine has no reliable .git}"
    echo "CUDA_HOME: ${CUDA_HOME:-none}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true
} | tee -a "$LOG"
if [ ! -x "$BIN" ]; then
    echo "error: $BIN not found (build it with: cargo build --release -p codac)" | tee -a "$LOG"
    exit 2
fi

failures=0
made=()  # the codac bench documents this run wrote
# codac_bench NAME FILE [FLAGS...]
codac_bench() {
    local name=$1 file=$2 t0
    shift 2
    t0=$(date +%s)
    echo "== codac bench $file --dims M=$M --iters $ITERS --json $*" | tee -a "$LOG"
    if timeout "${BENCH_CODAC_TIMEOUT:-240}" "$BIN" bench "$file" --dims "M=$M" --iters "$ITERS" --json --color never "$@" \
        >"$OUT/codac-$name.json" 2>"$OUT/codac-$name.txt"; then
        echo "   ok ($(( $(date +%s) - t0 )) s)" | tee -a "$LOG"
        made+=("$name")
    else
        failures=$((failures + 1))
        echo "   FAILED ($(( $(date +%s) - t0 )) s):" | tee -a "$LOG"
        tail -5 "$OUT/codac-$name.txt" | tee -a "$LOG"
    fi
}
if [ "${BENCH_SET:-llama}" = layers ]; then
    wanted=${BENCH_LAYERS:-qwen3,gemma2,lm_head,gpt2,gemma_mlp,parallel}
    layers_args=(--m "$M" --iters "$ITERS" --json "$OUT/layers.json" --layers "$wanted")
    for layer in qwen3:examples/qwen3_layer.coda gemma2:examples/gemma2_layer.coda \
        lm_head:examples/lm_head_ce.coda gpt2:examples/gpt2_block.coda gemma_mlp:examples/gemma_mlp.coda \
        parallel:examples/parallel_block.coda; do
        case ",$wanted," in *",${layer%%:*},"*) ;; *) continue ;; esac
        codac_bench "${layer%%:*}" "${layer#*:}"
        codac_bench "${layer%%:*}-grad" "${layer#*:}" --grad
    done
    for name in "${made[@]}"; do
        layers_args+=(--codac "$OUT/codac-$name.json")
    done
    echo "== python3 bench/compare_layers.py ${layers_args[*]}" | tee -a "$LOG"
    if ! PYTHONUNBUFFERED=1 timeout "${BENCH_COMPARE_TIMEOUT:-480}" python3 bench/compare_layers.py "${layers_args[@]}" \
        >"$OUT/layers.txt" 2>&1; then
        failures=$((failures + 1))
        tail -15 "$OUT/layers.txt" | tee -a "$LOG"
    fi
    grep -A12 '^times in ms' "$OUT/layers.txt" | tee -a "$LOG"
    echo "$failures failure(s); files in $OUT"
    [ "$failures" -eq 0 ]
    exit
fi
cases=()
if [ "${BENCH_NO_FORWARD:-0}" != 1 ]; then
    codac_bench 8b examples/llama3_block.coda
    codac_bench 1b bench/llama3_1b_block.coda
    cases+=(out_proj gate_up down qkv block block_1b)
fi
if [ "${BENCH_NO_GRAD:-0}" != 1 ]; then
    codac_bench 8b-grad examples/llama3_block.coda --grad
    codac_bench 1b-grad bench/llama3_1b_block.coda --grad
    cases+=(step step_1b)
fi

compare_args=(--m "$M" --iters "$ITERS" --json "$OUT/compare.json")
for name in "${made[@]}"; do
    [ -s "$OUT/codac-$name.json" ] && compare_args+=(--codac "$OUT/codac-$name.json")
done
cases_list=$(IFS=,; echo "${cases[*]}")
compare_args+=(--cases "${BENCH_CASES:-$cases_list}")
[ "${BENCH_NO_COMPILE:-0}" = 1 ] && compare_args+=(--no-compile)
echo "== python3 bench/compare.py ${compare_args[*]}" | tee -a "$LOG"
t0=$(date +%s)
if ! PYTHONUNBUFFERED=1 timeout "${BENCH_COMPARE_TIMEOUT:-480}" python3 bench/compare.py "${compare_args[@]}" >"$OUT/compare.txt" 2>&1; then
    failures=$((failures + 1))
    echo "   compare.py FAILED:" | tee -a "$LOG"
    tail -15 "$OUT/compare.txt" | tee -a "$LOG"
else
    echo "   ok ($(( $(date +%s) - t0 )) s)" | tee -a "$LOG"
fi

for name in "${made[@]}"; do
    echo
    grep -v -E '^(compiling|timing) ' "$OUT/codac-$name.txt" 2>/dev/null | tee -a "$LOG"
done
echo
grep -A24 '^times in ms' "$OUT/compare.txt" | tee -a "$LOG"
echo "$failures failure(s); files in $OUT"
[ "$failures" -eq 0 ]
