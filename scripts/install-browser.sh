#!/bin/sh
# Installs headless Chromium from Debian's packages when no Chromium is
# found, for the browser test of 'azlease ui' (internal/uitest, 'make test').
# Idempotent: prints nothing and changes nothing when one is there. Needs
# root and apt-get (Debian, Ubuntu).
#
#	install-browser.sh                 install, or fail saying why not
#	install-browser.sh --if-possible   the same where it can (root with apt-get);
#	                                   elsewhere a note, and success, unless CI=true
#
# The test looks for the same binaries, in this order, or the one named by
# $AZLEASE_CHROMIUM.
set -eu

for b in "${AZLEASE_CHROMIUM:-}" chromium-headless-shell chromium chromium-browser google-chrome; do
	[ -n "$b" ] && command -v "$b" >/dev/null 2>&1 && exit 0
done
missing="chromium-headless-shell"

cannot() {
	if [ "${1:-}" = --if-possible ] && [ "${CI:-}" != true ]; then
		echo "install-browser: no Chromium found, and $why: the browser test of azlease ui will skip (make browser installs it as root on Debian)" >&2
		exit 0
	fi
	echo "install-browser: no Chromium found, and $why" >&2
	exit 1
}
why=""
if ! command -v apt-get >/dev/null 2>&1; then
	why="no apt-get here: install Chromium with this system's packages, or name its binary in AZLEASE_CHROMIUM"
elif [ "$(id -u)" != 0 ]; then
	why="not root: run sudo make browser, or sudo apt-get install chromium-headless-shell"
fi
[ -n "$why" ] && cannot "${1:-}"

echo "install-browser: installing $missing from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# chromium-headless-shell is Chromium's headless build alone (no X11 or
# GTK front end); fonts-dejavu-core gives the screenshots a font.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium-headless-shell fonts-dejavu-core; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "install-browser: apt-get failed" >&2
	exit 1
fi
echo "install-browser: $(chromium-headless-shell --version 2>/dev/null || echo chromium-headless-shell installed)"
