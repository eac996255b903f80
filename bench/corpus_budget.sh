#!/usr/bin/env bash
# Issue 16, acceptance 4: with the default budgets, every corpus workflow run with
# `--auto-approve --provider simulated` ends (success, partial success, failure or a
# budget stop) within 60 s and writes less than 100 MB.
#
# Usage: bench/corpus_budget.sh [FABRO_BINARY] [CORPUS_DIR]
# Defaults: target/release/fabro if built, else target/debug/fabro; ../shared/corpus/fabro.
# Each workflow runs in a fresh temporary directory (not a git repository) with its own
# FABRO_HOME; workflows that do not validate (and invalid.fabro) are skipped. Prints one
# line per workflow: seconds, MB written (run directory, blobs and working directory),
# exit code, status and reason; exits 1 if any workflow breaks a limit.
set -u
cd "$(dirname "$0")/.."
fabro=${1:-}
if [ -z "$fabro" ]; then
  if [ -x target/release/fabro ]; then fabro=target/release/fabro; else fabro=target/debug/fabro; fi
fi
fabro=$(realpath "$fabro")
corpus=$(realpath "${2:-../shared/corpus/fabro}")
limit_s=60
limit_mb=100
failures=0
printf '%-60s %7s %8s %4s  %s\n' WORKFLOW SECONDS MB EXIT 'STATUS / REASON'
while IFS= read -r workflow; do
  name=${workflow#"$corpus"/}
  [ "$(basename "$workflow")" = invalid.fabro ] && continue
  scratch=$(mktemp -d)
  export FABRO_HOME="$scratch/home"
  if ! "$fabro" validate "$workflow" >/dev/null 2>&1; then
    printf '%-60s skipped: does not validate\n' "$name"
    rm -rf "$scratch"
    continue
  fi
  mkdir -p "$scratch/work"
  start=$(date +%s.%N)
  (cd "$scratch/work" && timeout -s INT $((limit_s + 30)) "$fabro" run "$workflow" \
    --auto-approve --provider simulated >"$scratch/out" 2>"$scratch/err" </dev/null)
  code=$?
  end=$(date +%s.%N)
  seconds=$(echo "$end - $start" | bc)
  bytes=$(du -sb "$scratch" | cut -f1)
  mb=$(echo "scale=1; $bytes / 1048576" | bc)
  status=$(sed -n 's/^status: //p' "$scratch/out")
  reason=$(sed -n 's/^reason: //p' "$scratch/out" | cut -c1-70)
  verdict=""
  if [ "$(echo "$seconds > $limit_s" | bc)" = 1 ] || [ "$(echo "$mb >= $limit_mb" | bc)" = 1 ] \
    || [ -z "$status" ]; then
    verdict="  <-- over a limit or no status"
    failures=$((failures + 1))
  fi
  printf '%-60s %7.1f %8s %4s  %s %s%s\n' "$name" "$seconds" "$mb" "$code" "$status" "$reason" "$verdict"
  rm -rf "$scratch"
done < <(find "$corpus" \( -name '*.fabro' -o -name '*.dot' \) | sort)
if [ "$failures" -gt 0 ]; then
  echo "$failures workflow(s) over a limit"
  exit 1
fi
echo "every workflow ended within ${limit_s} s and wrote less than ${limit_mb} MB"
