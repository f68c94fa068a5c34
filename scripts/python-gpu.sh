#!/usr/bin/env bash
# The Python package on a GPU machine: installs the wheel built here
# (target/wheels, carried to the machine) without its dependencies (the
# machine has torch and a CUDA toolkit), then runs the GPU tests and the
# host-overhead benchmark. Logs go to $OUT (or out/) when set.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"
mkdir -p "$out"
site=/tmp/codac-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" target/wheels/codac-*manylinux*.whl \
    || python3 -m zipfile -e target/wheels/codac-*manylinux*.whl "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, codac; print('torch', torch.__version__, 'codac from', codac.__file__)"
status=0
python3 -m pytest -q -rs ${PYTEST_ARGS:-python/tests -m gpu} 2>&1 | tee "$out/pytest-gpu.log" || status=1
python3 bench/python_overhead.py 2>&1 | tee "$out/overhead.log" || status=1
exit $status
