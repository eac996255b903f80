#!/usr/bin/env bash
# Compares the run records two fabro builds write for the same workflows (issue 15,
# acceptance 1): `events.jsonl`, `checkpoint.json`, `manifest.json` and every stage's
# `status.json`, plus the exit code.
#
# Usage: bench/compare-records.sh OLD_FABRO NEW_FABRO [CORPUS_DIR]
#
# Each workflow runs in its own temporary git repository and FABRO_HOME, with a fixed
# `--run-id`, fixed git identities and dates, `--auto-approve --provider simulated`
# (`--dry-run` for workflows that would need real tools or credentials). The records are
# normalised (run directory paths, timestamps, durations (to 0), git SHAs, blob refs, ULIDs),
# then diffed. Exits 0 when the two builds wrote identical records, 1 otherwise.
#
# Parallel branches run concurrently, so the relative order of their events, stage ranks
# and `completed_nodes` can differ from one run to the next even with one build. When the
# records differ only in that order (the same lines with ids and ranks masked), the
# workflow is reported as "same records" rather than as a change.

set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 OLD_FABRO NEW_FABRO [CORPUS_DIR]" >&2
    exit 2
fi
OLD=$(realpath "$1")
NEW=$(realpath "$2")
REPO=$(cd "$(dirname "$0")/.." && pwd)
CORPUS=$(realpath "${3:-$REPO/../shared/corpus/fabro}")

# name|workflow file|extra flags
WORKFLOWS=(
    "quickstart|$REPO/examples/quickstart.fabro|"
    "simple|$CORPUS/simple.fabro|"
    "branching|$CORPUS/branching.fabro|"
    "conditions|$CORPUS/conditions.fabro|"
    "parallel|$CORPUS/parallel.fabro|"
    "legacy_tool|$CORPUS/legacy_tool.fabro|"
    "retro-e2e|$CORPUS/retro-e2e.fabro|"
    "styled|$CORPUS/styled.fabro|--dry-run"
    "quickstart-dry|$REPO/examples/quickstart.fabro|--dry-run"
    "consensus_task|$CORPUS/attractor/consensus_task.dot|--dry-run"
    "green_test_moderate|$CORPUS/attractor/green_test_moderate.dot|--dry-run"
)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabro-compare.XXXXXX")
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$WORK"' EXIT

# Rewrites the volatile parts of a record on stdin.
normalise() {
    local root=$1
    perl -pe '
        s{\Q'"$root"'\E}{<ROOT>}g;
        s{\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)}{<TS>}g;
        s{"(duration_ms|elapsed_ms|delay_ms)":(\s*)\d+}{"$1":${2}0}g;
        s{\(\d+(?:\.\d+)?m?s\)}{(<DURATION>)}g;
        s{ stages in \d+(?:\.\d+)?m?s;}{ stages in <DURATION>;}g;
        s{\b[0-9a-f]{64}\b}{<HEX64>}g;
        s{\b[0-9a-f]{40}\b}{<SHA>}g;
        s{\b[0-9A-HJKMNP-TV-Z]{26}\b}{<ULID>}g;
    '
}

