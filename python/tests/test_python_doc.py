"""docs/python.md's results section is what scripts/train-table.py renders
from the committed result files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_results_section_is_rendered_from_the_result_files() -> None:
    command = [sys.executable, str(ROOT / "scripts" / "train-table.py"), "--doc", "--check"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
