#!/usr/bin/env python3
"""Checks every ```coda example in docs/*.md against the real codac binary.

Each ```coda fence must be preceded (on the line just above it) by a marker

    <!-- check: ok -->                    accepted, no diagnostics at all
    <!-- check: ok W0001 -->              accepted, exactly these warning codes
    <!-- check: E0301 -->                 rejected, exactly these codes
    <!-- check: E0302 W0002 -->           rejected, exactly these codes

The set of codes codac prints must equal the listed set. Accepted examples
are also evaluated, block by block, with every run-time dimension bound to 4
(`codac eval --block NAME --dims ... --random`), unless the marker ends with
`noeval` (for instance when the example is meant to fail at run time).

Usage (from the repository root, after `cargo build -p codac`):

    python3 docs/check_examples.py [--codac target/debug/codac] [docs/*.md ...]

Exits 1 if any example does not behave as its marker says.
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

MARKER = re.compile(r"^<!-- check: (.*?) -->\s*$")
CODE = re.compile(r"^(?:error|warning)\[([EW]\d{4})\]", re.MULTILINE)


def examples(path):
    """Yields (line number, marker words, source) for each ```coda fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```coda":
            start = i
            marker = MARKER.match(lines[i - 1]) if i > 0 else None
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            words = marker.group(1).split() if marker else None
            yield start + 1, words, "\n".join(body) + "\n"
        i += 1


def run(codac, *args):
    return subprocess.run([codac, "--color", "never", *args], capture_output=True, text=True)


def check_one(codac, words, source):
    """Returns a list of problems (empty when the example behaves as marked)."""
    if words is None:
        return ["no `<!-- check: ... -->` marker on the line above the fence"]
    noeval = "noeval" in words
    expected = {w for w in words if re.fullmatch(r"[EW]\d{4}", w)}
    want_ok = "ok" in words
    with tempfile.TemporaryDirectory() as tmp:
        file = pathlib.Path(tmp) / "example.coda"
        file.write_text(source, encoding="utf-8")
        checked = run(codac, "check", str(file))
        got = set(CODE.findall(checked.stderr))
        problems = []
        if want_ok and checked.returncode != 0:
            problems.append(f"expected acceptance, got exit {checked.returncode}")
        if not want_ok and checked.returncode != 1:
            problems.append(f"expected rejection (exit 1), got exit {checked.returncode}")
        if got != expected:
            problems.append(f"expected codes {sorted(expected)}, got {sorted(got)}")
        if problems:
            return problems + [checked.stderr]
        if want_ok and not noeval:
            explained = run(codac, "explain", "--json", str(file))
            for block in json.loads(explained.stdout)["blocks"]:
                dims = [f"{d['name']}=4" for d in block["dims"] if d["value"] is None]
                evaluated = run(codac, "eval", str(file), "--block", block["name"],
                                "--dims", ",".join(dims), "--random")
                if evaluated.returncode != 0:
                    problems.append(f"eval of block `{block['name']}` failed: {evaluated.stderr}")
        return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codac", default="target/debug/codac")
    parser.add_argument("files", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    files = args.files or sorted(pathlib.Path(__file__).parent.glob("*.md"))
    failures = 0
    total = 0
    for path in files:
        for line, words, source in examples(path):
            total += 1
            problems = check_one(args.codac, words, source)
            if problems:
                failures += 1
                print(f"{path}:{line}: " + "\n    ".join(problems))
    print(f"{total} examples, {failures} failing")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
