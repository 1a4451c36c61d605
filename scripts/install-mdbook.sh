#!/usr/bin/env bash
# Installs mdBook, which renders docs/ (book.toml at the repository root), into
# ~/.cache/quorate/mdbook/bin (or $QUORATE_MDBOOK_HOME/bin) unless that version is already there.
# Debian bookworm has no mdbook package, so it is built from crates.io at a pinned version with
# `cargo install --locked` (a few minutes on 2 cores, once). Safe to run repeatedly; the finished
# binary is moved into place, so a run that stops halfway leaves nothing half-installed.
set -euo pipefail
version=0.5.4
home="${QUORATE_MDBOOK_HOME:-$HOME/.cache/quorate/mdbook}"
bin="$home/bin/mdbook"
if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "mdbook v$version" ]; then
  exit 0
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is missing: install a Rust toolchain (1.95 or newer) first, e.g. from rustup" >&2
  exit 1
fi
echo "building mdbook $version into $home (a few minutes, once)" >&2
mkdir -p "$home"
tmp="$(mktemp -d "$home/.install.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# Only the renderer and its search index: `serve` and `watch` (a web server, file watching)
# are not needed to build the book and would double the build.
CARGO_TARGET_DIR="$tmp/target" cargo install --quiet --locked mdbook --version "$version" \
  --no-default-features --features search --root "$tmp/root"
mkdir -p "$home/bin"
mv -f "$tmp/root/bin/mdbook" "$bin"
"$bin" --version >&2
