#!/usr/bin/env bash
# libFuzzer on the file readers: builds tests/fuzz/fuzz_*.cpp with clang (-fsanitize=fuzzer, with
# AddressSanitizer and UndefinedBehaviorSanitizer) in build-fuzz/ (EDB_FUZZ_BUILD_DIR changes it),
# then runs each target for EDB_FUZZ_SECONDS (default 60) from its seed corpus in tests/fuzz/corpus/.
# Arguments: target names to run (default: these eight). New inputs stay in the build directory; a crash
# leaves its input in BUILD/artifacts/ and fails: save it as tests/fuzz/regressions/NAME/, where
# ctest's fuzz_replay_NAME replays it in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
targets=(tree_reader tag_reader lattice_reader policy_file model_file optimizer_file kernel_cache_file vocabulary_file)
if (($#)); then targets=("$@"); fi
seconds=${EDB_FUZZ_SECONDS:-60}
build_dir=${EDB_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${EDB_JOBS:-2}

command -v cmake >/dev/null && command -v ninja >/dev/null || scripts/setup.sh
if ! command -v clang++-19 >/dev/null || [ ! -d /usr/lib/llvm-19/lib/clang/19/lib/linux ] ||
   ! ls /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  echo "fuzz: installing clang-19 libclang-rt-19-dev" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang-19 libclang-rt-19-dev >&2
fi

# Every library the targets link is instrumented for coverage; vptr is off because libLLVM has no RTTI.
flags="-O1 -g1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_CXX_FLAGS_FUZZ="$flags" -DCMAKE_EXE_LINKER_FLAGS_FUZZ="-fsanitize=address,undefined" \
    -DEDB_FUZZ=ON -DEDB_PYTHON=OFF >&2
fi
start=$(date +%s)
cmake --build "$build_dir" -j"$jobs" --target "${targets[@]/#/edb_fuzz_}" >&2
echo "fuzz: built in $(( $(date +%s) - start )) s" >&2

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
status=0
for name in "${targets[@]}"; do
  work="$build_dir/corpus/$name"
  artifacts="$build_dir/artifacts/$name"
  mkdir -p "$work" "$artifacts"
  echo "fuzz: $name for $seconds s" >&2
  if ! "$build_dir/tests/fuzz/edb_fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "$root/tests/fuzz/corpus/$name" \
      > "$build_dir/fuzz-$name.log" 2>&1; then
    status=1
    tail -n 60 "$build_dir/fuzz-$name.log" >&2
    echo "fuzz: $name FAILED; the input is in $artifacts/ (copy it to tests/fuzz/regressions/$name/)" >&2
  else
    grep -E "^(stat::number_of_executed_units|stat::new_units_added)" "$build_dir/fuzz-$name.log" |
      sed "s/^/fuzz: $name: /" >&2 || true
  fi
done
exit $status