# Runs workflow $2 with binary $1, writing normalised records under $3.
record() {
    local binary=$1 entry=$2 out=$3
    local name file flags
    IFS='|' read -r name file flags <<<"$entry"
    local root
    root=$(mktemp -d "$WORK/run.XXXXXX")
    mkdir -p "$root/home" "$root/fabro" "$root/project" "$out/$name"
    local -a env=(
        env -i "PATH=$PATH" "HOME=$root/home" "FABRO_HOME=$root/fabro" NO_COLOR=1 TZ=UTC
        GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
        GIT_AUTHOR_NAME=fabro-compare GIT_AUTHOR_EMAIL=compare@fabro.invalid
        GIT_COMMITTER_NAME=fabro-compare GIT_COMMITTER_EMAIL=compare@fabro.invalid
        GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
    )
    (
        cd "$root/project"
        "${env[@]}" git init -q -b main .
        echo "compare" >README.md
        "${env[@]}" git add README.md
        "${env[@]}" git commit -q -m init
        cp "$file" "workflow.${file##*.}"
        local status=0
        # shellcheck disable=SC2086 # flags is a word list
        "${env[@]}" "$binary" run "workflow.${file##*.}" --auto-approve --provider simulated \
            --run-id "cmp-$name" $flags >"$root/stdout" 2>"$root/stderr" || status=$?
        echo "$status" >"$out/$name/exit_code"
    )
    local run_dir="$root/fabro/scratch/cmp-$name"
    local record
    for record in events.jsonl checkpoint.json manifest.json; do
        if [[ -f "$run_dir/$record" ]]; then
            normalise "$root" <"$run_dir/$record" >"$out/$name/$record"
        fi
    done
    if [[ -d "$run_dir/stages" ]]; then
        local stage
        for stage in "$run_dir"/stages/*/; do
            stage=$(basename "$stage")
            if [[ -f "$run_dir/stages/$stage/status.json" ]]; then
                mkdir -p "$out/$name/stages/$stage"
                normalise "$root" <"$run_dir/stages/$stage/status.json" \
                    >"$out/$name/stages/$stage/status.json"
            fi
        done
    fi
    normalise "$root" <"$root/stderr" >"$out/$name/stderr"
    rm -rf "$root"
}

# Every line of every record of $1, prefixed by its file, with event ids, stage ranks,
# the order of `completed_nodes` and line order masked: what stays when concurrent
# branches interleave differently.
loose() {
    python3 - "$1" <<'PY'
import json, os, re, sys
root = sys.argv[1]
lines = []
for directory, _, files in os.walk(root):
    for name in files:
        path = os.path.join(directory, name)
        label = re.sub(r"/\d{3}-", "/NNN-", os.path.relpath(path, root))
        with open(path) as handle:
            text = handle.read()
        docs = []
        if name.endswith(".json"):
            docs = [json.loads(text)] if text.strip() else []
        elif name.endswith(".jsonl"):
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            lines += [f"{label}\t{line}" for line in text.splitlines()]
            continue
        for doc in docs:
            if isinstance(doc, dict):
                for key in ("id", "rank", "stage_rank"):
                    if key in doc:
                        doc[key] = "<N>"
                if isinstance(doc.get("properties"), dict) and "rank" in doc["properties"]:
                    doc["properties"]["rank"] = "<N>"
                if isinstance(doc.get("completed_nodes"), list):
                    doc["completed_nodes"].sort()
            masked = re.sub(r"/\d{3}-", "/NNN-", json.dumps(doc, sort_keys=True))
            lines.append(label + "\t" + masked)
print("\n".join(sorted(lines)))
PY
}

changed=0
for entry in "${WORKFLOWS[@]}"; do
    name=${entry%%|*}
    record "$OLD" "$entry" "$WORK/old"
    record "$NEW" "$entry" "$WORK/new"
    events=$(wc -l <"$WORK/new/$name/events.jsonl" 2>/dev/null || echo 0)
    stages=$(find "$WORK/new/$name/stages" -name status.json 2>/dev/null | wc -l)
    summary="exit $(cat "$WORK/new/$name/exit_code"), $events events, $stages status.json"
    if diff -r "$WORK/old/$name" "$WORK/new/$name" >"$WORK/$name.diff"; then
        echo "identical      $name ($summary)"
    elif loose "$WORK/old/$name" >"$WORK/$name.old.loose" &&
        loose "$WORK/new/$name" >"$WORK/$name.new.loose" &&
        diff "$WORK/$name.old.loose" "$WORK/$name.new.loose" >"$WORK/$name.loose.diff"; then
        echo "same records   $name ($summary; only the interleaving of concurrent branches differs)"
    else
        echo "DIFFERENT      $name ($summary)"
        if [[ -s "$WORK/$name.loose.diff" ]]; then cat "$WORK/$name.loose.diff"; else cat "$WORK/$name.diff"; fi
        changed=1
    fi
done
echo "events covered:" $(cat "$WORK"/new/*/events.jsonl | grep -o '"event":"[^"]*"' | cut -d'"' -f4 | sort -u)
exit "$changed"
