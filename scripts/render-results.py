#!/usr/bin/env python3
"""Renders the "Latest results" tables of the docs from docs/results/.

Each page has one table between two marker comments:

    <!-- results:begin NAME -->
    ...generated...
    <!-- results:end NAME -->

and NAME picks the results file and the renderer below. The output depends
only on the JSON files, so rendering twice gives the same bytes.

    python3 scripts/render-results.py          # rewrite the tables in place
    python3 scripts/render-results.py --check  # exit 1 if a table is stale

Standard library only.
"""

import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ms(x):
    return "—" if x is None else f"{x:.3f}"


def ratio(x):
    return "—" if x is None else f"{x:.2f}×"


def div(a, b):
    return None if a is None or b is None else a / b


def run_line(run):
    parts = [f"{run['date']}", f"commit `{run['commit']}`", run["gpu"]]
    if "dims" in run:
        parts.append(f"{run['dims']}, median of {run['iters']} runs")
    return f"Run: {', '.join(parts)}; `{run['command']}`."


def render_bench(data):
    lines = [
        run_line(data["run"]),
        "",
        "| case | codac (ms) | bare GEMMs (ms) | codac / bare | eager (ms) | torch.compile (ms) | torch.compile / codac | bare GEMMs against cuBLAS (ms), side by side |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        over_bare = r.get("codac_over_bare", div(r["codac_ms"], r["bare_gemm_ms"]))
        c = r.get("cublas")
        vendor = "—"
        if c:
            speed = c["cublas_ms"] / c["bare_ms"]
            vendor = f"{ms(c['bare_ms'])} against {ms(c['cublas_ms'])} ({ratio(speed)} speed, {c['gemms']})"
        lines.append(
            f"| `{r['case']}`: {r['what']} | {ms(r['codac_ms'])} | {ms(r['bare_gemm_ms'])} | {ratio(over_bare)} "
            f"| {ms(r.get('eager_ms'))} | {ms(r.get('torch_compile_ms'))} "
            f"| {ratio(div(r.get('torch_compile_ms'), r['codac_ms']))} | {vendor} |"
        )
    lines += ["", f"Source: {data['source']}."]
    return lines


def render_gpu_test(data):
    lines = [
        run_line(data["run"]),
        "",
        "| parts | what runs | outputs pass | failed runs | time |",
        "|---|---|---|---|---|",
    ]
    for p in data["parts"]:
        lines.append(
            f"| `{p['parts']}` | {p['what']} | {p['outputs_pass']} | {p['failed_runs']} | {p['seconds']} s |"
        )
    lines += ["", f"Source: {data['source']}."]
    return lines


def render_steps(data):
    """The training-step cases of compare.py's JSON (`compare.json` of one
    `scripts/bench.sh` run) with the run it came from."""
    lines = [
        run_line(data["run"]),
        "",
        "| step (forward + backward) | codac (ms) | torch.compile (ms) | eager (ms) | cuBLAS's 12 GEMMs (ms) "
        "| torch.compile / codac | eager / codac | codac / its bare GEMMs | codac's forward + backward (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        if not r["case"].startswith("step"):
            continue
        c = r["codac"]
        lines.append(
            f"| `{r['case']}` ({r['model']}, M = {r['m']}) | {ms(c['ms'])} | {ms(r.get('compile_ms'))} "
            f"| {ms(r.get('eager_ms'))} | {ms(r.get('cublas_ms'))} | {ratio(div(r.get('compile_ms'), c['ms']))} "
            f"| {ratio(div(r.get('eager_ms'), c['ms']))} | {ratio(c['over_bare'])} "
            f"| {ms(c['forward_ms'])} + {ms(c['backward_ms'])} |"
        )
    return lines


def render_layers(data):
    """compare_layers.py's JSON (`layers.json` of one `BENCH_SET=layers
    scripts/bench.sh` run) with the run it came from."""
    lines = [
        run_line(data["run"]),
        "",
        "| layer | pass | codac (ms) | its bare GEMMs (ms) | codac / bare | torch.compile (ms) | eager (ms) "
        "| cuBLAS's GEMMs (ms) | torch.compile / codac |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        c = r.get("codac") or {}
        lines.append(
            f"| {r['layer']} | {r['pass']} | {ms(c.get('ms'))} | {ms(c.get('bare_ms'))} "
            f"| {ratio(div(c.get('ms'), c.get('bare_ms')))} | {ms(r.get('compile_ms'))} | {ms(r.get('eager_ms'))} "
            f"| {ms(r.get('cublas_ms'))} | {ratio(div(r.get('compile_ms'), c.get('ms')))} |"
        )
    return lines


# NAME -> (page, results file, renderer)
TABLES = {
    "bench": ("docs/benchmarks.md", "docs/results/bench.json", render_bench),
    "bench-step": ("docs/benchmarks.md", "docs/results/bench-step.json", render_steps),
    "bench-layers": ("docs/benchmarks.md", "docs/results/bench-layers.json", render_layers),
    "bench-layers-more": ("docs/benchmarks.md", "docs/results/bench-layers-more.json", render_layers),
    "gpu-test": ("docs/gpu-results.md", "docs/results/gpu-test.json", render_gpu_test),
}


def render_page(text, name, results):
    """`text` with the table NAME replaced by the rendering of `results`."""
    _, _, render = TABLES[name]
    begin, end = f"<!-- results:begin {name} -->", f"<!-- results:end {name} -->"
    head, sep, rest = text.partition(begin)
    if not sep or end not in rest:
        raise SystemExit(f"error: markers for {name!r} not found")
    _, _, tail = rest.partition(end)
    body = "\n".join(render(results))
    return f"{head}{begin}\n{body}\n{end}{tail}"


def rendered(name):
    """(page path, current text, rendered text) of table NAME."""
    page, results, _ = TABLES[name]
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    data = json.loads((ROOT / results).read_text(encoding="utf-8"))
    return path, text, render_page(text, name, data)


def main(argv):
    check = "--check" in argv
    stale = False
    for name in sorted(TABLES):
        path, old, new = rendered(name)
        if old == new:
            continue
        if check:
            stale = True
            rel = str(path.relative_to(ROOT))
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, rel + " (rendered)"))
        else:
            path.write_text(new, encoding="utf-8")
            print(f"rendered {path.relative_to(ROOT)}")
    if stale:
        print("error: stale results tables; run python3 scripts/render-results.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
