#!/usr/bin/env bash
# GPU verification of codac's generated kernels (run on a machine with an
# NVIDIA GPU, the CUDA driver and NVRTC; no Rust needed).
#
# Uses a prebuilt binary (default target/release/codac; override with
# CODAC_BIN). For every example and every case in tests/cuda-cases (except
# the expected-error ones), at several token counts M including ragged ones
# (333, 1000) and a large one, it runs
#     codac run FILE --dims M=... --random --check --time
# (outputs poisoned with NaN, compared with the interpreter, every kernel
# timed: median of 20 runs after warm-up), writes the full log to
# $OUT/gpu-test.log and the table to $OUT/gpu-test-table.txt, prints the
# table last, and exits non-zero if any run failed.
#
# NVRTC: CUDA_HOME if set, else /usr/local/cuda, else the pip `nvidia`
# package's cu13 directory. Kernel cache: $CODAC_CACHE_DIR or
# /tmp/codac-cache. Whole-script deadline: CODAC_GPU_TEST_BUDGET seconds
# (default 540); runs that would start later are reported as skipped.
# CODAC_GPU_TEST_PARTS picks the parts run (default "cases forward grad":
# the tests/cuda-cases files, the examples' forward blocks, the examples'
# training steps). Before the runs, every kernel they need is compiled into
# the cache with `codac compile`, in parallel on all processors
# (CODAC_GPU_TEST_JOBS, default nproc), so the runs, one at a time, find
# their kernels compiled.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=${CODAC_BIN:-target/release/codac}
OUT=${OUT:-/tmp/codac-gpu-test}
BUDGET=${CODAC_GPU_TEST_BUDGET:-540}
mkdir -p "$OUT"
LOG="$OUT/gpu-test.log"
TABLE="$OUT/gpu-test-table.txt"
ROWS=$(mktemp)
: >"$LOG"
export CODAC_CACHE_DIR=${CODAC_CACHE_DIR:-/tmp/codac-cache}

if [ -z "${CUDA_HOME:-}" ]; then
    if [ -f /usr/local/cuda/include/cuda_bf16.h ]; then
        export CUDA_HOME=/usr/local/cuda
    else
        CUDA_HOME=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null || true)
        export CUDA_HOME
    fi
fi
{
    echo "binary: $BIN"
    echo "CUDA_HOME: ${CUDA_HOME:-none}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
} | tee -a "$LOG"
if [ ! -x "$BIN" ]; then
    echo "error: $BIN not found (build it with: cargo build --release -p codac)" | tee -a "$LOG"
    exit 2
fi

start=$(date +%s)
failures=0
PARTS=" ${CODAC_GPU_TEST_PARTS:-cases forward grad} "
part() { [[ "$PARTS" == *" $1 "* ]]; }

# The runs, one per line: FILE M LIMIT [flags...].
PLAN=()
# run FILE M [timeout seconds [extra codac flags...]]: adds a run to the plan.
run() {
    PLAN+=("$*")
}

# run_now FILE M [timeout seconds [extra codac flags...]].
run_now() {
    local file=$1 m=$2 limit=${3:-150}
    shift 3 2>/dev/null || shift $#
    local flags=("$@")
    local name
    name=$(basename "$file" .coda)${flags[*]:+ ${flags[*]}}
    local now=$(( $(date +%s) - start ))
    if [ $((now + 20)) -gt "$BUDGET" ]; then
        echo "skip $name M=$m (budget)" | tee -a "$LOG"
        printf '%s\t%s\t%s\t-\t-\t-\tskipped\n' "$name" "$m" "(run)" >>"$ROWS"
        return
    fi
    local t0=$(date +%s)
    local out
    out=$(timeout "$limit" "$BIN" run "$file" --dims "M=$m" --random --check --time --color never "${flags[@]}" 2>&1)
    local rc=$?
    local secs=$(( $(date +%s) - t0 ))
    {
        echo "===== $file M=$m (exit $rc, ${secs} s)"
        echo "$out"
    } >>"$LOG"
    echo "$out" | awk -v ex="$name" -v m="$m" '
        /^RESULT output/ {
            for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%s\t%s\t%s\t%s\t%s\t-\t%s\n", ex, m, v["name"], v["max_rel"], v["rel_l2"], v["status"]
        }
        /^RESULT kernel/ {
            for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            printf "%s\t%s\t%s %s\t-\t-\t%s\t-\n", ex, m, v["name"], v["kind"], v["median_us"]
        }' >>"$ROWS"
    if [ $rc -ne 0 ]; then
        failures=$((failures + 1))
        local why
        why=$(echo "$out" | grep -m1 -E '^(error|internal)' || echo "exit $rc")
        printf '%s\t%s\t%s\t-\t-\t-\tFAIL\n' "$name" "$m" "(run: ${why:0:60})" >>"$ROWS"
        echo "FAIL $name M=$m: $why" | tee -a "$LOG"
    else
        echo "ok   $name M=$m (${secs} s)" | tee -a "$LOG"
    fi
}

