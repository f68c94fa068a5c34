"""Renders the training example's JSON results (train_llama.py --json) as
the Markdown table of docs/python.md: tokens/s, peak memory, final loss
(mean of the last 20 steps) and each run's largest smoothed loss gap to the
PyTorch eager run of the same seed, next to that run's gap to the other
seed (the run-to-run spread).

    python scripts/train-table.py out/train-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def smooth(losses: list[float], window: int = 20) -> list[float]:
    out = []
    for i in range(len(losses)):
        chunk = losses[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def main(paths: list[str]) -> None:
    runs = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for name, result in data["results"].items():
            runs.append((f"{name} (seed {data['args']['seed']})", data["args"]["seed"], result))
    eager = {seed: r for name, seed, r in runs if name.startswith("torch (")}
    spread = None
    if len(eager) >= 2:
        (_, a), (_, b) = sorted(eager.items())[:2]
        spread = max(abs(x - y) for x, y in zip(smooth(a["losses"]), smooth(b["losses"])))
    print("| run | tokens/s | peak memory | final loss | max gap to eager (smoothed) |")
    print("|---|---|---|---|---|")
    for name, seed, r in runs:
        reference = eager.get(seed)
        gap = "—" if reference is None or reference is r else (
            f"{max(abs(x - y) for x, y in zip(smooth(r['losses']), smooth(reference['losses']))):.4f}"
        )
        memory = "—" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.2f} GiB"
        final = sum(r["losses"][-20:]) / len(r["losses"][-20:])
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {memory} | {final:.4f} | {gap} |")
    if spread is not None:
        print(f"\nrun-to-run spread (eager, seeds {', '.join(str(s) for s in sorted(eager))}): {spread:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
