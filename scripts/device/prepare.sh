#!/usr/bin/env bash
# Development-machine half of the device run (see run.sh): builds nextn and
# nextn_tests with the CUDA backend into build-cuda/ with libstdc++/libgcc
# linked statically, copies the shared libraries the GPU image lacks
# (libfmt, libhwy, libpcre2, libicuuc, libbrotli, and a stand-in for ICU data)
# beside them, strips the binaries, records the commit and packs it all in
# one archive, $BUILD.tar.xz, the one path a device call carries.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${NEXTN_BUILD:-build-cuda}
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc -Wl,--as-needed" >/dev/null
cmake --build "$BUILD" --target nextn nextn_tests
mkdir -p "$BUILD/lib"
for lib in $(ldd "$BUILD/nextn_tests" "$BUILD/nextn" | awk '/libfmt|libhwy|libpcre2|libicuuc|libbrotli/ {print $3}'); do cp -L "$lib" "$BUILD/lib/"; done
# ICU's 31 MB data library would push the carried tree past the device's
# 64 MiB: the GPU runs carry a stand-in that only satisfies the loader. Only
# the tokenizer's NFC step reads ICU data, and no device test tokenizes; a
# call that did would get ICU's own error, not silent output.
echo 'const char icudt72_dat[64] = {0};' >"$BUILD/icudata_standin.c"
cc -shared -fPIC -Wl,-soname,libicudata.so.72 -o "$BUILD/lib/libicudata.so.72" "$BUILD/icudata_standin.c"
strip "$BUILD/nextn" "$BUILD/nextn_tests"
{ git rev-parse HEAD; git status --porcelain -- src tests scripts CMakeLists.txt | sed 's/^/dirty: /'; } >"$BUILD/COMMIT"
# A call carries 64 MiB with the tracked tree (near 56 MiB): the binaries go
# as one xz archive (about 7 MB; the fatbins compress well), unpacked by
# lib.sh's unpack_carry. The archive sits beside the build folder, in .gitignore.
tar cf - "$BUILD/nextn" "$BUILD/nextn_tests" "$BUILD/lib" "$BUILD/COMMIT" | xz -9e -T2 >"$BUILD.tar.xz"
du -sh "$BUILD/nextn" "$BUILD/nextn_tests" "$BUILD/lib" "$BUILD.tar.xz"
echo "carry: $BUILD.tar.xz"
