"""Tables of the PyTorch package's GPU results.

With JSON files of the training example (``train_llama.py --json``), prints
a Markdown table: tokens/s, peak memory, final loss (mean of the last 20
steps) and each run's largest smoothed loss gap to the PyTorch eager run of
the same seed (or, without eager runs, to the first run given), with the
eager runs' gap between two seeds (the run-to-run spread).

With ``--doc``, renders the "Latest results" section of docs/python.md from
docs/results/python/ (runs.json says where each file came from) and writes
it between the page's marker comments; ``--check`` fails instead when the
page differs.

    python scripts/train-table.py out/train-*.json
    python scripts/train-table.py --doc [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "python"
DOC = ROOT / "docs" / "python.md"
BEGIN, END = "<!-- results:begin (scripts/train-table.py --doc) -->", "<!-- results:end -->"


def smooth(losses: list[float], window: int = 20) -> list[float]:
    out = []
    for i in range(len(losses)):
        chunk = losses[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(smooth(a), smooth(b)))


def table(paths: list[Path]) -> str:
    runs = []
    for path in paths:
        data = json.loads(path.read_text())
        for name, result in data["results"].items():
            runs.append((f"{name} (seed {data['args']['seed']})", data["args"]["seed"], result))
    eager = {seed: r for name, seed, r in runs if name.startswith("torch (")}
    first = runs[0][2] if runs else None
    against = "eager" if eager else (runs[0][0] if runs else "")
    lines = [
        f"| run | tokens/s | peak memory | final loss | max gap to {against} (smoothed) |",
        "|---|---|---|---|---|",
    ]
    for name, seed, r in runs:
        reference = eager.get(seed) if eager else first
        shown = "—" if reference is None or reference is r else f"{gap(r['losses'], reference['losses']):.4f}"
        memory = "—" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.2f} GiB"
        final = sum(r["losses"][-20:]) / len(r["losses"][-20:])
        lines.append(f"| {name} | {r['tokens_per_s']:,.0f} | {memory} | {final:.4f} | {shown} |")
    if len(eager) >= 2:
        (sa, a), (sb, b) = sorted(eager.items())[:2]
        lines.append("")
        lines.append(f"Run-to-run spread of the eager model (seeds {sa} and {sb}): {gap(a['losses'], b['losses']):.4f}.")
    return "\n".join(lines)


def source_line(runs: list[dict], files: list[str]) -> str:
    for run in runs:
        if set(files) <= set(run["files"]):
            return f"{run['date']}, {run['gpu']}, commit `{run['commit']}`: `{run['command']}`"
    raise SystemExit(f"docs/results/python/runs.json does not say where {files} came from")


def doc_section() -> str:
    runs = json.loads((RESULTS / "runs.json").read_text())["runs"]
    train = ["train-codac.json", "train-torch.json", "train-compile.json", "train-torch-seed1.json"]
    dist = ["dist-single.json", "dist-fsdp.json", "dist-ddp.json"]
    out = [BEGIN, "", "Training example, 1B widths, 8192 tokens a step, 300 steps:", ""]
    out += list(dict.fromkeys(f"* {source_line(runs, [f])}" for f in train))
    out += ["", table([RESULTS / f for f in train]), ""]
    out += ["Two GPUs against one on the same global batch (16384 tokens a step), 100 steps:", ""]
    out += [f"* {source_line(runs, dist)}", "", table([RESULTS / f for f in dist]), ""]
    out += ["Host time per eager call (`bench/python_overhead.py`):", "", f"* {source_line(runs, ['overhead.log'])}", ""]
    log = (RESULTS / "overhead.log").read_text().splitlines()
    start = next(i for i, line in enumerate(log) if line.startswith("call "))
    out += ["| call | host µs/call |", "|---|---|"]
    for line in log[start + 1 :]:
        if line.strip():
            name, value = line.rstrip().rsplit(None, 1)
            out.append(f"| {name.strip()} | {value} |")
    out += ["", END]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--doc", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if not args.doc:
        print(table(args.files))
        return
    text = DOC.read_text()
    begin, end = text.index(BEGIN), text.index(END) + len(END)
    rendered = text[:begin] + doc_section() + text[end:]
    if args.check:
        if rendered != text:
            sys.exit("docs/python.md's results differ from scripts/train-table.py --doc")
        return
    DOC.write_text(rendered)


if __name__ == "__main__":
    main()
