"""Shared fixtures. Every test writes under tmp_path, never into the checkout's results/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each test in its own directory so the default `results/` lands in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One probe cache for the whole session, never the user's ~/.cache."""
    os.environ["COMMBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def no_gpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        # the marker itself, not `"gpu" in item.keywords`: keywords also hold the names of the
        # enclosing directories, so a checkout in a directory named gpu skipped every test
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


os.environ.setdefault("OMP_NUM_THREADS", "1")
