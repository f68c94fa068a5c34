"""Shared pytest configuration: the ``gpu`` marker."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with 'skipped: no GPU' without one")
