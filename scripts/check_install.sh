#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it as an outside project would: configures,
# builds and runs examples/consumer with find_package(edbatch), and compiles, links and runs a
# small program with pkg-config's flags alone, and imports the installed Python module (when the
# build has it) from the prefix alone. Any failure fails the script, and so does a consumer's
# configure that prints "Could NOT find" or a CMake warning.
# Usage: scripts/check_install.sh [BUILD_DIR]   (default: $EDB_BUILD_DIR, else build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-${EDB_BUILD_DIR:-build}}
work=$(mktemp -d "${TMPDIR:-/tmp}/edbatch-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "edbatch: installing $build_dir into a temporary prefix" >&2
cmake --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log" >&2; exit 1; }
for file in include/edbatch/edbatch.h bin/edb-run bin/edb-cache; do
  [ -e "$prefix/$file" ] || { echo "edbatch: $file was not installed" >&2; exit 1; }
done
"$prefix/bin/edb-cache" --help >/dev/null  # the installed tools find their library

echo "edbatch: building examples/consumer against it (find_package)" >&2
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S examples/consumer -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; exit 1; }
# A consumer's configure reads clean: nothing "Could NOT find" (LLVM's optional libraries) or warned.
if grep -E "Could NOT find|CMake Warning" "$work/configure.log" >&2; then
  echo "edbatch: configuring examples/consumer printed the lines above; a consumer should see none" >&2
  exit 1
fi
cmake --build "$work/consumer" >&2
"$work/consumer/childsum_treelstm"

echo "edbatch: compiling a program with pkg-config's flags alone" >&2
pc_dir=$(dirname "$(find "$prefix" -name edbatch.pc -print -quit)")
pkg_static=()
if ! find "$prefix" -name 'libedbatch.so' | grep -q .; then pkg_static=(--static); fi
cat >"$work/pkgconfig_check.cpp" <<'CPP'
#include <edbatch/edbatch.h>
#include <cmath>
#include <cstdio>
int main() {
  edb::Engine engine;
  edb::Trace trace(engine);
  const float got = edb::tanh(trace.input({0.5f, -1.0f})).value()(1);
  if (std::abs(got - std::tanh(-1.0f)) > 1e-6f) return 1;
  std::printf("edbatch %s through pkg-config: OK\n", EDBATCH_VERSION_STRING);
  return 0;
}
CPP
# shellcheck disable=SC2046
${CXX:-g++} -std=c++20 $(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags edbatch) "$work/pkgconfig_check.cpp" \
  -o "$work/pkgconfig_check" -Wl,-rpath,"$(PKG_CONFIG_PATH=$pc_dir pkg-config --variable=libdir edbatch)" \
  $(PKG_CONFIG_PATH=$pc_dir pkg-config "${pkg_static[@]}" --libs edbatch)
"$work/pkgconfig_check"

if ! grep -q '^EDB_PYTHON:STRING=OFF$' "$build_dir/CMakeCache.txt" && compgen -G "$build_dir/python/edbatch*.so" >/dev/null; then
  echo "edbatch: importing the installed Python module from the prefix" >&2
  module=$(find "$prefix" -name 'edbatch*.so' -print -quit)
  [ -n "$module" ] || { echo "edbatch: the Python module was not installed" >&2; exit 1; }
  [ -e "$(dirname "$module")/edbatch.pyi" ] || { echo "edbatch: edbatch.pyi was not installed" >&2; exit 1; }
  python=$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  (cd "$work" && PYTHONPATH="$(dirname "$module")" "$python" -c '
import edbatch, sys
assert edbatch.__file__.startswith(sys.argv[1]), edbatch.__file__
with edbatch.Trace(edbatch.Engine()) as t:
    got = edbatch.tanh(t.input([0.5, -1.0])).value()[1, 0]
assert abs(got - -0.7615942) < 1e-6, got
print("edbatch", edbatch.__version__, "installed Python module: OK")
' "$prefix")
fi
