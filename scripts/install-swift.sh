#!/usr/bin/env bash
# Installs OpenStack Swift's servers from Debian (swift, swift-proxy, swift-account,
# swift-container, swift-object), memcached (tempauth keeps its tokens there), Keystone
# (python3-keystone: keystone-manage and keystone-wsgi-public, run on SQLite) and
# keystonemiddleware (the proxy's token check) for the Swift store tests, which start an
# all-in-one Swift (and a Keystone) of their own on free ports in a temporary directory
# (quorate-testkit's SwiftServer). The `keystone` package itself is not installed: it
# configures a system service through debconf. Python packages, so they are installed with apt
# rather than unpacked into ~/.cache/quorate; no service is started: while apt runs, a
# policy-rc.d refuses every service start (the one already there is kept when there is one).
# Safe to run repeatedly; prints how long the install took.
set -euo pipefail
bins=(/usr/bin/swift-proxy-server /usr/bin/swift-account-server /usr/bin/swift-container-server
  /usr/bin/swift-object-server /usr/bin/swift-ring-builder /usr/bin/memcached
  /usr/bin/keystone-manage /usr/bin/keystone-wsgi-public
  /usr/lib/python3/dist-packages/keystonemiddleware/__init__.py)
missing=false
for b in "${bins[@]}"; do [ -e "$b" ] || missing=true; done
if ! $missing; then
  exit 0
fi
start=$(date +%s)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
policy=/usr/sbin/policy-rc.d
created_policy=false
if [ ! -e "$policy" ]; then
  tmp=$($sudo mktemp /usr/sbin/.policy-rc.d.XXXXXX)
  printf '#!/bin/sh\n# quorate install-swift.sh: no service starts while it installs\nexit 101\n' | $sudo tee "$tmp" >/dev/null
  $sudo chmod 0755 "$tmp"
  $sudo mv "$tmp" "$policy"
  created_policy=true
fi
cleanup() { if $created_policy; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT
pkgs=(swift swift-proxy swift-account swift-container swift-object memcached python3-keystone
  python3-keystonemiddleware)
echo "installing OpenStack Swift from Debian: ${pkgs[*]}" >&2
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
for b in "${bins[@]}"; do
  [ -e "$b" ] || { echo "install-swift.sh: $b is still missing after installing ${pkgs[*]}" >&2; exit 1; }
done
echo "installed Swift in $(($(date +%s) - start))s" >&2
