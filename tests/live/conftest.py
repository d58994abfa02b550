"""Live tests talk to real provider APIs; the default ``pytest`` run leaves them out.

They run with ``-m live`` (``python -m pytest -m live tests/live``) or with
``OPERATIVE_LIVE=1`` in the environment; otherwise every test in this directory is
deselected (not skipped), so an offline run reports nothing from here. Once selected, a
provider whose key (or server) is not configured is skipped with a reason naming the
environment variable to set.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def live_requested(config: pytest.Config) -> bool:
    """``OPERATIVE_LIVE`` is set (and not ``0``), or ``-m`` selects the ``live`` marker."""
    if os.environ.get("OPERATIVE_LIVE", "0") not in ("", "0"):
        return True
    expression = str(config.getoption("markexpr", "") or "")
    return re.search(r"(?<!not )\blive\b", expression) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if live_requested(config):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        (left_out if HERE in item.path.parents else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
