"""docs/testing.md, "Crash-test your agent": it shows examples/crash_test_agent.py as it
is, and its pytest sample passes against that example's agent."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"
EXAMPLE = ROOT / "examples" / "crash_test_agent.py"


def _section_samples() -> list[str]:
    text = PAGE.read_text()
    section = text[text.index("\n## Crash-test your agent\n") :]
    following = section.find("\n## ", 1)
    section = section if following == -1 else section[:following]
    return re.findall(r"^```py\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)


def test_the_section_shows_the_example_as_it_is() -> None:
    samples = _section_samples()
    assert len(samples) == 2
    assert samples[-1] == EXAMPLE.read_text()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the crash kit needs pidfds")
def test_the_pytest_sample_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    namespace: dict[str, Any] = {"__name__": "docs.testing.crash"}
    exec(compile(_section_samples()[0], "docs/testing.md crash sample", "exec"), namespace)
    namespace["test_the_agent_survives_crashes"]()
