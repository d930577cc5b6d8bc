#!/usr/bin/env bash
# The Debian package (issue 22 items 2-3): scripts/package builds it; it is unpacked into a
# clean directory and checked: the binary runs (--version), the mount helper links to it, it
# depends on fuse3, every man page renders (`man -l`), the completion scripts parse (bash -n,
# zsh -n when zsh is there), the systemd unit is there.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(scripts/package)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
fail() { echo "tests/package.sh: $*" >&2; exit 1; }
"$root/usr/bin/scion" --version | grep '^scion ' >/dev/null || fail "scion --version"
# The front runs the whole binary (lib/scion of its prefix) for every other command.
"$root/usr/bin/scion" list --help | grep -q '^Usage: scion list' || fail "scion list --help (the front finds no scion-full)"
[ "$(readlink "$root/sbin/mount.fuse.scion")" = /usr/bin/scion ] || fail "no mount helper link"
dpkg-deb -f "$deb" Depends | grep fuse3 >/dev/null || fail "does not depend on fuse3"
n=0
for page in "$root"/usr/share/man/man1/*.1.gz "$root"/usr/share/man/man5/*.5.gz; do
  out=$(MANWIDTH=80 man -l "$page" 2>&1) || fail "man -l $page: $out"
  grep -q NAME <<<"$out" || fail "$page has no NAME section"
  n=$((n + 1))
done
[ "$n" -ge 50 ] || fail "only $n man pages"
MANWIDTH=80 man -l "$root/usr/share/man/man1/scion-mirror-add.1.gz" | grep -- --keep-unmirrored >/dev/null || fail "scion-mirror-add(1) lacks its options"
bash -n "$root/usr/share/bash-completion/completions/scion" || fail "bash completion"
grep -q mirror "$root/usr/share/bash-completion/completions/scion" || fail "bash completion lacks mirror"
if command -v zsh >/dev/null; then zsh -n "$root/usr/share/zsh/vendor-completions/_scion" || fail "zsh completion"; fi
[ -s "$root/usr/share/fish/vendor_completions.d/scion.fish" ] || fail "fish completion"
[ -f "$root/lib/systemd/system/scion@.service" ] || fail "systemd unit"
echo "package $(basename "$deb"): $n man pages, completions, mount helper, systemd unit: ok"
