#!/usr/bin/env sh
# Install what the browser test (tests/assets/test_browser.py) needs: Debian's chromium, driven by the
# playwright Python package (pinned in the [dev] extra) through ``executable_path``.
# We never run ``playwright install``: it downloads its own browser build, which these machines cannot fetch.
set -eu
if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(chromium --version 2>/dev/null || true)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
echo "installed: $(chromium --version 2>/dev/null || true)"
