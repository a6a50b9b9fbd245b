"""The built documentation site (``make docs`` -> ``outputs/docs/``), checked as a reader
meets it.

* **Links**: every internal link and resource of every page (``href``, ``src``, with
  their ``#fragment``) reaches a file of the site and an element with that id.
* **In a browser** (headless Chromium, as ``tests/test_guides_browser.py``; the site is
  served on 127.0.0.1 on a free port, and browser and server are stopped at the end):
  the index, the API page of ``split`` and the first guide load without console
  errors, the guide's treescope rendering of its model is drawn, and the search page
  finds ``split_rngs``.

``make docs`` builds the site and then runs this file; without a built site the tests
are skipped (they say how to build it).
"""

from __future__ import annotations

import contextlib
import functools
import html.parser
import http.server
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_guides_browser import (
    TIMEOUT,
    _chromium,
    _console_errors,
    chromium_page,
    rendered_treescope,
)

REPO = Path(__file__).resolve().parent.parent
SITE = REPO / "outputs" / "docs"


def _site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.skip("the documentation site is not built: run `make docs`")
    return SITE


class _Page(html.parser.HTMLParser):
    """The links, resources and element ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link", "area")) or (
                name == "src" and tag in ("img", "script", "iframe", "source")
            ):
                self.links.append(value)


@functools.cache
def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """Every internal link of the site's pages that reaches no file or no element."""
    broken = []
    for page_path in sorted(site.rglob("*.html")):
        if "_static" in page_path.relative_to(site).parts:
            continue  # the theme's template fragments, not pages
        for link in _parse(page_path).links:
            parts = urllib.parse.urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue  # external: not checked offline
            path = urllib.parse.unquote(parts.path)
            target = (page_path.parent / path).resolve() if path else page_path
            if target.is_dir():
                target = target / "index.html"
            where = f"{page_path.relative_to(site)}: {link}"
            if not target.is_file():
                broken.append(f"{where} (no file {target.relative_to(site.resolve())})")
            elif parts.fragment and target.suffix == ".html":
                fragment = urllib.parse.unquote(parts.fragment)
                if fragment not in _parse(target).ids:
                    broken.append(f"{where} (no element with id {fragment!r})")
    return broken


def test_no_broken_internal_link() -> None:
    site = _site()
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20, f"only {len(pages)} pages in {site}"
    broken = broken_links(site)
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:50])


def test_the_link_checker_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text(
        '<a href="other.html#there">x</a><a href="missing.html">y</a>'
        '<a href="#here" id="here">z</a><a href="https://example.org/">w</a>',
        encoding="utf-8",
    )
    (tmp_path / "other.html").write_text('<p id="elsewhere">', encoding="utf-8")
    broken = broken_links(tmp_path)
    assert len(broken) == 2
    assert "no element with id 'there'" in broken[0] and "no file missing.html" in broken[1]


# -- in a browser ----------------------------------------------------------------------------


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serves ``site`` on 127.0.0.1 on a free port; yields the base URL; stops the server."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=TIMEOUT)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _open(page, url: str) -> None:  # type: ignore[no-untyped-def]
    page.events.clear()
    page.send("Page.navigate", url=url)
    page.wait_for("Page.loadEventFired")


def _wait(page, expression: str, what: str) -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        value = page.evaluate(expression)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {TIMEOUT} s")


def test_the_site_in_chromium() -> None:
    site = _site()
    _chromium()
    with serve(site) as base, chromium_page() as page:
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        errors: dict[str, list[str]] = {}

        _open(page, base + "index.html")
        assert "flaxgraph" in page.evaluate("document.title")
        errors["index"] = _console_errors(page.events)

        _open(page, base + "api/graph.html#flaxgraph.split")
        entry = page.evaluate(
            "(() => { const e = document.getElementById('flaxgraph.split');"
            " return e ? e.parentElement.textContent : ''; })()"
        )
        assert "Splits a graph into its structure and its state" in entry, entry[:500]
        assert "\\" not in entry.split("Example")[0], entry[:800]  # no stray escapes
        errors["api/graph"] = _console_errors(page.events)

        _open(page, base + "guides/first_model.html")
        count = _wait(
            page, "document.querySelectorAll('treescope-container').length", "treescope output"
        )
        rendered = rendered_treescope(page, int(count))
        assert any("MLP(" in text and "Param:" in text for text in rendered), rendered[:3]
        errors["guides/first_model"] = _console_errors(page.events)

        _open(page, base + "search.html?q=split_rngs")
        found = _wait(
            page,
            "Array.from(document.querySelectorAll('#search-results a'))"
            ".map(a => a.getAttribute('href')).filter(h => h.includes('split_rngs'))",
            "the search for split_rngs",
        )
        assert any("flaxgraph.split_rngs" in str(href) for href in found), found
        errors["search"] = _console_errors(page.events)

    errors = {page_name: e for page_name, e in errors.items() if e}
    assert not errors, f"JavaScript errors in the console: {errors}"
