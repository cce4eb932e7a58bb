"""Write plotly figures to files: HTML, or a static PNG, SVG or PDF; the file's extension decides.

HTML pages carry plotly.js in one of three ways (``--plotlyjs``): ``inline`` (the default; one
self-contained file that works offline, about 5 MB), ``directory`` (a ``plotly.min.js`` written
once beside the page, so many pages in one folder share it) or ``cdn`` (a script tag pointing at
the plotly CDN; the page then needs the network).

Static export goes through kaleido (the ``figures`` extra: ``pip install 'tiersim[figures]'``),
which renders the figure in a headless Chromium or Chrome. The browser is, in this order: the
executable named by ``BROWSER_PATH``; the first of ``BROWSER_NAMES`` on ``PATH``; the Chrome that
``kaleido_get_chrome`` downloads. Without one, or without kaleido, writing a static figure is a
``ConfigError``: one line that says how to install what is missing.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeAlias

from tiersim.errors import ConfigError

if TYPE_CHECKING:  # plotly is imported where a page is written: the commands' parsers need none
    import plotly.graph_objects as go

HTML_FORMATS = ("html",)
STATIC_FORMATS = ("png", "svg", "pdf")
FORMATS = HTML_FORMATS + STATIC_FORMATS
PLOTLYJS_MODES = ("inline", "directory", "cdn")
PLOTLYJS_FILE = "plotly.min.js"
BROWSER_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome-stable",
                 "google-chrome", "chrome", "headless_shell")
"""Executable names looked up on PATH, in order (Debian's packages first)."""
INSTALL_BROWSER = ("install one with `apt-get install chromium-headless-shell` (Debian/Ubuntu), or run "
                   "`kaleido_get_chrome` where a network exists, or set BROWSER_PATH to a Chromium or Chrome")
DEFAULT_STATIC_WIDTH = 1200
"""Pixels (PNG) or CSS pixels (SVG, PDF) across a static figure whose layout sets no width."""
DEFAULT_STATIC_HEIGHT = 600

PagePart: TypeAlias = "str | go.Figure"
"""A piece of an HTML page: trusted HTML text, or a figure to embed."""


def figure_format(path: str | Path) -> str:
    """The export format named by the file's extension (``html``, ``png``, ``svg``, ``pdf``)."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise ConfigError(str(path), "path", f"unknown figure format {Path(path).suffix or '(no extension)'!r}; "
                                             f"use one of {', '.join('.' + f for f in FORMATS)}")
    return suffix


def find_browser() -> str | None:
    """The Chromium/Chrome executable static export uses, or None (see the module doc).

    A ``BROWSER_PATH`` that names no executable file is a ``ConfigError`` (it was asked for).
    """
    chosen = os.environ.get("BROWSER_PATH")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise ConfigError("BROWSER_PATH", "", f"{chosen!r} is not an executable file; {INSTALL_BROWSER}")
        return chosen
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    return Chromium.find_browser(skip_local=False, skip_typical=True)  # kaleido_get_chrome's download


def check_target(path: str | Path | None) -> str | None:
    """Check before any work that ``path`` can be written: its format, and for a static format
    kaleido and a browser. Returns the format (None for no path)."""
    if path is None:
        return None
    fmt = figure_format(path)
    if fmt in STATIC_FORMATS:
        _kaleido(path)
        _browser(path)
    return fmt


def _kaleido(path: str | Path) -> ModuleType:
    """The kaleido module, or a ConfigError naming ``path`` when it is not installed."""
    try:
        import kaleido
    except ImportError:
        raise ConfigError(str(path), "path", "static figures need kaleido: pip install 'tiersim[figures]'") from None
    return kaleido


def _browser(path: str | Path) -> str:
    browser = find_browser()
    if browser is None:
        names = ", ".join(BROWSER_NAMES[:3])
        raise ConfigError(
            str(path),
            "path",
            f"static figures need Chromium or Chrome and none was found (BROWSER_PATH, "
            f"then {names}... on PATH); {INSTALL_BROWSER}",
        )
    return browser


def _write_bytes(path: Path, data: bytes | str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
    except OSError as exc:
        raise ConfigError(str(path), "path", f"cannot write file ({exc.strerror})") from None


def write_static(fig: go.Figure, path: str | Path, scale: float = 1.0) -> Path:
    """Render ``fig`` to PNG, SVG or PDF (by extension) in a headless browser.

    The size is the layout's width and height, else ``DEFAULT_STATIC_WIDTH`` x
    ``DEFAULT_STATIC_HEIGHT``; a PNG has ``scale`` times as many pixels each way.
    """
    path = Path(path)
    fmt = figure_format(path)
    if fmt not in STATIC_FORMATS:
        raise ConfigError(str(path), "path", f"not a static format: .{fmt}")
    kaleido = _kaleido(path)
    browser = _browser(path)
    opts = {
        "format": fmt,
        "width": fig.layout.width or DEFAULT_STATIC_WIDTH,
        "height": fig.layout.height or DEFAULT_STATIC_HEIGHT,
        "scale": scale,
    }
    # mathjax=False: the figures use no LaTeX, and kaleido would otherwise fetch MathJax from a CDN
    data = kaleido.calc_fig_sync(fig, opts=opts, kopts={"path": browser, "mathjax": False})
    _write_bytes(path, data)
    return path


def write_html(path: str | Path, parts: Sequence[PagePart], title: str, plotlyjs: str = "inline") -> Path:
    """One HTML page: ``title`` as heading, then each part (HTML text or a figure) in order.

    plotly.js is loaded once, before the first figure, as ``plotlyjs`` says (module doc);
    ``directory`` also writes ``plotly.min.js`` beside the page.
    """
    path = Path(path)
    if plotlyjs not in PLOTLYJS_MODES:
        raise ConfigError(str(path), "plotlyjs", f"expected one of {', '.join(PLOTLYJS_MODES)}, got {plotlyjs!r}")
    include: bool | str = True if plotlyjs == "inline" else plotlyjs  # plotly's include_plotlyjs
    body = [f"<h1>{html.escape(title)}</h1>"]
    for part in parts:
        if isinstance(part, str):
            body.append(part)
        else:
            body.append(part.to_html(full_html=False, include_plotlyjs=include))
            include = False
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body style='font-family: sans-serif'>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    _write_bytes(path, page)
    if plotlyjs == "directory":
        from plotly.offline import get_plotlyjs

        _write_bytes(path.parent / PLOTLYJS_FILE, get_plotlyjs())
    return path


def write_figure(fig: go.Figure, path: str | Path, plotlyjs: str = "inline", title: str | None = None) -> Path:
    """Write one figure as HTML (a page titled ``title``) or PNG/SVG/PDF, by the file's extension."""
    if figure_format(path) in STATIC_FORMATS:
        return write_static(fig, path)
    page_title = title or str(fig.layout.title.text or Path(path).stem)
    return write_html(path, [fig], page_title, plotlyjs)


def add_plot_arguments(parser: argparse.ArgumentParser, what: str, default: str | None = None) -> None:
    """Add ``--plot FILE`` (``what`` says what it draws) and ``--plotlyjs`` to a command's parser."""
    formats = "/".join("." + f for f in FORMATS)
    where = f" (default: {default})" if default else ""
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help=f"write {what}; the extension ({formats}) picks the format{where}. Static "
        f"formats need the figures extra and a Chromium or Chrome (BROWSER_PATH or PATH)",
    )
    parser.add_argument(
        "--plotlyjs",
        choices=PLOTLYJS_MODES,
        default="inline",
        help="how an HTML figure loads plotly.js: inline (self-contained, default), directory "
        f"(one shared {PLOTLYJS_FILE} beside it) or cdn (needs the network)",
    )
