"""The training example's tiny config: 20 AdamW steps of the codac model on
the CPU (through the interpreter) track the plain PyTorch model's loss."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch" / "train_llama.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_llama", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_llama"] = module
    spec.loader.exec_module(module)
    return module


def test_tiny_config_matches_the_plain_model_step_by_step() -> None:
    train = load_example()
    results = train.main(["--config", "tiny", "--device", "cpu", "--steps", "20", "--model", "both"])
    codac_losses, torch_losses = results["codac"]["losses"], results["torch"]["losses"]
    assert len(codac_losses) == len(torch_losses) == 20
    # Both models start from one initialization and see the same batches;
    # they differ only in rounding (the interpreter accumulates matmuls in
    # f64, PyTorch's CPU bf16 matmul in f32), measured at under 1e-3.
    for step, (a, b) in enumerate(zip(codac_losses, torch_losses), start=1):
        assert abs(a - b) < 1e-2, f"step {step}: codac {a:.4f}, torch {b:.4f}"
    # Training works: byte-level loss falls from about ln(256) = 5.5.
    assert codac_losses[0] > 5.0 and codac_losses[-1] < codac_losses[0] - 0.5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no GPU")
def test_tiny_config_on_the_gpu_matches_the_plain_model() -> None:
    train = load_example()
    results = train.main(["--config", "tiny", "--device", "cuda", "--steps", "20", "--model", "both"])
    for step, (a, b) in enumerate(zip(results["codac"]["losses"], results["torch"]["losses"]), start=1):
        assert abs(a - b) < 2e-2, f"step {step}: codac {a:.4f}, torch {b:.4f}"


@pytest.mark.parametrize("dist", ["fsdp", "ddp"])
def test_two_processes_match_one_with_their_global_batch(dist: str, tmp_path: Path) -> None:
    """FSDP2 or DDP over 2 CPU processes (gloo) trains on the shards of the
    global batch that one process takes whole."""
    import json
    import subprocess

    def run(launcher: list[str], options: list[str], json_path: Path) -> list[float]:
        common = ["--config", "tiny", "--device", "cpu", "--steps", "5", "--model", "codac", "--json", str(json_path)]
        done = subprocess.run([*launcher, str(EXAMPLE), *common, *options], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(launcher)} failed:\n{done.stderr[-4000:]}"
        return next(iter(json.loads(json_path.read_text())["results"].values()))["losses"]

    # --standalone rendezvouses on a free port, so runs never collide.
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    sharded = run(torchrun, ["--dist", dist], tmp_path / "sharded.json")
    single = run([sys.executable], ["--batch-multiple", "2"], tmp_path / "single.json")
    assert len(sharded) == len(single) == 5
    # The same data and gradients up to the order of the gradient reduction.
    for step, (a, b) in enumerate(zip(sharded, single), start=1):
        assert abs(a - b) < 2e-3, f"step {step}: {dist} {a:.4f}, one process {b:.4f}"
