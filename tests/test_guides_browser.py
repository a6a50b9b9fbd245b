"""The exported first_model guide, opened in a real browser (headless Chromium).

``make guides-html`` writes the executed guides as HTML pages (nbconvert) under
``outputs/guides/``. Here the first_model guide is executed and exported the same
way, then loaded from disk in headless Chromium driven over the DevTools
protocol (``websocket-client``; the browser listens on 127.0.0.1 only, with a
fresh profile, and is killed at the end). After treescope's scripts ran, the
model's display must be in the DOM (its ``treescope-container`` root element,
with the class name ``MLP`` and the per-kind counts rendered inside it), no
JavaScript error may reach the console, and a screenshot of the display is saved
as ``outputs/guides/first_model.png``.

Chromium is the Debian package ``chromium`` (``make test`` installs it with
apt-get when it can); without it the test is skipped and says how to install it.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import guide_runner

REPO = Path(__file__).resolve().parent.parent
OUTPUTS = REPO / "outputs" / "guides"
TIMEOUT = 60.0
"""Seconds any one browser step may take."""

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,1000",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    pytest.skip(
        "headless Chromium is not installed: run `apt-get install -y chromium` (Debian; "
        "`make test` does it when it runs as root with apt-get available)."
    )


class DevTools:
    """A minimal DevTools-protocol client for one page: commands and the events seen."""

    def __init__(self, websocket_url: str) -> None:
        websocket = pytest.importorskip("websocket", reason="pip install websocket-client")
        self.socket = websocket.create_connection(
            websocket_url, timeout=TIMEOUT, suppress_origin=True
        )
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Sends a command and returns its result (events met meanwhile are kept)."""
        number = next(self.ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = json.loads(self.socket.recv())
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']}")
                return message.get("result", {})
            self.events.append(message)
        raise TimeoutError(f"no answer to {method} in {TIMEOUT} s")

    def wait_for(self, event: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for seen in self.events:
                if seen.get("method") == event:
                    return seen
            self.events.append(json.loads(self.socket.recv()))
        raise TimeoutError(f"no {event} in {TIMEOUT} s")

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        self.socket.close()


@contextlib.contextmanager
def chromium_page() -> Iterator[DevTools]:
    """A headless Chromium with a fresh profile and one blank page; killed on exit."""
    binary = _chromium()
    with tempfile.TemporaryDirectory(prefix="flaxgraph-chromium-") as profile:
        process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = None
        try:
            port_file = Path(profile, "DevToolsActivePort")
            deadline = time.monotonic() + TIMEOUT
            while not (port_file.exists() and port_file.read_text().strip()):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{binary} did not start (exit code {process.poll()})")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT
            ) as answer:
                targets = json.load(answer)
            page = next(t for t in targets if t["type"] == "page")
            client = DevTools(page["webSocketDebuggerUrl"])
            yield client
        finally:
            if client is not None:
                client.close()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)  # the browser and its helper processes
            process.wait(timeout=TIMEOUT)


# Text of an element and of the shadow roots below it (treescope renders into one).
DEEP_TEXT = """
(() => {
  const text = (node) => {
    let out = node.shadowRoot ? text(node.shadowRoot) : "";
    for (const child of node.childNodes) {
      out += child.nodeType === Node.TEXT_NODE ? child.textContent : text(child);
    }
    return out;
  };
  return Array.from(document.querySelectorAll("treescope-container")).map(text);
})()
"""


def rendered_treescope(page: Any, count: int) -> list[str]:
    """The text of each of the page's ``count`` treescope containers once rendered:
    treescope inserts a rendering (decompressed by its scripts) once its container is
    scrolled into view, so each container is shown in turn until none is loading."""
    deadline = time.monotonic() + TIMEOUT
    for index in range(count):
        page.evaluate(f"document.querySelectorAll('treescope-container')[{index}].scrollIntoView()")
        while "(Loading...)" in page.evaluate(DEEP_TEXT)[index]:
            assert time.monotonic() < deadline, "treescope renderings never loaded"
            time.sleep(0.1)
    return page.evaluate(DEEP_TEXT)


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            errors.append(details.get("exception", {}).get("description") or details["text"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(params["entry"]["text"])
    return errors


def _export_first_model() -> Path:
    runner = guide_runner()
    _, notebook = runner.run_guide(REPO / "guides" / "first_model.md")
    return runner.export_html(notebook, OUTPUTS / "first_model.html")


def test_first_model_guide_renders_its_model_in_chromium() -> None:
    _chromium()  # skip before the guide runs when there is no browser
    page_path = _export_first_model()
    with chromium_page() as page:
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", url=page_path.as_uri())
        page.wait_for("Page.loadEventFired")
        # treescope inserts a rendering (decompressed by its scripts) once its container
        # is scrolled into view: show each container in turn until all are rendered.
        count = page.evaluate("document.querySelectorAll('treescope-container').length")
        rendered = rendered_treescope(page, count)
        models = [text for text in rendered if "MLP(" in text]
        assert rendered, "no treescope-container element in the page"
        assert models, f"no rendered treescope display shows MLP(; texts: {rendered}"
        (model,) = models
        assert "Param: 259" in model and "BatchStat: 64" in model
        assert "linear1=" in model and "Linear(" in model
        index = rendered.index(model)
        page.evaluate(
            f"document.querySelectorAll('treescope-container')[{index}].scrollIntoView();"
            "window.scrollBy(0, -40)"
        )
        time.sleep(0.5)
        shot = page.send("Page.captureScreenshot", format="png")
        screenshot = OUTPUTS / "first_model.png"
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        errors = _console_errors(page.events)
    assert not errors, f"JavaScript errors in the console: {errors}"
    assert screenshot.stat().st_size > 1000


def test_a_javascript_error_is_seen(tmp_path: Path) -> None:
    # The console check above can fail: a page whose script throws is caught.
    page_path = tmp_path / "broken.html"
    page_path.write_text(
        "<html><body><p>x</p><script>throw new Error('boom in page')</script>"
        "<script>console.error('logged error')</script></body></html>",
        encoding="utf-8",
    )
    with chromium_page() as page:
        for domain in ("Runtime", "Log", "Page"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", url=page_path.as_uri())
        page.wait_for("Page.loadEventFired")
        assert page.evaluate("document.querySelector('p').textContent") == "x"
        errors = _console_errors(page.events)
    assert any("boom in page" in e for e in errors), errors
    assert any("logged error" in e for e in errors), errors
