#!/bin/bash -eu
# Builds every libFuzzer target of fuzz/CMakeLists.txt the OSS-Fuzz / ClusterFuzzLite way
# (fuzz/README.md, docs/fuzzing-beyond-one-machine.md).
#
# Reads the OSS-Fuzz build environment: $CXX and $CXXFLAGS (every library is compiled with them,
# so they must hold -fsanitize=fuzzer-no-link and the sanitizers), $LIB_FUZZING_ENGINE (how the
# fuzzer binaries link the engine), $OUT (where the results go), $WORK (the CMake build folder,
# kept between runs so a rebuild is incremental; default build/oss-fuzz of the source tree) and
# $SRC (the source tree is $SRC/zerocheck when this script is not inside it). The project is
# C++ only: $CC and $CFLAGS stay in the environment, where CMake would read them for C code.
#
# Writes to $OUT, for every target T named by a zerocheck_fuzz_target(T ...) call:
#   fuzz_T                  the libFuzzer binary (its RPATH is $ORIGIN/lib)
#   fuzz_T_seed_corpus.zip  fuzz/corpus/T/ and fuzz/regressions/T/ (the latter as regression-*)
#   fuzz_T.dict             the dictionary generated at build time (zerocheck.dict in the build's fuzz/)
#   fuzz_T.options          [libfuzzer] flags: the dictionary, timeout, memory limit, and for
#                           the scenario targets the full input length from the start
# and lib/: every shared library the binaries load except glibc's (LibTorch and the rest come
# from distribution packages that the machines running the fuzzers do not have). Set
# ZEROCHECK_BUNDLE_LIBS=0 to skip that copy, ZEROCHECK_BUILD_JOBS to limit the build's jobs.
#
#   .clusterfuzzlite/build.sh --list-targets    the targets, one a line (no build)
#   .clusterfuzzlite/build.sh --options T       T's [libfuzzer] options, one `key = value` a line
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# In this repository (ci/fuzz-smoke) the script sits in .clusterfuzzlite/; the OSS-Fuzz Dockerfile
# copies it to $SRC/build.sh and runs it from WORKDIR $SRC/zerocheck.
if [ -f "$here/../fuzz/CMakeLists.txt" ]; then
  src=$(cd "$here/.." && pwd)
elif [ -f "$PWD/fuzz/CMakeLists.txt" ]; then
  src=$PWD
else
  src="${SRC:?build.sh: SRC is not set and the zerocheck sources are not here}/zerocheck"
fi

# The targets are the zerocheck_fuzz_target(NAME ...) calls of fuzz/CMakeLists.txt (the helper's
# definition and its comment do not start with the call), so a new target needs no edit here.
list_targets() {
  sed -n 's/^[[:space:]]*zerocheck_fuzz_target([[:space:]]*\([A-Za-z0-9_]\{1,\}\).*/\1/p' \
    "$src/fuzz/CMakeLists.txt"
}

# The [libfuzzer] options of one target, also read by ci/fuzz-smoke (through the .options files)
# and ci/fuzz-merge. An execution of a scenario target runs LibTorch on a world of ranks, so the
# timeout and the memory limit are generous: a slow input on a loaded runner is not a finding.
target_options() {
  echo "dict = fuzz_$1.dict"
  echo "timeout = 60"
  echo "rss_limit_mb = 4096"
  case "$1" in
    # The scenario targets (bytes -> Scenario, fuzz/scenario_target.h): the decoder spends a
    # dozen bytes on the world, tree and config before the first operation, and libFuzzer's slow
    # ramp of the input length kept a young corpus to one-operation scenarios for minutes
    # (ci/fuzz-campaign), so fuzz at full length from the start.
    scenario_ops|attrs)
      echo "len_control = 0"
      echo "max_len = 1024" ;;
  esac
}

case "${1:-}" in
  --list-targets) list_targets; exit 0 ;;
  --options)
    [ $# -eq 2 ] || { echo "build.sh: --options needs a target" >&2; exit 2; }
    target_options "$2"; exit 0 ;;
  "") ;;
  *) echo "build.sh: unknown argument '$1' (takes none, --list-targets or --options T)" >&2; exit 2 ;;
esac

