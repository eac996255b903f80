#!/usr/bin/env bash
# Compares two fabro builds on the engine workloads W0–W5 of `fabro-bench engine` by what
# a noisy machine cannot distort much, not by wall time: the instructions the `fabro`
# process executes (valgrind's callgrind `Ir`, one run per build: the count hardly
# varies, and virtual machines often lack hardware counters) and its CPU time
# (`perf stat -e task-clock`, children included), the builds run alternately, OLD then
# NEW, ROUNDS times per workload, each run with a fresh FABRO_HOME; the CPU ratio is
# NEW/OLD of the medians.
#
# Usage: bench/ab-engine.sh OLD_FABRO NEW_FABRO [ROUNDS]   (default 5 rounds)
#
# The workflow texts are those of bench/src/engine.rs `workload` (W1 1,000 conditional
# nodes, W2 200 commands `true`, W3 100 parallel `sleep 0.2`, W4 a 500-iteration loop,
# W5 100 prompt nodes on the simulated provider). Needs `valgrind` and `perf`.

set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 OLD_FABRO NEW_FABRO [ROUNDS]" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
ROUNDS=${3:-5}
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

# shellcheck source=bench/workloads.sh
source "$(dirname "$0")/workloads.sh"
write_workloads "$SCRATCH"

# A fresh working directory holding the workflow, for one run.
fresh() {
    local workload=$1 tag=$2
    local work="$SCRATCH/work-$tag"
    rm -rf "$work"
    mkdir -p "$work"
    cp "$SCRATCH/$workload.fabro" "$work/"
    echo "$work"
}

# One run's CPU time in ms (perf task-clock, children included).
cpu_ms() {
    local fabro=$1 workload=$2 tag=$3 work
    work=$(fresh "$workload" "$tag")
    (cd "$work" && FABRO_HOME="$work/home" perf stat -x, -e task-clock -o "$work/perf.csv" \
        "$fabro" run "$workload.fabro" --max-stages 100000 >/dev/null 2>"$work/stderr") || {
        echo "$fabro failed on $workload:" >&2
        cat "$work/stderr" >&2
        exit 1
    }
    awk -F, '/task-clock/ { print $1 }' "$work/perf.csv"
}

# One run's instruction count of the fabro process itself (callgrind's Ir).
instructions() {
    local fabro=$1 workload=$2 tag=$3 work
    work=$(fresh "$workload" "$tag")
    (cd "$work" && FABRO_HOME="$work/home" valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null "$fabro" run "$workload.fabro" --max-stages 100000 \
        >/dev/null 2>"$work/stderr") || {
        echo "$fabro failed on $workload under valgrind:" >&2
        cat "$work/stderr" >&2
        exit 1
    }
    awk '/Collected :/ { print $NF }' "$work/stderr" | head -n 1
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "| workload | OLD instructions (median) | NEW/OLD instructions | OLD CPU ms (median) | NEW/OLD CPU |"
echo "|---|---:|---:|---:|---:|"
for workload in w0 w1 w2 w3 w4 w5; do
    : > "$SCRATCH/old.txt"
    : > "$SCRATCH/new.txt"
    for _ in $(seq 1 "$ROUNDS"); do
        cpu_ms "$OLD" "$workload" old >> "$SCRATCH/old.txt"
        cpu_ms "$NEW" "$workload" new >> "$SCRATCH/new.txt"
    done
    old_i=$(instructions "$OLD" "$workload" old)
    new_i=$(instructions "$NEW" "$workload" new)
    old_t=$(median < "$SCRATCH/old.txt")
    new_t=$(median < "$SCRATCH/new.txt")
    awk -v w="$workload" -v oi="$old_i" -v ni="$new_i" -v ot="$old_t" -v nt="$new_t" \
        'BEGIN { printf "| %s | %.0f | %.3f | %.1f | %.3f |\n", toupper(w), oi, ni / oi, ot, nt / ot }'
done
