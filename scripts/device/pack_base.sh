#!/usr/bin/env bash
# The base side of scripts/device/decode_ab.sh: packs build-cuda/nextn and
# its COMMIT (what scripts/device/prepare.sh built last) into
# build-base.tar.xz, about 6 MB, for the A/B call. Run it after preparing the
# base commit and before building the change.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${NEXTN_BUILD:-build-cuda}
[ -x "$BUILD/nextn" ] || { echo "error: $BUILD/nextn missing: run scripts/device/prepare.sh first" >&2; exit 1; }
tar cf - "$BUILD/nextn" "$BUILD/COMMIT" | xz -9e -T2 >build-base.tar.xz
echo "build-base.tar.xz: $(du -h build-base.tar.xz | cut -f1), base $(head -1 "$BUILD/COMMIT")"
