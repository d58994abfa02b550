"""The docs site as a reader meets it: built with ``mkdocs build --strict``, then key
pages opened in headless Chromium at 1200 px wide, screenshotted and checked.

The site is built once per module into a temporary directory, or taken from
``OPERATIVE_DOCS_SITE`` (``nox -s docs`` builds it and points there). Screenshots go
to ``OPERATIVE_DOCS_SCREENSHOTS`` when it is set. Without Debian's ``chromium`` and
``chromium-driver`` the browser test skips, unless ``OPERATIVE_REQUIRE_CHROMIUM=1``
makes that a failure.
"""

from __future__ import annotations

import mimetypes
import os
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import trio
from _chromium import open_chromium

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 1200, 900

# The key pages: the front page, the tutorial, and a reference page (mkdocstrings).
PAGES = {"index": "", "tutorial": "tutorial/", "reference-tools": "reference/tools/"}

# Pygments' token classes for Python keywords, names and strings.
PYGMENTS_CLASSES = ("k", "kn", "kd", "nf", "nc", "s", "s1", "s2", "sd", "mi", "c1", "o")

# Building the site and loading it in Chromium takes about half a minute: .ci/run's
# second step (``heavy``), beside the real servers.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site: ``OPERATIVE_DOCS_SITE``, or a fresh ``mkdocs build --strict``."""
    given = os.environ.get("OPERATIVE_DOCS_SITE")
    if given:
        path = Path(given)
        assert (path / "index.html").is_file(), f"OPERATIVE_DOCS_SITE={given} holds no site"
        return path.resolve()
    path = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return path.resolve()


def test_code_is_highlighted_when_the_site_is_built(site: Path) -> None:
    """Code blocks carry Pygments' token classes in the HTML itself, and no page loads a
    script, style sheet or font from another host (no CDN highlighter)."""
    for name, page in PAGES.items():
        html = (site / page / "index.html").read_text()
        classes = set(re.findall(r'<span class="(\w+)">', html))
        assert classes & set(PYGMENTS_CLASSES), f"{name}: no highlighted code"
        assert "highlight.js" not in html
        assert "hljs" not in html
        external = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?://[^"]+)"', html)
        assert external == [], f"{name} loads {external}"


# -- a static file server on 127.0.0.1, as a Trio task -------------------------------------


async def _serve_file(stream: trio.SocketStream, site: Path) -> None:
    """Answer one GET with a file of ``site`` (a resolved path), then close."""
    request = b""
    while b"\r\n\r\n" not in request and len(request) < 65536:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        request += chunk
    target = request.split(b" ", 2)[1].decode("latin-1")
    relative = urllib.parse.unquote(urllib.parse.urlsplit(target).path).lstrip("/")
    path = await trio.Path(site / relative).resolve()
    if await path.is_dir():
        path = path / "index.html"
    if Path(path).is_relative_to(site) and await path.is_file():
        body = await path.read_bytes()
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n"
    else:
        body, head = b"not found", "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    try:
        await stream.send_all(head.encode() + body)
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


# -- what is checked on each page ---------------------------------------------------------

_RECT = "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, r.height];"


def _header_is_one_row(driver: Any, name: str) -> None:
    """The header holds one row: every item shown in it lies within one bar's height,
    and the page has no horizontal overflow."""
    from selenium.webdriver.common.by import By

    header = driver.find_element(By.CSS_SELECTOR, "header.md-header")
    top, bottom, height = driver.execute_script(_RECT, header)
    assert height <= 64, f"{name}: the header is {height}px tall (more than one row)"
    items = header.find_elements(
        By.CSS_SELECTOR, ".md-header__inner > *, .md-header__option, .md-search"
    )
    shown = [item for item in items if item.is_displayed()]
    assert len(shown) >= 3, f"{name}: the header shows {len(shown)} items"
    for item in shown:
        item_top, item_bottom, _ = driver.execute_script(_RECT, item)
        where = f"{name}: {item.get_attribute('class')} sits outside the header's row"
        assert top - 1 <= item_top, where
        assert item_bottom <= bottom + 1, where
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;"
    )
    assert overflow <= 0, f"{name}: the page is {overflow}px wider than the window"