: "${CXX:?build.sh: CXX is not set (the OSS-Fuzz build environment sets CXX, CXXFLAGS, LIB_FUZZING_ENGINE, OUT)}"
: "${OUT:?build.sh: OUT is not set}"
: "${LIB_FUZZING_ENGINE:?build.sh: LIB_FUZZING_ENGINE is not set (e.g. -fsanitize=fuzzer)}"
mapfile -t targets < <(list_targets)
[ ${#targets[@]} -gt 0 ] || { echo "build.sh: no zerocheck_fuzz_target(...) call in $src/fuzz/CMakeLists.txt" >&2; exit 1; }

# OSS-Fuzz builds C++ against its own libc++ (-stdlib=libc++ in CXXFLAGS), but Debian's and
# Ubuntu's LibTorch are built against libstdc++ and their headers and ABI need it: drop the flag.
# (libFuzzer itself keeps its private libc++ inside, so $LIB_FUZZING_ENGINE still links.)
read -ra given_cxxflags <<<"${CXXFLAGS:-}"
cxxflags=()
for flag in "${given_cxxflags[@]}"; do
  [ "$flag" = "-stdlib=libc++" ] || cxxflags+=("$flag")
done

build=${WORK:-$src/build/oss-fuzz}
mkdir -p "$build" "$OUT"
build=$(cd "$build" && pwd)
out=$(cd "$OUT" && pwd)

# FuzzedDataProvider.h from the compiler in use (its resource folder), not from whichever
# /usr/lib/llvm-* is newest: OSS-Fuzz's clang lives in /usr/local.
fdp="$("$CXX" -print-resource-dir 2>/dev/null || true)/include/fuzzer/FuzzedDataProvider.h"
fdp_arg=()
[ -f "$fdp" ] && fdp_arg=(-DZEROCHECK_FUZZED_DATA_PROVIDER="$fdp")

echo "build.sh: sources $src, build $build, out $out"
echo "build.sh: CXX=$CXX CXXFLAGS=${cxxflags[*]} LIB_FUZZING_ENGINE=$LIB_FUZZING_ENGINE"
echo "build.sh: targets: ${targets[*]}"
# RelWithDebInfo with its own flags emptied: optimisation and debug info are the caller's
# CXXFLAGS alone (OSS-Fuzz: -O1 -gline-tables-only), and asserts stay on as in the fuzz preset.
# The fuzzers load their shared libraries from $ORIGIN/lib (see lib/ above); an RPATH, not a
# RUNPATH, so that LibTorch's own dependencies are looked up there too.
# shellcheck disable=SC2016  # $ORIGIN is the loader's, not the shell's
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO= \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CXX_FLAGS="${cxxflags[*]}" \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
  -DCMAKE_BUILD_RPATH='$ORIGIN/lib' \
  -DZEROCHECK_FUZZ=ON \
  -DZEROCHECK_FUZZ_ENGINE_LINK="$LIB_FUZZING_ENGINE" \
  "${fdp_arg[@]}"
cmake --build "$build" --target zerocheck_fuzzers --parallel "${ZEROCHECK_BUILD_JOBS:-$(nproc)}"

dict="$build/fuzz/zerocheck.dict"
[ -s "$dict" ] || { echo "build.sh: the build made no dictionary at $dict" >&2; exit 1; }

# A seed corpus archive: the corpus files under their names, the regressions as regression-<name>
# (the two folders may share a name). zip when installed, Python's zipfile otherwise.
write_seed_corpus() {  # target zipfile
  local target=$1 zipfile=$2 staging="$build/seed-corpus/$1" dir prefix file
  rm -rf "$staging" "$zipfile"
  mkdir -p "$staging"
  for dir in corpus regressions; do
    prefix=""
    [ "$dir" = regressions ] && prefix="regression-"
    for file in "$src/fuzz/$dir/$target"/*; do
      [ -f "$file" ] || continue
      case "$(basename "$file")" in README.md|.gitkeep) continue ;; esac
      cp "$file" "$staging/$prefix$(basename "$file")"
    done
  done
  if [ -z "$(ls -A "$staging")" ]; then
    echo "build.sh: $target has no seeds; no $(basename "$zipfile")"
  elif command -v zip >/dev/null 2>&1; then
    (cd "$staging" && zip -q -X -j "$zipfile" ./*)
  else
    python3 - "$staging" "$zipfile" <<'PY'
import os, sys, zipfile
staging, archive = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(staging)):
        z.write(os.path.join(staging, name), name)
PY
  fi
}

for target in "${targets[@]}"; do
  binary="$build/bin/fuzz_$target"
  [ -x "$binary" ] || { echo "build.sh: fuzz_$target was not built ($binary missing)" >&2; exit 1; }
  cp "$binary" "$out/fuzz_$target"
  cp "$dict" "$out/fuzz_$target.dict"
  { echo "[libfuzzer]"; target_options "$target"; } >"$out/fuzz_$target.options"
  write_seed_corpus "$target" "$out/fuzz_${target}_seed_corpus.zip"
done

# The shared libraries, but not glibc's, which must match the loader of the machine that runs them.
if [ "${ZEROCHECK_BUNDLE_LIBS:-1}" != 0 ]; then
  mkdir -p "$out/lib"
  for target in "${targets[@]}"; do ldd "$out/fuzz_$target"; done \
    | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u \
    | while read -r library; do
        case "$(basename "$library")" in
          libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|libutil.so.*|ld-linux*) ;;
          *) cp -L "$library" "$out/lib/" ;;
        esac
      done
  echo "build.sh: lib/: $(find "$out/lib" -type f | wc -l) shared libraries, $(du -sh "$out/lib" | cut -f1)"
fi
echo "build.sh: wrote ${#targets[@]} targets to $out"
