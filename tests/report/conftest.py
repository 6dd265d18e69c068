"""Shared by the figure tests: the figures a plot module hands to its writer, kept for inspection."""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.fixture()
def capture_figures(monkeypatch):
    """``capture(module)`` -> a list that collects every figure ``module._save`` writes (the file is still written)."""
    def capture(module: ModuleType) -> list:
        figures: list = []
        original = module._save
        monkeypatch.setattr(module, "_save", lambda fig, path: figures.append(fig) or original(fig, path))
        return figures
    return capture
