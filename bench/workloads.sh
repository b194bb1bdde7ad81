# Sourced by bench/*_targets.sh and policy_batch_sizes.sh (from the repository root, with $data set
# to the shared data folder): each sample model's workload flags, and a field of edb-run's JSON.
# shellcheck shell=bash
data_of() {
  case $1 in
    tree* | mvrnn) echo "--data $data/sst-like.txt" ;;
    bilstm) echo "--data $data/pos-like.txt" ;;
    lattice*) echo "--data $data/lattice-like.jsonl" ;;
    *) echo "" ;;  # childsum, dagrnn: generated (a --skip part continues the same stream)
  esac
}
field() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
