#!/usr/bin/env bash
# scripts/run.sh builds only edb-run (and what it links) before running it, while setup.sh with no
# target (as test.sh calls it) builds everything: checked with stand-ins for cmake, dpkg-query and
# the built edb-run on PATH and in a scratch build directory, so nothing is built or installed.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/edbatch-run-script.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/build/tools"
: >"$work/build/build.ninja"  # configured already: setup.sh only builds
cat >"$work/bin/cmake" <<STUB
#!/usr/bin/env bash
echo "\$*" >>"$work/cmake.log"
STUB
cat >"$work/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
printf 'install ok installed'
STUB
cat >"$work/build/tools/edb-run" <<STUB
#!/usr/bin/env bash
echo "\$*" >"$work/edb-run.log"
STUB
chmod +x "$work/bin/cmake" "$work/bin/dpkg-query" "$work/build/tools/edb-run"

fail() { echo "run_script_test: $*" >&2; exit 1; }
export PATH="$work/bin:$PATH" EDB_BUILD_DIR="$work/build" EDB_JOBS=1
"$source_dir/scripts/run.sh" --limit 3 2>/dev/null
[ "$(cat "$work/cmake.log")" = "--build $work/build -j1 --target edb-run" ] ||
  fail "run.sh built with 'cmake $(cat "$work/cmake.log")', expected only the edb-run target"
[ "$(cat "$work/edb-run.log")" = "treelstm --limit 3" ] || fail "run.sh ran 'edb-run $(cat "$work/edb-run.log")'"

rm "$work/cmake.log"
"$source_dir/scripts/setup.sh" 2>/dev/null
[ "$(cat "$work/cmake.log")" = "--build $work/build -j1" ] ||
  fail "setup.sh without targets built with 'cmake $(cat "$work/cmake.log")', expected every target"
echo "run_script_test: run.sh builds edb-run only; setup.sh alone builds everything"
