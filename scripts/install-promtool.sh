#!/usr/bin/env bash
# Puts promtool (Prometheus's rule checker) into ${QUORATE_PROMETHEUS_DIR:-~/.cache/quorate/prometheus}/promtool
# for the tests of deploy/monitoring/: Debian's `prometheus` package from this machine's apt
# sources, downloaded and unpacked with dpkg-deb -x, never installed (installing it would start
# a Prometheus server). Safe to run repeatedly.
set -euo pipefail
dest="${QUORATE_PROMETHEUS_DIR:-$HOME/.cache/quorate/prometheus}"
if [ -x "$dest/promtool" ] && "$dest/promtool" --version >/dev/null 2>&1; then
  exit 0
fi
echo "installing promtool from Debian's prometheus package into $dest" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
if ! (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); then
  $sudo apt-get update -qq
  (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1)
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$dest"
install -m 0755 "$work/root/usr/bin/promtool" "$dest/promtool"
"$dest/promtool" --version >/dev/null
