#!/usr/bin/env bash
# Compares what two fabro builds print for the same workflow files (issue 15, acceptance 1):
# `fabro validate --json`, `fabro graph --format dot` and `fabro graph --format svg`, each
# with its stdout, stderr and exit code, byte for byte.
#
# Usage: bench/compare-language-outputs.sh OLD_FABRO NEW_FABRO [CORPUS_DIR]
#
# The workflows are every `.fabro`, `.dot` and `.gv` file under CORPUS_DIR (default
# ../shared/corpus/fabro), `examples/` and `crates/fabro-language/tests/data/` (the
# latter adds malformed inputs, so parse errors and their spans are compared too).
# Prints one line per difference and a summary; exits 0 when every output is identical,
# 1 otherwise.

set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 OLD_FABRO NEW_FABRO [CORPUS_DIR]" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
REPO=$(cd "$(dirname "$0")/.." && pwd)
CORPUS=$(realpath "${3:-$REPO/../shared/corpus/fabro}")

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
# Own FABRO_HOME so neither build reads or writes the user's.
export FABRO_HOME="$SCRATCH/home"
mkdir -p "$FABRO_HOME"

mapfile -t FILES < <(
    find "$CORPUS" "$REPO/examples" "$REPO/crates/fabro-language/tests/data" \
        -type f \( -name '*.fabro' -o -name '*.dot' -o -name '*.gv' \) | sort
)

# mode name|arguments before the workflow path
MODES=(
    "validate-json|validate --json"
    "graph-dot|graph --format dot"
    "graph-svg|graph --format svg"
)

# Runs one build in the workflow's directory; writes stdout, stderr and the exit code.
capture() {
    local binary=$1 out=$2 file=$3
    shift 3
    local status=0
    (cd "$(dirname "$file")" && "$binary" "$@" "$file") >"$out.stdout" 2>"$out.stderr" ||
        status=$?
    echo "$status" >"$out.status"
}

compared=0
differing=0
for file in "${FILES[@]}"; do
    for mode in "${MODES[@]}"; do
        name=${mode%%|*}
        read -r -a arguments <<<"${mode#*|}"
        capture "$OLD" "$SCRATCH/old" "$file" "${arguments[@]}"
        capture "$NEW" "$SCRATCH/new" "$file" "${arguments[@]}"
        compared=$((compared + 1))
        for stream in stdout stderr status; do
            if ! cmp -s "$SCRATCH/old.$stream" "$SCRATCH/new.$stream"; then
                echo "DIFFERENT $name $stream: $file"
                differing=$((differing + 1))
            fi
        done
    done
done

echo "${#FILES[@]} workflows, $compared outputs compared (stdout, stderr, exit code): $differing differ"
[[ $differing -eq 0 ]]
