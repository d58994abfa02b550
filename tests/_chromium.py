"""Headless Chromium for the browser tests: one way to start it, one way to skip.

Debian's ``chromium`` and ``chromium-driver`` are needed; without them the tests skip,
unless ``OPERATIVE_REQUIRE_CHROMIUM=1`` (CI) makes the absence a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["CHROMEDRIVER", "CHROMIUM", "chromium_or_skip", "open_chromium"]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium_or_skip() -> None:
    """Skip the test (fail it under ``OPERATIVE_REQUIRE_CHROMIUM=1``) without Chromium."""
    if os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK):
        pytest.importorskip("selenium")
        return
    why = f"{CHROMIUM} and {CHROMEDRIVER} (Debian's chromium, chromium-driver) are needed"
    if os.environ.get("OPERATIVE_REQUIRE_CHROMIUM", "") not in ("", "0"):
        pytest.fail(f"Chromium is required (OPERATIVE_REQUIRE_CHROMIUM=1) but {why}")
    pytest.skip(why)


@contextmanager
def open_chromium(
    *, width: int | None = None, height: int | None = None, flags: tuple[str, ...] = ()
) -> Iterator[Any]:
    """A fresh headless Chromium (selenium driver) with a throw-away profile.

    Blocking: drive it from ``trio.to_thread.run_sync``.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="operative-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    size = (f"--window-size={width},{height}",) if width and height else ()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        *size,
        *flags,
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
