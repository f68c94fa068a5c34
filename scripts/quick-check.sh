set -u
B=target/release/codac
export CODAC_CACHE_DIR=/tmp/codac-cache
mkdir -p $OUT
for spec in "tests/cuda-cases/norm_prologue.coda 333" "tests/cuda-cases/norm_prologue.coda 1000" "tests/cuda-cases/rmsnorm_row.coda 333" "examples/lm_head_ce.coda 333" "examples/llama3_block.coda 1000"; do
  set -- $spec
  echo "== $1 M=$2"
  timeout 200 $B run $1 --dims M=$2 --random --check --color never 2>&1 | grep -E "RESULT output|error|internal|mismatch" | head -8
done
echo "== bench lm_head_ce"
timeout 240 $B bench examples/lm_head_ce.coda --dims M=8192 --iters 50 2>&1 | tail -25
echo "== bench llama3"
timeout 200 $B bench examples/llama3_block.coda --dims M=8192 --iters 100 2>&1 | tail -25
