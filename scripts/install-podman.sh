#!/bin/sh
# Installs podman and runc from Debian's packages when either is missing, for
# the container image test (cmd/azlease/image_test.go, 'make test').
# Idempotent: prints nothing and changes nothing when both are there. Needs
# root and apt-get (Debian, Ubuntu).
#
#	install-podman.sh                 install, or fail saying why not
#	install-podman.sh --if-possible   the same where it can (root with apt-get);
#	                                  elsewhere a note, and success, unless CI=true
set -eu

missing=""
command -v podman >/dev/null 2>&1 || missing="$missing podman"
command -v runc >/dev/null 2>&1 || missing="$missing runc"
[ -z "$missing" ] && exit 0

cannot() {
	if [ "${1:-}" = --if-possible ] && [ "${CI:-}" != true ]; then
		echo "install-podman:$missing not found, and $why: the container image test will skip (make podman installs them as root on Debian)" >&2
		exit 0
	fi
	echo "install-podman:$missing not found, and $why" >&2
	exit 1
}
why=""
if ! command -v apt-get >/dev/null 2>&1; then
	why="no apt-get here: install podman and runc with this system's packages"
elif [ "$(id -u)" != 0 ]; then
	why="not root: run sudo make podman, or sudo apt-get install podman runc"
fi
[ -n "$why" ] && cannot "${1:-}"

echo "install-podman: installing$missing from Debian's packages"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# runc, not crun: crun fails in sandboxes like the CI machine's. uidmap is
# for podman's user namespaces. podman's other recommendations
# (slirp4netns, fuse-overlayfs, buildah, …) are not needed: the test uses
# the host's network.
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc uidmap; } >"$log" 2>&1; then
	cat "$log" >&2
	echo "install-podman: apt-get failed" >&2
	exit 1
fi
echo "install-podman: $(podman --version), $(runc --version | head -n 1)"
