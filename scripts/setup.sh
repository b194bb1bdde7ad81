#!/usr/bin/env bash
# Installs what is missing from Debian 12's packages, configures once and builds (incrementally)
# the targets named as arguments, or every target without any (tests, fuzz replays, benchmarks).
# Idempotent: a second run with nothing changed only asks ninja, which finds nothing to do.
# Usage: scripts/setup.sh [TARGET...]   (e.g. scripts/setup.sh edb-run, as run.sh does)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ lld ccache pkgconf llvm-19-dev libeigen3-dev libgtest-dev nlohmann-json3-dev
          pybind11-dev python3-dev python3-numpy python3-pytest libopenmpi-dev openmpi-bin)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  echo "edbatch: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

build_dir=${EDB_BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j"${EDB_JOBS:-2}" "${targets[@]}" >&2
