#!/usr/bin/env bash
# profile-stalls.sh -- where codac's fused GEMM kernels stall: runs a block
# once under Nsight Compute (speed of light, warp states, per-SASS-instruction
# stall samples) and writes, per kernel, the SASS source page as CSV under
# $OUT.  Parse the CSVs with scripts/stall-table.py (here or on the GPU
# machine).  GPU machine only; needs a release build of codac.
#   OUT=$OUT KERNELS='gemm_x1|gemm_z' bash scripts/profile-stalls.sh [FILE] [M]
# RUN_ARGS adds options to the profiled `codac run` (e.g. "--grad" for a
# training step's kernels, "--tile-config NAME").
set -u
OUT=${OUT:-/tmp/codac-prof}
CODAC=${CODAC:-target/release/codac}
FILE=${1:-examples/llama3_block.coda}
M=${2:-8192}
KERNELS=${KERNELS:-gemm_x1|gemm_z|gemm_x_out|gemm_u}
mkdir -p "$OUT"
if ! command -v ncu >/dev/null; then echo "skipped: no ncu"; exit 0; fi
ncu --clock-control none -k "regex:_(${KERNELS})\$" --launch-count 8 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
    -f -o "$OUT/prof" "$CODAC" run "$FILE" --dims "M=$M" --random ${RUN_ARGS:-} >"$OUT/ncu.log" 2>&1
echo "ncu exit $?"; tail -5 "$OUT/ncu.log"
ncu -i "$OUT/prof.ncu-rep" --page details --csv >"$OUT/details.csv" 2>&1
IFS='|' read -ra KS <<<"$KERNELS"
for k in "${KS[@]}"; do
    ncu -i "$OUT/prof.ncu-rep" -k "regex:_${k}\$" --page source --csv --print-source sass >"$OUT/source_${k}.csv" 2>&1
    echo "$k: $(wc -l <"$OUT/source_${k}.csv") lines"
done
grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput)"' "$OUT/details.csv" | cut -c1-200 | head -40
