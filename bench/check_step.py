#!/usr/bin/env python3
"""Checks that the training step bench/compare.py times computes what the
`grad` declaration of the .coda file does: on the CPU, the eager step of
compare.py in float32 and `codac eval --grad` (the float64 interpreter) run
on the same inputs, and every gradient must agree within TOLERANCE of its
largest magnitude. No GPU needed; the interpreter takes about half a
minute per layer at M = 16.

    python3 bench/check_step.py [--codac target/release/codac] [--m 16] [--models 8b,1b]

Inputs are compare.py's random data (bf16 values, exact in float32) with
RoPE positions drawn once: the interpreter reads the positions, the PyTorch
step reads Hugging Face's cos/sin tables of them, computed in float64 and
rounded to float32.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import compare

ROOT = Path(__file__).resolve().parent.parent
FILES = {"8b": "examples/llama3_block.coda", "1b": "bench/llama3_1b_block.coda"}
TOLERANCE = 1e-5


def codac_gradients(codac, coda, m, inputs, pos, workdir):
    """`codac eval --grad` on `inputs` (name -> tensor) and `pos`: name -> d<name>."""
    given, out = workdir / "inputs", workdir / "out"
    given.mkdir()
    for name, t in inputs.items():
        np.save(given / f"{name}.npy", t.float().numpy())
    np.save(given / "pos.npy", pos.int().numpy())
    command = [codac, "eval", str(ROOT / coda), "--grad", "--dims", f"M={m}", "--inputs", str(given),
               "--out", str(out), "--color", "never"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return {name: torch.from_numpy(np.load(out / f"d{name}.npy")).double() for name in compare.WRT}


def torch_gradients(p, inputs, pos):
    """compare.py's eager step in float32: name -> its .grad."""
    cos, sin = (t.float() for t in compare.rope_tables(pos, p["HD"], torch.float64))
    step = compare.make_step(p, compare.make_ops(p)["block"][0])
    leaves = [inputs[n].float().requires_grad_(True) for n in compare.WRT]
    step(*leaves, cos, sin, inputs["dx2"].float(), inputs["dqkv"].float())
    return {name: leaf.grad.double() for name, leaf in zip(compare.WRT, leaves)}


def check(codac, model, m, seed):
    """Prints each gradient's difference; returns whether all are within TOLERANCE."""
    p = compare.MODELS[model]
    table = compare.shapes(p, m)
    gen = torch.Generator()
    gen.manual_seed(seed)
    names = [n for n in compare.STEP_INPUTS if n not in ("cos", "sin")]
    inputs = {n: compare.make_tensor(*table[n], gen, p["HD"], "cpu") for n in names}
    pos = torch.randint(0, 1024, (m,), generator=gen)
    with tempfile.TemporaryDirectory(prefix="check-step-") as workdir:
        want = codac_gradients(codac, FILES[model], m, inputs, pos, Path(workdir))
    got = torch_gradients(p, inputs, pos)
    differences = {}
    for name in compare.WRT:
        ref = want[name].reshape(got[name].shape)
        differences[name] = ((got[name] - ref).abs().max() / ref.abs().max()).item()
    ok = all(d <= TOLERANCE for d in differences.values())
    listed = ", ".join(f"d{n} {d:.1e}" for n, d in differences.items())
    print(f"{model} ({FILES[model]}, M={m}): {'ok' if ok else 'DIFFERENT'}: {listed}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codac", default=str(ROOT / "target/release/codac"))
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--models", default="8b,1b")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    results = [check(args.codac, model, args.m, args.seed) for model in args.models.split(",")]
    if not all(results):
        sys.exit(f"error: a gradient differs from codac eval --grad by more than {TOLERANCE} of its largest magnitude")


if __name__ == "__main__":
    main()
