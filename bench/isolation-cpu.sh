#!/usr/bin/env bash
# CPU (`perf stat -e task-clock`: `fabro` and everything it starts) and wall time of W2
# (200 command stages running `true`, no git) through `fabro run`, for two builds and
# `[sandbox] command_isolation` `none` and `workspace`, all four rotating within each
# round; a fresh FABRO_HOME per run, none deleted until the end (deleting files churns
# ext4's inode allocator and slows the next runs' `mkdir`s: docs/benchmarks.md).
#
# Usage: bench/isolation-cpu.sh OLD_FABRO NEW_FABRO [ROUNDS]
#
# Prints one line per run (round, build, mode, 1-minute load average before the run, CPU
# and wall milliseconds), then per build the medians and the `workspace` / `none` ratios.

set -euo pipefail

old=$1
new=$2
rounds=${3:-10}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/work"
{
    printf 'digraph bench {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n'
    for i in $(seq 1 200); do printf '  c%d [shape=parallelogram, script="true"]\n' "$i"; done
    printf '  start -> c1\n'
    for i in $(seq 1 199); do printf '  c%d -> c%d\n' "$i" $((i + 1)); done
    printf '  c200 -> exit\n}\n'
} >"$dir/work/w2.fabro"
cd "$dir/work"
n=0
for round in $(seq 1 "$rounds"); do
    for build in old new; do
        binary=$old
        [ "$build" = new ] && binary=$new
        for mode in none workspace; do
            n=$((n + 1))
            home=$dir/homes/$n
            mkdir -p "$home"
            printf '[sandbox]\ncommand_isolation = "%s"\n' "$mode" >"$home/settings.toml"
            load=$(cut -d' ' -f1 /proc/loadavg)
            start=$(date +%s%N)
            cpu=$(FABRO_HOME=$home perf stat -x, -e task-clock "$binary" run w2.fabro 2>&1 >/dev/null |
                grep task-clock | cut -d, -f1)
            end=$(date +%s%N)
            echo "$round $build $mode load=$load cpu_ms=$cpu wall_ms=$(((end - start) / 1000000))"
        done
    done
done | tee "$dir/runs.txt"
python3 - "$dir/runs.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    _, build, mode, _, cpu, wall = line.split()
    runs.setdefault((build, mode), []).append(
        (float(cpu.split("=")[1]), float(wall.split("=")[1])))
for build in ("old", "new"):
    medians = {mode: [statistics.median(v[i] for v in runs[(build, mode)]) for i in (0, 1)]
               for mode in ("none", "workspace")}
    none, workspace = medians["none"], medians["workspace"]
    print(f"{build}: none {none[0]:.0f} ms CPU / {none[1]:.0f} ms wall, "
          f"workspace {workspace[0]:.0f} / {workspace[1]:.0f} ms, "
          f"workspace/none {workspace[0] / none[0]:.3f}x CPU, {workspace[1] / none[1]:.3f}x wall")
EOF
