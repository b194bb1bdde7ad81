#!/usr/bin/env bash
# The GPU check (issue #8), for a machine with an NVIDIA GPU and the CUDA toolkit: builds in
# build-gpu/ (ccache), runs the GPU tests (which must run, not skip), then runs every sample model
# on the CPU and on the GPU with edb-run --json and prints one table of losses and throughput.
# Exits non-zero when there is no usable GPU, a test fails or skips, or a loss differs.
# Usage: scripts/gpu-check.sh [--limit N] [--batch N]   (EDB_BUILD_DIR, EDB_JOBS as in setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

limit=200
batch=64
while (($#)); do
  case "$1" in
    --limit) limit=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (usage: scripts/gpu-check.sh [--limit N] [--batch N])" >&2; exit 2 ;;
  esac
done
build=${EDB_BUILD_DIR:-build-gpu}
jobs=${EDB_JOBS:-$(nproc)}
start=$SECONDS

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDB_CUDA=ON >&2
fi
cmake --build "$build" -j"$jobs" --target edb-run edb_unit_tests >&2
run="$build/tools/edb-run"

# Detection first: without a usable GPU, say why and stop (edb-run --device cuda gives the reason).
if ! probe=$("$run" treelstm --limit 1 --batch 1 --repeat 1 --device cuda --json 2>&1 >/dev/null); then
  echo "gpu-check: no usable GPU: $probe" >&2
  exit 1
fi

# The GPU tests: each must pass, none may skip.
tests_log=$(mktemp)
trap 'rm -f "$tests_log"' EXIT
if ! "$build/tests/edb_unit_tests" --gtest_filter='CudaLaunch.*:NvrtcCompile.*:NvrtcRender.*:CudaDriver.*' >"$tests_log" 2>&1; then
  cat "$tests_log" >&2
  echo "gpu-check: GPU tests failed" >&2
  exit 1
fi
if grep -q '^\[  SKIPPED \]' "$tests_log"; then
  grep -A2 'Skipped' "$tests_log" >&2 || true
  echo "gpu-check: GPU tests skipped on a machine with a GPU" >&2
  exit 1
fi
echo "GPU tests: $(grep -c '^\[       OK \]' "$tests_log") passed" >&2

# Every sample model on both devices; a fresh kernel cache so compile counts mean something.
cache=$(mktemp -d)
trap 'rm -f "$tests_log"; rm -rf "$cache"' EXIT
export EDB_CACHE_DIR=$cache
mismatch=0
printf '| model | cpu loss | gpu loss | rel. diff | cpu inst/s | gpu inst/s | gpu/cpu | gpu kernels compiled | gpu kernel calls |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for model in treelstm treegru mvrnn bilstm latticelstm latticegru; do
  common=(--limit "$limit" --batch "$batch" --repeat 3 --json)
  cpu=$("$run" "$model" "${common[@]}" --device cpu 2>/dev/null) || { echo "gpu-check: $model failed on the CPU" >&2; exit 1; }
  if ! gpu=$("$run" "$model" "${common[@]}" --device cuda 2>"$tests_log"); then
    cat "$tests_log" >&2
    echo "gpu-check: $model failed on the GPU" >&2
    mismatch=1
    continue
  fi
  line=$(python3 - "$cpu" "$gpu" "$model" <<'PY'
import json, sys
cpu, gpu, model = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
a, b = cpu["loss"], gpu["loss"]
diff = abs(a - b) / max(1.0, abs(a), abs(b))
ok = gpu["device"] == "cuda" and diff <= 1e-4
ratio = gpu["instances_per_sec"] / cpu["instances_per_sec"] if cpu["instances_per_sec"] else 0
print(("OK" if ok else "MISMATCH") + " | %s | %.4f | %.4f | %.2e | %.0f | %.0f | %.2fx | %d | %d |" % (
    model, a, b, diff, cpu["instances_per_sec"], gpu["instances_per_sec"], ratio, gpu["kernels_compiled"], gpu["kernel_calls"]))
PY
)
  [ "${line%% *}" = OK ] || mismatch=1
  printf '%s\n' "${line#* }"
done
echo "gpu-check: $((SECONDS - start)) s" >&2
if ((mismatch)); then
  echo "gpu-check: CPU and GPU results differ (see the table)" >&2
  exit 1
fi
