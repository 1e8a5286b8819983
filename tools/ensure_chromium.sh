#!/usr/bin/env bash
# The browser tests drive Debian's chromium (/usr/bin/chromium) headless; install it when missing.
set -euo pipefail
CHROMIUM=${KRAFT_REPLAY_CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  echo "error: $CHROMIUM not found and apt-get is unavailable: install Chromium and set KRAFT_REPLAY_CHROMIUM" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "error: $CHROMIUM not found: run 'sudo apt-get install -y chromium' (the browser tests need it)" >&2
    exit 2
  fi
fi
echo "installing Debian's chromium for the browser tests ..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
"$CHROMIUM" --version