def _tabs_are_one_row(driver: Any, name: str) -> None:
    """Where the section tabs show (wider windows), they fit on one row."""
    from selenium.webdriver.common.by import By

    tabs = [t for t in driver.find_elements(By.CSS_SELECTOR, ".md-tabs__item") if t.is_displayed()]
    assert len(tabs) >= 4, f"{name}: {len(tabs)} section tabs show"
    tops = {round(driver.execute_script(_RECT, tab)[0]) for tab in tabs}
    assert len(tops) == 1, f"{name}: the tabs take {len(tops)} rows"


def _code_is_coloured(driver: Any, name: str) -> None:
    """Code blocks have Pygments' spans, coloured apart from plain code, and a copy button."""
    from selenium.webdriver.common.by import By

    selector = ", ".join(f".highlight code span.{c}" for c in PYGMENTS_CLASSES)
    spans = driver.find_elements(By.CSS_SELECTOR, selector)
    assert len(spans) >= 5, f"{name}: {len(spans)} highlighted tokens"
    colours = driver.execute_script(
        "const code = arguments[0].closest('code');"
        "return [getComputedStyle(code).color,"
        " ...arguments[1].map(s => getComputedStyle(s).color)];",
        spans[0],
        spans[:40],
    )
    plain, tokens = colours[0], set(colours[1:])
    assert tokens - {plain}, f"{name}: highlighted tokens are all the plain colour {plain}"
    buttons = driver.find_elements(
        By.CSS_SELECTOR,
        ".highlight button[data-md-type='copy'], .highlight button.md-clipboard",
    )
    assert buttons, f"{name}: code blocks have no copy button"


def _dark_mode_toggles(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    scheme = "return document.body.getAttribute('data-md-color-scheme');"
    assert driver.execute_script(scheme) == "default"
    driver.find_element(By.CSS_SELECTOR, "label[for='__palette_1']").click()
    assert driver.execute_script(scheme) == "slate"
    driver.find_element(By.CSS_SELECTOR, "label[for='__palette_0']").click()
    assert driver.execute_script(scheme) == "default"


def _search_finds(driver: Any, query: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.CSS_SELECTOR, "input.md-search__input").send_keys(query)
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"),
        f"searching for {query!r} found nothing",
    )


def _look_at_pages(url: str, shots: Path) -> None:
    with open_chromium(width=WIDTH, height=HEIGHT, flags=("--hide-scrollbars",)) as driver:
        _look(driver, url, shots)


def _look(driver: Any, url: str, shots: Path) -> None:
    assert driver.execute_script("return window.innerWidth;") == WIDTH
    for name, page in PAGES.items():
        driver.get(f"{url}/{page}")
        _header_is_one_row(driver, name)
        _code_is_coloured(driver, name)
        shot = shots / f"{name}-{WIDTH}.png"
        assert driver.save_screenshot(str(shot)), shot
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 20_000, f"{shot} looks blank"
    _dark_mode_toggles(driver)
    _search_finds(driver, "needs_approval")
    # Wide enough for the section tabs: they too are one row.
    driver.set_window_size(1600, HEIGHT)
    driver.get(f"{url}/tutorial/")
    _header_is_one_row(driver, "tutorial at 1600px")
    _tabs_are_one_row(driver, "tutorial at 1600px")
    driver.save_screenshot(str(shots / "tutorial-1600.png"))


async def test_key_pages_in_chromium_at_1200px(site: Path, tmp_path: Path, chromium: None) -> None:
    """At 1200 px: the header is one row, code is coloured with copy buttons, screenshots
    are taken; the dark mode toggle and the search work; wider, the tabs are one row."""
    shots = Path(os.environ.get("OPERATIVE_DOCS_SCREENSHOTS") or tmp_path)
    await trio.Path(shots).mkdir(parents=True, exist_ok=True)

    async def serve(stream: trio.SocketStream) -> None:
        await _serve_file(stream, site)

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(trio.serve_listeners, serve, listeners)
        port = listeners[0].socket.getsockname()[1]
        await trio.to_thread.run_sync(_look_at_pages, f"http://127.0.0.1:{port}", shots)
        nursery.cancel_scope.cancel()
    for name in PAGES:
        assert (shots / f"{name}-{WIDTH}.png").is_file()
