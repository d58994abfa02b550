"""The docs' front page and reference pages agree with the site that exists."""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.utils.yaml import yaml_load

import operative

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"

# Public namespaces documented by a guide page instead of a reference page.
NO_REFERENCE_PAGE = {"operative.cli": "the command, documented on docs/cli.md"}


def _nav_pages(entries: Any) -> Iterator[str]:
    for entry in entries:
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            for value in entry.values():
                if isinstance(value, str):
                    yield value
                else:
                    yield from _nav_pages(value)


def _nav() -> list[str]:
    with (ROOT / "mkdocs.yml").open() as config_file:
        config = yaml_load(config_file)  # mkdocs' own reader (its !ENV and !relative tags)
    return list(_nav_pages(config["nav"]))


def _index_links() -> set[str]:
    text = (DOCS / "index.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return {target.split("#")[0] for target in targets if "://" not in target}


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    """mkdocs.yml's nav lists exactly the pages under docs/."""
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    nav = _nav()
    assert len(nav) == len(set(nav)), "a page is listed twice in the nav"
    assert sorted(nav) == pages


def test_the_index_links_every_page_and_only_pages_that_exist() -> None:
    """docs/index.md names no missing page and misses none: every page of the nav outside
    the reference, and the reference's own index."""
    links = _index_links()
    missing = sorted(link for link in links if not (DOCS / link).is_file())
    assert not missing, f"docs/index.md links to pages that do not exist: {missing}"
    expected = {page for page in _nav() if not page.startswith("reference/")}
    expected = (expected - {"index.md"}) | {"reference/index.md"}
    unlinked = sorted(expected - links)
    assert not unlinked, f"docs/index.md does not link to: {unlinked}"


def test_the_index_describes_what_exists() -> None:
    """No feature that exists is announced as coming; every provider adapter is named."""
    text = (DOCS / "index.md").read_text()
    for stale in ("comes next", "planned", "coming soon"):
        assert stale not in text
    for provider in ("Anthropic", "OpenAI", "Gemini", "Ollama"):
        assert provider in text


def _public_namespaces() -> list[str]:
    found = pkgutil.walk_packages(operative.__path__, "operative.")
    names = [m.name for m in found if not any(p.startswith("_") for p in m.name.split("."))]
    return sorted(["operative", *names])


def _page_module(page: Path) -> str:
    if page.stem == "index":
        return "operative"
    return "operative." + page.stem.replace("-", ".")


def test_every_public_namespace_has_a_reference_page() -> None:
    """Each importable public module with an ``__all__`` has its page under docs/reference."""
    documented = {_page_module(page) for page in REFERENCE.glob("*.md")}
    public = {
        name for name in _public_namespaces() if hasattr(importlib.import_module(name), "__all__")
    }
    assert sorted(public - documented - set(NO_REFERENCE_PAGE)) == []
    assert sorted(documented - public) == []


def test_every_reference_page_opens_with_an_introduction() -> None:
    """Between its title and the generated members, each reference page says in one
    paragraph what the namespace is for, and links to a guide page that exists."""
    for page in sorted(REFERENCE.glob("*.md")):
        text = page.read_text()
        title, _, rest = text.partition("\n")
        assert title == f"# `{_page_module(page)}`", page.name
        intro = rest[: rest.index(":::")].strip()
        paragraphs = [p for p in intro.split("\n\n") if p.strip()]
        assert len(paragraphs) == 1, f"{page.name}: one introductory paragraph"
        words = intro.split()
        assert len(words) >= 30, f"{page.name}: the introduction is {len(words)} words"
        assert not re.match(r"`[\w.]+` is the module", intro), page.name
        guides = re.findall(r"\]\(\.\./([\w-]+\.md)(?:#[\w-]+)?\)", intro)
        assert guides, f"{page.name}: the introduction links to no guide page"
        for guide in guides:
            assert (DOCS / guide).is_file(), f"{page.name} links to a missing {guide}"
