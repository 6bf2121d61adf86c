#!/usr/bin/env bash
# A device call sends the working tree (tracked files and untracked ones git
# does not ignore) plus its carry, 64 MiB in all. The tree is near 55 MiB:
# with build-cuda.tar.xz (about 9.5 MB) it fits, with build-base.tar.xz as
# well (decode_ab.sh's base side) it does not. This takes the paths that no
# device script or CUDA test reads out of the index and ignores them, so they
# stay on disk and stay behind; `off` puts them back exactly.
#
#   bash scripts/device/carry_trim.sh on      # before the call
#   bash scripts/device/carry_trim.sh status  # what would travel, in MiB
#   bash scripts/device/carry_trim.sh off     # after it, before any commit
#
# While it is on, the index holds the deletions: commit nothing (`status`
# says so). NEXTN_TRIM_PATHS replaces the default paths. The ignore lines sit
# between two markers in .git/info/exclude, which `off` removes.
set -euo pipefail
cd "$(dirname "$0")/../.."
EXCLUDE=$(git rev-parse --git-path info/exclude)
BEGIN="# carry_trim.sh: begin"
END="# carry_trim.sh: end"
DEFAULT_PATHS="docs src tools fuzz tests/fixtures/tokenizers tests/fixtures/chat_templates"

trimmed() {  # the paths of the marked block, one per line
  [ -f "$EXCLUDE" ] || return 0
  sed -n "/^$BEGIN\$/,/^$END\$/p" "$EXCLUDE" | sed -e "/^#/d" -e 's#^/##' -e 's#/$##'
}

mib() { awk '{s += $1} END {printf "%.2f", s / 1048576}'; }

travelling() {  # tracked plus untracked-not-ignored bytes
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s 2>/dev/null | mib
}

case "${1:-}" in
  on)
    if [ -n "$(trimmed)" ]; then echo "error: carry_trim.sh is already on (run 'off' first)" >&2; exit 1; fi
    paths=${NEXTN_TRIM_PATHS:-$DEFAULT_PATHS}
    mkdir -p "$(dirname "$EXCLUDE")"
    echo "$BEGIN" >>"$EXCLUDE"
    for p in $paths; do
      [ -n "$(git ls-files -- "$p")" ] || { echo "skipped $p: nothing tracked there"; continue; }
      git rm -r -q --cached -- "$p"
      echo "/$p/" >>"$EXCLUDE"
    done
    echo "$END" >>"$EXCLUDE"
    echo "trimmed; $(travelling) MiB travel now (carry comes on top); commit nothing until 'off'"
    ;;
  off)
    paths=$(trimmed)
    if [ -n "$paths" ]; then git reset -q HEAD -- $paths; fi
    if [ -f "$EXCLUDE" ]; then
      sed -i "/^$BEGIN\$/,/^$END\$/d" "$EXCLUDE"
    fi
    echo "restored; $(travelling) MiB travel"
    ;;
  status)
    paths=$(trimmed)
    echo "$(travelling) MiB travel (tracked and untracked-not-ignored)"
    if [ -n "$paths" ]; then echo "on: left behind, commit nothing:" $paths; fi
    for f in build-cuda.tar.xz build-base.tar.xz; do
      if [ -f "$f" ]; then echo "$f: $(stat -c %s "$f" | mib) MiB"; fi
    done
    ;;
  *)
    echo "error: usage: carry_trim.sh on|off|status" >&2
    exit 1
    ;;
esac
