#!/usr/bin/env bash
# The project's test command (README.md): installs the CUDA compiler pieces
# that the NVRTC compile checks need (NVRTC and the CUDA headers, from the
# Python package index, into target/cuda-venv; no GPU and no system CUDA
# needed), then runs the whole test suite with snapshots locked.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/cuda-venv
if [ -z "${CUDA_HOME:-}" ]; then
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import nvidia' 2>/dev/null || [ ! -d "$("$venv/bin/python" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')/nvidia/cu13/include/cccl" ]; then
        "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
            "nvidia-cuda-nvrtc==13.0.88" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
    fi
    CUDA_HOME="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
    export CUDA_HOME
fi
echo "CUDA_HOME=$CUDA_HOME"
# A missing NVRTC must fail the compile checks instead of skipping them.
export CODAC_REQUIRE_NVRTC=1
# A changed snapshot fails instead of being written.
export INSTA_UPDATE=no
cargo test --workspace --locked

# The Python package: torch, numpy, pytest and maturin into a cached
# environment (the Linux torch wheel and its CUDA libraries are large),
# then the package built from this checkout and its tests, which run on the
# CPU through the interpreter here (GPU tests say "skipped: no GPU").
py=target/py-venv
if [ ! -x "$py/bin/python" ]; then
    python3 -m venv "$py"
fi
if ! "$py/bin/python" -c 'import torch, numpy, pytest, maturin' 2>/dev/null; then
    # One wheel at a time: a single pip command downloads every wheel before
    # it installs any, and torch's CUDA libraries take gigabytes, so the
    # disk would hold all of them twice. pip resolves the set first (from
    # the index's metadata, downloading no wheel), then installs each one.
    report="$py/resolved.json"
    "$py/bin/pip" install --quiet --disable-pip-version-check --dry-run --ignore-installed \
        --report "$report" torch numpy pytest maturin \
        "nvidia-cuda-nvrtc>=13" "nvidia-cuda-runtime>=13" "nvidia-cuda-cccl>=13"
    # Triton (1 GB) is left out: only inductor's GPU code generation needs
    # it, and the CPU tests compile with the aot_eager backend.
    "$py/bin/python" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    if item["metadata"]["name"] != "triton":
        print(item["metadata"]["name"] + "==" + item["metadata"]["version"])
' "$report" | while read -r requirement; do
        "$py/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir --no-deps "$requirement"
    done
fi
# The test wheel is built in the dev profile, beside the Rust tests' build:
# a release build would be a second copy of every dependency on a disk that
# already holds torch. Its dependencies are resolved and installed above
# (python/pyproject.toml's list); without --no-deps pip would fetch the
# Triton left out there.
PATH="$PWD/$py/bin:$PATH" "$py/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir --no-build-isolation \
    --no-deps --config-settings=build-args="--profile dev" ./python
"$py/bin/python" -m pytest -q -rs python/tests
