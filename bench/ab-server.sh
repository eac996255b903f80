#!/usr/bin/env bash
# Compares two fabro builds as servers by what a noisy machine cannot distort much: the
# instructions the `fabro server` process executes for one fixed piece of work (valgrind's
# callgrind `Ir`), and its CPU time for the same work (`perf stat -e task-clock`), the
# builds run alternately, OLD then NEW, ROUNDS times; the CPU ratio is NEW/OLD of the
# medians. Wall-clock latencies of `fabro-bench server` swing by more than 30 % between
# neighbouring runs on a shared 2-core machine; these two figures do not.
#
# The work, each time on a fresh FABRO_HOME, over loopback with curl:
#   (a) W1 (1,000 conditional nodes) and W5 (100 prompt nodes, simulated provider)
#       started with `POST /api/v1/runs`, each followed by its event stream to its end;
#   (c) `GET /api/v1/runs/{id}` of the W1 run and `GET /api/v1/runs`, READS times each;
#   (b) the W1 run's whole event stream replayed 10 times.
# The server is then stopped with SIGTERM, which ends it normally.
#
# Usage: bench/ab-server.sh OLD_FABRO NEW_FABRO [ROUNDS] [READS]   (defaults 3 and 200)
# Needs valgrind, perf and curl.

set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 OLD_FABRO NEW_FABRO [ROUNDS] [READS]" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
ROUNDS=${3:-3}
READS=${4:-200}
SCRATCH=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$SCRATCH"' EXIT

# shellcheck source=bench/workloads.sh
source "$(dirname "$0")/workloads.sh"
write_workloads "$SCRATCH"

# Starts FABRO as a server on a fresh FABRO_HOME (under valgrind when MODE is
# `callgrind`, watched by `perf stat` when it is `perf`), does the work, stops it with
# SIGTERM and waits for it; the server's stderr and perf's output are left in the work
# directory.
serve_and_work() {
    local fabro=$1 mode=$2 tag=$3
    local work="$SCRATCH/work-$tag"
    rm -rf "$work"
    mkdir -p "$work"
    cp "$SCRATCH/w1.fabro" "$SCRATCH/w5.fabro" "$work/"
    mkdir -p "$work/home"
    printf '[run]\nmax_stages = 0\n' > "$work/home/settings.toml"
    local wrap=()
    if [[ $mode == callgrind ]]; then
        wrap=(valgrind --tool=callgrind --callgrind-out-file=/dev/null)
    fi
    FABRO_HOME="$work/home" env -C "$work" "${wrap[@]}" "$fabro" server --bind 127.0.0.1:0 \
        >/dev/null 2>"$work/stderr" &
    local server=$!
    local line=""
    for _ in $(seq 1 600); do
        line=$(grep -o 'listening on http://[^ ]*' "$work/stderr" 2>/dev/null | head -n 1 || true)
        [[ -n $line ]] && break
        sleep 0.1
    done
    if [[ -z $line ]]; then
        echo "the server printed no address:" >&2
        cat "$work/stderr" >&2
        exit 1
    fi
    local perf=""
    if [[ $mode == perf ]]; then
        perf stat -x, -e task-clock -p "$server" -o "$work/perf.csv" &
        perf=$!
        sleep 0.2
    fi
    local url=${line#listening on }
    local base=${url%%/\?token=*}
    local token=${url#*\?token=}
    local auth=(-H "authorization: Bearer $token")
    local w1=""
    for workflow in w1 w5; do
        local started run_id
        started=$(curl -sS --fail "${auth[@]}" -H 'content-type: application/json' \
            -d "{\"workflow\": \"$workflow.fabro\"}" "$base/api/v1/runs")
        run_id=$(sed -E 's/.*"run_id" *: *"([^"]+)".*/\1/' <<<"$started")
        curl -sS --fail -N "${auth[@]}" -H 'accept: text/event-stream' \
            "$base/api/v1/runs/$run_id/events" > "$work/$workflow.events"
        grep -q WorkflowRunCompleted "$work/$workflow.events" || {
            echo "$workflow did not complete on $tag:" >&2
            tail -n 5 "$work/$workflow.events" >&2
            exit 1
        }
        [[ $workflow == w1 ]] && w1=$run_id
    done
    for _ in $(seq 1 "$READS"); do
        curl -sS --fail "${auth[@]}" "$base/api/v1/runs/$w1" >/dev/null
        curl -sS --fail "${auth[@]}" "$base/api/v1/runs" >/dev/null
    done
    for _ in $(seq 1 10); do
        curl -sS --fail -N "${auth[@]}" -H 'accept: text/event-stream' \
            "$base/api/v1/runs/$w1/events" >/dev/null
    done
    kill -TERM "$server"
    wait "$server" || true
    if [[ -n $perf ]]; then
        wait "$perf" || true
    fi
}

# The server's CPU time in ms while it works (perf task-clock, every thread).
cpu_ms() {
    local fabro=$1 tag=$2
    serve_and_work "$fabro" perf "$tag"
    awk -F, '/task-clock/ { print $1 }' "$SCRATCH/work-$tag/perf.csv"
}

# The server's instruction count (callgrind's Ir), start-up included.
instructions() {
    local fabro=$1 tag=$2
    serve_and_work "$fabro" callgrind "$tag"
    awk '/Collected :/ { print $NF }' "$SCRATCH/work-$tag/stderr" | head -n 1
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: > "$SCRATCH/old.txt"
: > "$SCRATCH/new.txt"
for _ in $(seq 1 "$ROUNDS"); do
    cpu_ms "$OLD" old >> "$SCRATCH/old.txt"
    cpu_ms "$NEW" new >> "$SCRATCH/new.txt"
done
old_i=$(instructions "$OLD" old)
new_i=$(instructions "$NEW" new)
old_t=$(median < "$SCRATCH/old.txt")
new_t=$(median < "$SCRATCH/new.txt")
echo "| work | OLD instructions | NEW/OLD instructions | OLD CPU ms (median of $ROUNDS) | NEW/OLD CPU |"
echo "|---|---:|---:|---:|---:|"
awk -v oi="$old_i" -v ni="$new_i" -v ot="$old_t" -v nt="$new_t" -v r="$READS" \
    'BEGIN { printf "| W1 and W5 over HTTP, %d reads of each document, 10 replays | %.0f | %.3f | %.1f | %.3f |\n", r, oi, ni / oi, ot, nt / ot }'
echo "CPU ms per run, OLD: $(tr '\n' ' ' < "$SCRATCH/old.txt")"
echo "CPU ms per run, NEW: $(tr '\n' ' ' < "$SCRATCH/new.txt")"
