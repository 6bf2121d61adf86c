#!/usr/bin/env bash
# Builds every fuzz/fuzz_X.cpp as a libFuzzer binary (ASan + UBSan, coverage
# on the library code too) and runs each for N seconds over a copy of its
# seed corpus fuzz/corpus/X/. Exits non-zero if any target finds a crash.
#
#   scripts/fuzz.sh [seconds per target, default 30] [target name ...]
#   FUZZ_JOBS=N: targets built and fuzzed at once (default: the cores)
#
# The CMake fuzz targets link the uninstrumented nextn_lib, so coverage
# stops at the harness; here the library sources are compiled with
# -fsanitize=fuzzer-no-link so libFuzzer sees inside the parsers.
set -euo pipefail

secs=${1:-30}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/build-fuzz"
cxx=${CXX_FUZZ:-clang++}
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I"$root/src"
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined)

command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (scripts/install-deps.sh installs clang)" >&2; exit 1; }
mkdir -p "$out/obj"

# Library: src/core, src/io, src/tokenizer and the server's request parser, compiled once into an archive so each target
# links only the objects it uses. Rebuilt when a source is newer than its object.
lib_srcs=("$root"/src/core/*.cpp "$root"/src/io/*.cpp "$root"/src/tokenizer/*.cpp "$root"/src/server/request.cpp)
objs=()
pids=()
for src in "${lib_srcs[@]}"; do
  [ -e "$src" ] || continue
  rel=${src#"$root"/src/}
  obj="$out/obj/${rel//\//_}.o"
  objs+=("$obj")
  if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find "$root/src" -name '*.h' -newer "$obj" -print -quit)" ]; then
    echo "fuzz.sh: compiling $rel"
    "$cxx" "${flags[@]}" -c "$src" -o "$obj" &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p" || { echo "fuzz.sh: library compile failed" >&2; exit 1; }; done
rm -f "$out/libnextn_fuzz.a"
ar rcs "$out/libnextn_fuzz.a" "${objs[@]}"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/fuzz/fuzz_*.cpp; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .cpp)
    targets+=("${n#fuzz_}")
  done
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzz/fuzz_*.cpp targets" >&2; exit 1; }

# One target: build, then fuzz a scratch copy of its corpus. Output goes to
# files and is printed when the target ends, so parallel targets do not interleave.
fuzz_one() {
  local t=$1 src="$root/fuzz/fuzz_$1.cpp" bin="$out/fuzz_$1"
  local work="$out/corpus/$t" artifacts="$out/artifacts/$t/" report="$out/fuzz_$t.report"
  {
    echo "fuzz.sh: building fuzz_$t"
    "$cxx" "${flags[@]}" -fsanitize=fuzzer "$src" "$out/libnextn_fuzz.a" -lfmt $(pkg-config --libs libpcre2-8 icu-uc) -o "$bin" ||
      { echo "fuzz.sh: fuzz_$t does not build"; return 1; }
    # Fuzz a scratch copy: new inputs land there, the committed seeds stay small.
    rm -rf "$work"
    mkdir -p "$work" "$artifacts"
    if [ -d "$root/fuzz/corpus/$t" ]; then cp -r "$root/fuzz/corpus/$t/." "$work/"; else
      echo "fuzz.sh: warning: no seed corpus fuzz/corpus/$t/"
    fi
    # The request parser takes bodies up to the server's 1 MiB limit; the file parsers stay small and fast.
    local max_len=4096
    [ "$t" = server_request ] && max_len=1048576
    echo "fuzz.sh: running fuzz_$t for ${secs}s (max_len $max_len)"
    if ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" -max_len="$max_len" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts" "$work" 2>"$out/fuzz_$t.log"; then
      grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$out/fuzz_$t.log" | tail -2 || true
    else
      echo "fuzz.sh: fuzz_$t FAILED; log: $out/fuzz_$t.log, reproducer(s) in $artifacts"
      tail -40 "$out/fuzz_$t.log"
      return 1
    fi
  } >"$report" 2>&1
}

for t in "${targets[@]}"; do
  [ -e "$root/fuzz/fuzz_$t.cpp" ] || { echo "fuzz.sh: no such target $root/fuzz/fuzz_$t.cpp" >&2; exit 1; }
done
# Each libFuzzer run is one process on one core for a fixed wall time: run
# FUZZ_JOBS (default: the cores) targets at once instead of one after another.
# Each still gets its whole ${secs}s; on CI's 2 cores the phase takes half as long.
jobs_max=${FUZZ_JOBS:-$(nproc)}
declare -A pid_of=()
failed=()
finish() {  # waits for target $1 and prints its report
  local rc=0
  wait "${pid_of[$1]}" || rc=$?
  cat "$out/fuzz_$1.report"
  [ $rc -eq 0 ] || failed+=("$1")
}
running=()
for t in "${targets[@]}"; do
  if [ ${#running[@]} -ge "$jobs_max" ]; then
    finish "${running[0]}"
    running=("${running[@]:1}")
  fi
  fuzz_one "$t" &
  pid_of[$t]=$!
  running+=("$t")
done
for t in "${running[@]}"; do finish "$t"; done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: all targets ran ${secs}s without crashes: ${targets[*]}"
