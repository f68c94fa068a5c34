#!/usr/bin/env bash
# device_run.sh -- one whole GPU session in one command (for the lent H100
# machine, which copies the working tree): build with that machine's nvcc,
# run nvrtc_check and the harness, profile the main kernels with ncu, and
# print a short summary last.  Full logs go to $OUT (or /tmp/coda_out).
# If the build there fails, the binaries carried in ./build are used.
#
# Environment: SKIP_BUILD=1 uses the carried ./build binaries without
# building (built here with the same CUDA 13.0 nvcc; saves ~2 min of device
# time); HARNESS_ARGS (e.g. --sm90) goes to the harness and selects the
# profiled kernels; SKIP_NCU=1 skips ncu.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
O=${OUT:-/tmp/coda_out}
mkdir -p "$O"
export PATH="$PATH:/usr/local/cuda/bin"
export BUILD_DIR=/tmp/coda_build
T0=$(date +%s)
ARGS=${HARNESS_ARGS:-}
if [ "${SKIP_BUILD:-0}" = 1 ]; then
    export BUILD_DIR="$HERE/build"
    echo "using carried binaries in $BUILD_DIR"
else
    SKIP_SM80=${SKIP_SM80:-1} bash "$HERE/build.sh" >"$O/build.log" 2>&1
    brc=$?
    tail -6 "$O/build.log"
    cp "$BUILD_DIR"/regs_*.txt "$O/" 2>/dev/null
    if [ $brc -ne 0 ] || [ ! -x "$BUILD_DIR/harness" ]; then
        echo "device build failed (rc=$brc); using carried binaries"
        export BUILD_DIR="$HERE/build"
    fi
fi
echo "build: $(($(date +%s) - T0)) s"
# shellcheck disable=SC2086
timeout ${RUN_TIMEOUT:-300} bash "$HERE/run.sh" $ARGS >"$O/run.log" 2>&1
rrc=$?
echo "run: $(($(date +%s) - T0)) s, rc=$rrc"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "${SKIP_NCU:-0}" != 1 ]; then
    timeout 75 "$NCU" --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis_Tables \
        --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats \
        -k regex:gemm_kernel\|gemm90_kernel \
        bash "$HERE/run.sh" $ARGS --profile >"$O/ncu.txt" 2>&1
    echo "ncu: rc=$?, $(($(date +%s) - T0)) s"
    grep -E "gemm_kernel|gemm90_kernel|Duration|Compute \(SM\) Throughput|Bank|Achieved Occupancy|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Eligible Warps" \
        "$O/ncu.txt" | sed -E -e 's/gemm_kernel<coda::GemmConfig<([0-9, a-z]+)>, coda::(A_[A-Za-z]+), coda::(B_[A-Za-z]+).*/\1 \2 \3/' \
            -e 's/gemm90_kernel<coda::Sm90Config<([0-9, a-z]+)>, coda::(A_[A-Za-z]+), coda::(B_[A-Za-z]+), [a-z_0-9]+, ([A-Za-z_]+).*/sm90 \1 \2 \3 \4/' \
        | cut -c1-150 | head -60
fi
echo "==== harness and nvrtc_check output (PASS lines omitted; full log in run.log) ===="
grep -v " PASS " "$O/run.log" | tail -80
exit $rrc
