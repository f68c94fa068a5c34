#!/usr/bin/env bash
# The Python package on a GPU machine: installs the wheel built here
# (target/wheels, carried to the machine) without its dependencies (the
# machine has torch and a CUDA toolkit), then runs the parts named in
# CODAC_PY_PARTS (default: all):
#   tests     the GPU tests (pytest -m gpu)
#   overhead  host time per eager block call (bench/python_overhead.py)
#   train     the 1B-width training example: codac, PyTorch eager and
#             torch.compile from one initialization, and PyTorch eager from
#             a second seed for the run-to-run spread (300 steps each)
#   dist      (2 GPUs) the codac model under FSDP2 and DDP against one GPU
#             on the same global batch, and the tests that need 2 GPUs
# Logs and JSON go to $OUT (or out/).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"
mkdir -p "$out"
parts="${CODAC_PY_PARTS:-tests overhead train}"
steps="${CODAC_TRAIN_STEPS:-300}"
site=/tmp/codac-site
rm -rf "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" target/wheels/codac-*manylinux*.whl \
    || python3 -m zipfile -e target/wheels/codac-*manylinux*.whl "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, codac; print('torch', torch.__version__, 'codac from', codac.__file__)"
status=0
for part in $parts; do
    case "$part" in
    tests)
        python3 -m pytest -q -rs ${PYTEST_ARGS:-python/tests -m gpu} 2>&1 | tee "$out/pytest-gpu.log" || status=1 ;;
    overhead)
        python3 bench/python_overhead.py ${OVERHEAD_ARGS:-} 2>&1 | tee "$out/overhead.log" || status=1 ;;
    train)
        train=examples/torch/train_llama.py
        python3 $train --config 1b --steps "$steps" --model codac --seed 0 --json "$out/train-codac.json" || status=1
        python3 $train --config 1b --steps "$steps" --model torch --seed 0 --json "$out/train-torch.json" || status=1
        python3 $train --config 1b --steps "$steps" --model torch --seed 0 --compile --json "$out/train-compile.json" || status=1
        python3 $train --config 1b --steps "$steps" --model torch --seed 1 --json "$out/train-torch-seed1.json" || status=1
        python3 scripts/train-table.py "$out"/train-*.json | tee "$out/train-table.md" || status=1 ;;
    dist)
        train=examples/torch/train_llama.py
        dsteps="${CODAC_DIST_STEPS:-100}"
        for mode in fsdp ddp; do
            python3 -m torch.distributed.run --nproc-per-node 2 $train --config 1b --steps "$dsteps" --model codac \
                --dist $mode --json "$out/dist-$mode.json" 2>&1 | grep -v '^\[' || status=1
        done
        python3 $train --config 1b --steps "$dsteps" --model codac --batch-multiple 2 --json "$out/dist-single.json" \
            2>&1 | grep -v '^\[' || status=1
        python3 scripts/train-table.py "$out"/dist-single.json "$out"/dist-fsdp.json "$out"/dist-ddp.json \
            | tee "$out/dist-table.md" || status=1
        python3 -m pytest -q -rs python/tests/test_cuda.py -k second_gpu 2>&1 | tail -3 || status=1 ;;
    *) echo "unknown part $part"; status=1 ;;
    esac
done
exit $status
