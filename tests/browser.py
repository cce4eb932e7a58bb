"""Open HTML pages in a real headless Chromium (over the DevTools protocol, with choreographer,
which kaleido brings) and report what a person would see: console errors, every plot element's
size, legends, axis titles, and a screenshot.

``browser_or_skip()`` gives the browser tiersim's static export would use; with none it skips
the test, unless ``TIERSIM_REQUIRE_BROWSER=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REQUIRE_ENV = "TIERSIM_REQUIRE_BROWSER"

PLOTS_JS = """
(async () => {
  const deadline = Date.now() + 20000;
  const done = () => [...document.querySelectorAll('.js-plotly-plot')].every(el => el._fullLayout);
  while (!(window.Plotly && done()) && Date.now() < deadline) { await new Promise(r => setTimeout(r, 100)); }
  const text = nodes => [...nodes].map(n => n.textContent.trim()).filter(t => t);
  return [...document.querySelectorAll('.js-plotly-plot')].map(el => {
    const box = el.getBoundingClientRect();
    const svg = el.querySelector('svg.main-svg');
    const sbox = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    return {
      width: box.width, height: box.height, svg_width: sbox.width, svg_height: sbox.height,
      rendered: !!el._fullLayout,
      legend_items: text(el.querySelectorAll('.legend .traces .legendtext')),
      x_titles: text(el.querySelectorAll('text[class^="x"][class$="title"]')),
      y_titles: text(el.querySelectorAll('text[class^="y"][class$="title"]')),
      traces: el.querySelectorAll('.trace').length,
    };
  });
})()
"""


@dataclass
class PageReport:
    """What one page showed: console errors, one entry per plot element, a PNG screenshot."""

    errors: list[str] = field(default_factory=list)
    plots: list[dict[str, Any]] = field(default_factory=list)
    screenshot: bytes = b""


def browser_or_skip() -> str:
    """The Chromium/Chrome to test with; skips (or fails under TIERSIM_REQUIRE_BROWSER=1) without one."""
    from tiersim.analysis.figure_export import find_browser

    browser = find_browser()
    if browser is None:
        message = "no Chromium/Chrome (apt-get install chromium-headless-shell)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {message}")
        pytest.skip(message)
    return browser


async def _inspect(browser: str, pages: list[Path], width: int, height: int) -> list[PageReport]:
    import choreographer

    reports = []
    async with choreographer.Browser(path=browser, headless=True) as chrome:
        for page in pages:
            report = PageReport()
            tab = await chrome.create_tab("", width=width, height=height)

            async def console(event: dict[str, Any], report: PageReport = report) -> None:
                params = event["params"]
                if params.get("type") in ("error", "assert"):
                    report.errors.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                                for a in params.get("args", [])))

            async def exception(event: dict[str, Any], report: PageReport = report) -> None:
                details = event["params"]["exceptionDetails"]
                report.errors.append("exception: " + str(details.get("exception", {}).get("description")
                                                         or details.get("text")))

            async def log(event: dict[str, Any], report: PageReport = report) -> None:
                entry = event["params"]["entry"]
                if entry.get("level") == "error":
                    report.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}")

            tab.subscribe("Runtime.consoleAPICalled", console)
            tab.subscribe("Runtime.exceptionThrown", exception)
            tab.subscribe("Log.entryAdded", log)
            for domain in ("Runtime", "Log", "Page"):
                await tab.send_command(f"{domain}.enable")
            loaded = tab.subscribe_once("Page.loadEventFired")
            await tab.send_command("Page.navigate", params={"url": page.resolve().as_uri()})
            await asyncio.wait_for(loaded, 60)
            answer = await tab.send_command("Runtime.evaluate", params={
                "expression": PLOTS_JS, "awaitPromise": True, "returnByValue": True})
            report.plots = answer["result"]["result"]["value"]
            shot = await tab.send_command("Page.captureScreenshot", params={"format": "png"})
            report.screenshot = base64.b64decode(shot["result"]["data"])
            await asyncio.sleep(0.2)  # let late console events arrive
            reports.append(report)
            await chrome.close_tab(tab.target_id)
    return reports


def inspect_pages(browser: str, pages: list[Path], width: int = 1280, height: int = 900) -> list[PageReport]:
    """Load each page in one headless browser session and report on it (see ``PageReport``)."""
    return asyncio.run(_inspect(browser, pages, width, height))


def blank_fraction(png: bytes) -> float:
    """Share of a PNG's pixels that have the colour of its top-left pixel (1.0: blank)."""
    import io

    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return float((image == image[0, 0]).all(axis=2).mean())


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
