#!/usr/bin/env bash
# Keeps LAYOUT.md true. Fails when a file includes a header from a folder its own folder may not
# include (the rule at the end of LAYOUT.md, as the table below), when an LLVM header is included
# outside jit/ or a CUDA toolkit header outside tests/, when a source file has no line in LAYOUT.md,
# when LAYOUT.md names a file that does not exist, or when a file points to DESIGN.md (the design
# is docs/design.md). Run by scripts/test.sh; needs only bash, awk and grep (and git, when there
# is one, to list the files).
set -euo pipefail
cd "$(dirname "$0")/.."

# Who may include whom: each folder, then the folders of ours it may include besides itself and the
# public headers (include/edbatch/, which every folder may include). "any": every folder of ours.
declare -A may_include=(
  [include]=""
  [ir]=""
  [scheduler]="ir"
  [memplan]="ir scheduler"
  [jit]="ir"
  [nvrtc]="ir jit"
  [runtime]="ir scheduler memplan jit nvrtc"
  [trace]="ir scheduler runtime"
  [dist]="ir"
  [samples]=""
  [examples]=""
  [docs]=""
  [python]=""
  [tools]="any"
  [bench]="any"
  [tests]="any"
)
ours="ir scheduler memplan jit nvrtc runtime trace dist samples tools bench tests"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files and new ones not ignored, less those deleted from the work tree.
  files=$(comm -23 <(git ls-files --cached --others --exclude-standard | sort -u) <(git ls-files --deleted | sort -u))
else
  files=$(find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||' | sort)
fi

problems=0
problem() {
  echo "check_layout: $*" >&2
  problems=$((problems + 1))
}

# 1. Includes: one grep over the C++ files, one awk over its "file:line:text" lines.
cxx=$(grep -E '\.(h|cpp|def)$' <<<"$files" || true)
rules=$(for folder in "${!may_include[@]}"; do echo "$folder ${may_include[$folder]}"; done)
include_problems=$(
  { [ -z "$cxx" ] || xargs -d '\n' grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' <<<"$cxx" || true; } |
    awk -v rules="$rules" -v ours="$ours" '
      BEGIN {
        n = split(rules, lines, "\n")
        for (i = 1; i <= n; ++i) {
          k = split(lines[i], w, " ")
          checked[w[1]] = 1
          allowed[w[1] SUBSEP w[1]] = 1
          text[w[1]] = ""
          for (j = 2; j <= k; ++j) { allowed[w[1] SUBSEP w[j]] = 1; text[w[1]] = text[w[1]] (j > 2 ? " " : "") w[j] }
        }
        split(ours, o, " "); for (i in o) our[o[i]] = 1
      }
      {
        file = $0; sub(/:.*/, "", file)
        rest = substr($0, length(file) + 2); line = rest; sub(/:.*/, "", line)
        folder = file; sub(/\/.*/, "", folder)
        if (!(folder in checked)) next
        header = rest; sub(/^[^<"]*[<"]/, "", header); sub(/[">].*/, "", header)
        if (header ~ /^(cuda|nvrtc|cuda_runtime)[^\/]*\.h$/ && folder != "tests") {
          print file ":" line ": includes <" header ">: only tests/ may include a CUDA toolkit header (the GPU backend loads libcuda and libnvrtc with dlopen)"
          next
        }
        if (index(header, "/") == 0) next
        top = header; sub(/\/.*/, "", top)
        if (top == "llvm" || top == "llvm-c") {
          if (folder != "jit") print file ":" line ": includes <" header ">: only jit/ sees LLVM"
          next
        }
        if (!(top in our) || allowed[folder SUBSEP top] || allowed[folder SUBSEP "any"]) next
        print file ":" line ": includes \"" header "\", but " folder "/ may include " (text[folder] == "" ? "" : text[folder] " and ") "include/edbatch/ only (LAYOUT.md, \"Who may include whom\")"
      }'
)
if [ -n "$include_problems" ]; then
  while read -r line; do problem "$line"; done <<<"$include_problems"
fi

# 2. Every source file has its line in LAYOUT.md, and every file LAYOUT.md names exists. A line
#    under a heading "## folder/" starts "- `name`" or "- `name`, `other`" (names within the folder).
listed=$(awk '
  /^## / { dir = $2; sub(/\/$/, "", dir); next }
  /^- `/ {
    s = substr($0, 3)
    while (match(s, /^`[^`]+`/)) {
      print dir "/" substr(s, 2, RLENGTH - 2)
      s = substr(s, RLENGTH + 1)
      if (s ~ /^, `/) s = substr(s, 3); else break
    }
  }' LAYOUT.md | sort -u)
sources=$(grep -E '^([^/]+/.*\.(h|cpp|def|py|pyi|sh|cmake|in)|\.ci/.*)$' <<<"$files" |
  grep -vE '^(docs/snippets|tests/fuzz/corpus|tests/fuzz/regressions)/' | sort -u || true)
while read -r file; do
  [ -z "$file" ] || problem "$file has no line in LAYOUT.md (add one under its folder's heading)"
done < <(comm -23 <(echo "$sources") <(echo "$listed"))
while read -r name; do
  [ -z "$name" ] || [ -e "$name" ] || problem "LAYOUT.md names $name, which does not exist"
done <<<"$listed"

# 3. The design lives in docs/design.md: nothing points to the copy outside the repository.
while IFS= read -r hit; do
  problem "$hit: points to DESIGN.md outside the repository; the design is docs/design.md"
done < <(grep -v '^scripts/check_layout.sh$' <<<"$files" | xargs -d '\n' grep -nIoE '(\.\./shared/)?\bDESIGN\.md\b' 2>/dev/null | cut -d: -f1,2 || true)

if [ "$problems" -ne 0 ]; then
  echo "check_layout: $problems problem(s); the rule and the file list are in LAYOUT.md" >&2
  exit 1
fi
echo "check_layout: $(wc -l <<<"$cxx") C++ files follow LAYOUT.md's include rule; its $(wc -l <<<"$listed") lines name every source file"
