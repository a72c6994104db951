#!/usr/bin/env bash
# What `make test` needs from the system besides Python packages, installed (as root, with apt-get) or named.
#   tests/system_packages.sh        check; as root with apt-get, install what is missing; else fail naming it
# The browser suite drives Debian's Chromium (tests/browser/), the PostgreSQL tests start their own server
# (tests/helpers/postgres_server.py), and grading as root isolates every kernel with bubblewrap
# (autograder/kernel/sandbox.py). `MHA_ALLOW_SKIPS=1 make test` skips this check and lets those tests skip.
# CHROMIUM, PG_BINARIES and AS_ROOT may be set to check elsewhere (tests/unit/test_system_packages.py does).
set -uo pipefail
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
PG_BINARIES="${PG_BINARIES:-/usr/lib/postgresql}"
AS_ROOT="${AS_ROOT:-$( [ "$(id -u)" = 0 ] && echo yes || echo no )}"

missing=()
[ -x "$CHROMIUM" ] || missing+=("chromium" "fonts-liberation")
command -v initdb >/dev/null 2>&1 || compgen -G "$PG_BINARIES/*/bin/initdb" >/dev/null || missing+=("postgresql")
command -v bwrap >/dev/null 2>&1 || missing+=("bubblewrap")
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$AS_ROOT" = yes ] && command -v apt-get >/dev/null 2>&1; then
  echo "make test: installing ${missing[*]} (Debian packages the browser, PostgreSQL and sandbox tests need)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { echo "make test: apt-get could not install ${missing[*]}" >&2; exit 1; }
  exit 0
fi
echo "make test needs the Debian packages ${missing[*]}, which are not installed, and cannot install them" \
     "(it installs them itself when run as root on a machine with apt-get). Install them with:" >&2
echo "    sudo apt-get install --no-install-recommends ${missing[*]}" >&2
echo "or run MHA_ALLOW_SKIPS=1 make test to let the tests that need them skip (not the full proof)." >&2
exit 1
