"""The docs' "Latest results" tables equal what scripts/render-results.py
renders from docs/results/ (run that script after changing a results file)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def renderer():
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "scripts" / "render-results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDER = renderer()


@pytest.mark.parametrize("name", sorted(RENDER.TABLES))
def test_results_table_is_rendered(name):
    path, committed, rendered = RENDER.rendered(name)
    assert committed == rendered, f"{path.relative_to(ROOT)}: stale table; run python3 scripts/render-results.py"


def test_rendering_is_deterministic():
    for name in RENDER.TABLES:
        _, _, once = RENDER.rendered(name)
        _, results, _ = RENDER.TABLES[name]
        data = json.loads((ROOT / results).read_text(encoding="utf-8"))
        assert RENDER.render_page(once, name, data) == once
