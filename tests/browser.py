"""Debian's chromium as the page's browser tests and its screenshots (docs/page/screenshots.py)
drive it: one set of flags, one pair of viewports."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# headless, and nothing of its own on the network: no updates, no sync, no QUIC probes
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LAPTOP, PHONE = {"width": 1366, "height": 860}, {"width": 390, "height": 844}
