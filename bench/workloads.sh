# Sourced by bench/*_targets.sh and policy_batch_sizes.sh (from the repository root, with $data set
# to the shared data folder): each sample model's workload flags, a field of edb-run's JSON, and the
# scripts' common arguments.
# shellcheck shell=bash
run=${run:-build/tools/edb-run}  # a script may set its own before sourcing this
data=${data:-../shared/data}
data_of() {
  case $1 in
    tree* | mvrnn) echo "--data $data/sst-like.txt" ;;
    bilstm) echo "--data $data/pos-like.txt" ;;
    lattice*) echo "--data $data/lattice-like.jsonl" ;;
    *) echo "" ;;  # childsum, dagrnn: generated (a --skip part continues the same stream)
  esac
}
# The training workloads of issue 29's targets: TreeLSTM on sst-learnable.txt, the BiLSTM tagger on
# pos-like.txt with embed 128 and hidden 50; other models on their generated data.
train_data_of() {
  case $1 in
    treelstm) echo "--data $data/sst-learnable.txt" ;;
    bilstm) echo "--data $data/pos-like.txt --embed 128 --hidden 50" ;;
    *) echo "" ;;
  esac
}
field() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
# A script's arguments [ROUNDS] [MODEL...]: sets `rounds` and the array `models`, each defaulting to
# the script's own. Usage: rounds_and_models DEFAULT_ROUNDS "DEFAULT MODELS" "$@"
rounds_and_models() {
  local default_rounds=$1 default_models=$2
  shift 2
  rounds=${1:-$default_rounds}
  shift || true
  models=("$@")
  ((${#models[@]})) || read -ra models <<<"$default_models"
}
