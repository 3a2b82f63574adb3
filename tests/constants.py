"""Constants the tests share, each defined once (import them as ``from tests.constants import ...``)."""

from __future__ import annotations

# The inherited retention policy (prune by score and age, archive by confidence alone), for the tests of
# those mechanics; the default `safe` policy lets go only of what is held elsewhere (test_retention.py).
SEED_POLICY = {"ENGRAM_RETENTION_POLICY": "seed"}

# Debian's chromium, driven by Playwright through executable_path (no browser is ever downloaded), headless
# and with nothing that reaches the network on its own.
CHROMIUM = "/usr/bin/chromium"
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
