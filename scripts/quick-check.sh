#!/usr/bin/env bash
# Quick GPU spot check of a few cases and examples (run --check), then
# `codac bench` of the LM head; for iterating on one change between full
# scripts/gpu-test.sh runs. Prebuilt binary: target/release/codac.
set -u
B=${CODAC_BIN:-target/release/codac}
export CODAC_CACHE_DIR=${CODAC_CACHE_DIR:-/tmp/codac-cache}
for spec in "tests/cuda-cases/row_prelude.coda 333" "tests/cuda-cases/row_prelude.coda 1000" \
    "tests/cuda-cases/grid_reduction.coda 333" "tests/cuda-cases/grid_reduction.coda 1000" \
    "tests/cuda-cases/cross_entropy.coda 1000" "examples/lm_head_ce.coda 333"; do
    set -- $spec
    echo "== $1 M=$2"
    timeout 200 "$B" run "$1" --dims "M=$2" --random --check --color never 2>&1 | grep -E "RESULT output|^error|internal" | head -8
done
echo "== bench lm_head_ce M=8192"
timeout 240 "$B" bench examples/lm_head_ce.coda --dims M=8192 --iters 100 2>&1 | grep -E "^kernel|^k[0-9]|^block|^bare"