# Cases first (small, many kernels: they fill the NVRTC cache), then examples.
if part cases; then
for f in tests/cuda-cases/*.coda; do
    grep -q '^// expect: error' "$f" && continue
    run "$f" 333 60
    run "$f" 1000 60
done
# Saved tensors in pair layout and the quad streams that read them.
run tests/cuda-cases/paired_saving.coda 333 60 --grad
run tests/cuda-cases/paired_saving.coda 1000 60 --grad
# The same quads held a pair ahead on staged subtiles (the configurations
# the rules give the gated backward GEMMs at large M), columns a multiple of
# 4 or not (cg::quad_bits<true> and <false>), with two and three regions,
# and pair loads of a ragged tile operand (cg::load2_aligned<false>): at
# these M the rules pick other tiles.
run tests/cuda-cases/paired_saving.coda 333 60 --grad --tile-config Sm90Cfg128x192pps2
run tests/cuda-cases/ragged.coda 333 60 --grad --tile-config Sm90Cfg128x192pps2
run tests/cuda-cases/paired_saving.coda 333 60 --grad --tile-config Sm90Cfg128x192pps3
run tests/cuda-cases/ragged.coda 333 60 --grad --tile-config Sm90Cfg128x192pps3
fi
if part forward; then
run examples/out_proj_kernel.coda 333
run examples/out_proj_kernel.coda 1000
run examples/out_proj_kernel.coda 4096
run examples/gpt2_block.coda 333
run examples/gpt2_block.coda 1000
run examples/gpt2_block.coda 4096
run examples/llama3_block.coda 333
run examples/llama3_block.coda 1000
run examples/gemma_mlp.coda 333
run examples/gemma_mlp.coda 1000
run examples/parallel_block.coda 333
run examples/parallel_block.coda 4096 200
run examples/lm_head_ce.coda 333 200
run examples/lm_head_ce.coda 333 200 --no-row-prelude
run examples/lm_head_ce.coda 1000 200
run examples/llama3_block.coda 4096 200
for f in qwen2 gemma2 mistral phi3 olmo2 qwen3 gptneox; do
    run examples/${f}_layer.coda 333 200
done
fi
# Backward blocks (docs/backward.md): every gradient output against the
# interpreter's gradients of the block as written.
if part grad; then
run examples/llama3_block.coda 333 200 --grad
run examples/llama3_block.coda 333 200 --grad --tile-config Sm90Cfg128x192pps2
run examples/gpt2_block.coda 333 200 --grad
run examples/lm_head_ce.coda 333 300 --grad
run examples/gemma_mlp.coda 333 200 --grad
run examples/parallel_block.coda 333 200 --grad
for f in qwen2 gemma2 mistral phi3 olmo2 qwen3 gptneox; do
    run examples/${f}_layer.coda 333 200 --grad
done
fi

# Fill the kernel cache: `codac compile` chooses the tile configurations
# `codac run` will at the same M (132 multiprocessors: an H100 SXM), so the
# runs below find every kernel compiled.
JOBS=${CODAC_GPU_TEST_JOBS:-$(nproc)}
PRE=$(mktemp -d)
for i in "${!PLAN[@]}"; do
    set -- ${PLAN[$i]}
    file=$1 m=$2
    shift 2; [ $# -gt 0 ] && shift
    printf '%q compile %q --dims M=%q --emit cubin --color never -o %q' "$BIN" "$file" "$m" "$PRE/$i"
    [ $# -gt 0 ] && printf ' %q' "$@"
    printf ' >>%q 2>&1\n' "$PRE/$i.log"
done | xargs -P "$JOBS" -d '\n' -n 1 bash -c
{
    echo "===== precompile: ${#PLAN[@]} runs' kernels on $JOBS processors, $(( $(date +%s) - start )) s"
    cat "$PRE"/*.log | grep -E '^(error|internal|warning)' | sort | uniq -c
} | tee -a "$LOG"
rm -rf "$PRE"

for line in "${PLAN[@]}"; do
    run_now $line
done

{
    printf 'example\tM\toutput / kernel\tmax rel\trel-L2\ttime (us)\tstatus\n'
    cat "$ROWS"
} | awk -F'\t' '
    { for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; if (NF > nf) nf = NF }
    END { for (r = 1; r <= n; r++) { line = ""; for (i = 1; i <= nf; i++) line = line sprintf("%-" w[i] "s  ", cell[r, i]); sub(/ +$/, "", line); print line } }
' >"$TABLE"
rm -f "$ROWS"
echo
cat "$TABLE"
echo
echo "total $(( $(date +%s) - start )) s, $failures failed run(s); log: $LOG"
[ "$failures" -eq 0 ]
