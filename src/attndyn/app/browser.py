"""Headless Chromium through Playwright's Python API, for the report's preview (edge, optional).

Contract
--------
``find_chromium()`` returns the path of a system Chromium (``$ATTNDYN_CHROMIUM``, then
``chromium``, ``chromium-browser``, ``google-chrome`` on PATH) or None. Playwright is pointed at
it with ``executable_path``: it never downloads a browser. ``screenshot(page, png, size)``
writes a PNG of the first screen of a local HTML file (written atomically) and returns its path,
or raises :class:`BrowserUnavailable` saying what is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from attndyn.workflow.files import atomic_write_bytes

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


class BrowserUnavailable(RuntimeError):
    """No usable Chromium or no Playwright; the message is one line."""


def find_chromium() -> str | None:
    explicit = os.environ.get("ATTNDYN_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def launch(playwright: Any) -> Any:
    """A headless Chromium browser from a started ``sync_playwright()`` context."""
    path = find_chromium()
    if path is None:
        raise BrowserUnavailable("no Chromium found (install the Debian package 'chromium' or set ATTNDYN_CHROMIUM)")
    # --no-sandbox: containers and CI often run as root, where Chromium's sandbox refuses to start
    return playwright.chromium.launch(executable_path=path, headless=True, args=["--no-sandbox"])


def screenshot(page: str | Path, png: str | Path, *, size: tuple[int, int] = (1400, 900)) -> Path:
    """Render ``page`` (a local HTML file) at ``size`` and write its first screen as ``png``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise BrowserUnavailable("playwright is not installed (pip install playwright)") from None
    if find_chromium() is None:  # before starting Playwright: say what is missing, start nothing
        raise BrowserUnavailable("no Chromium found (install the Debian package 'chromium' or set ATTNDYN_CHROMIUM)")
    page = Path(page).resolve()
    with sync_playwright() as p:
        browser = launch(p)
        try:
            tab = browser.new_page(viewport={"width": size[0], "height": size[1]})
            tab.goto(page.as_uri())
            tab.wait_for_load_state("load")
            data = tab.screenshot(full_page=False)
        finally:
            browser.close()
    return atomic_write_bytes(png, data)
