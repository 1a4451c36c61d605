#!/usr/bin/env bash
# Builds tools/history-check (the porcupine-based second history checker) into
# ~/.cache/quorate/bin/history-check. Idempotent: skips the build when the installed binary was
# built from the same sources (a stamp of their hash beside it); installs atomically.
set -euo pipefail
cd "$(dirname "$0")/../tools/history-check"
dest="${QUORATE_CACHE:-$HOME/.cache/quorate}/bin"
stamp="$(cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)"
if [[ -x "$dest/history-check" && "$(cat "$dest/history-check.stamp" 2>/dev/null)" == "$stamp" ]]; then
  exit 0
fi
mkdir -p "$dest"
tmp="$(mktemp "$dest/.history-check.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
go build -trimpath -o "$tmp" .
mv -f "$tmp" "$dest/history-check"
echo "$stamp" > "$dest/history-check.stamp.tmp" && mv -f "$dest/history-check.stamp.tmp" "$dest/history-check.stamp"
echo "built $dest/history-check"
