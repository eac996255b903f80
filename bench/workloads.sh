#!/usr/bin/env bash
# The workflow texts of the engine workloads W0–W5 (those of bench/src/engine.rs
# `workload`), for the scripts that compare two builds: `write_workloads DIR` writes
# w0.fabro … w5.fabro into DIR. W1 1,000 conditional nodes, W2 200 commands `true`, W3 100
# parallel `sleep 0.2`, W4 a 500-iteration loop, W5 100 prompt nodes on the simulated
# provider.

write_workloads() {
    local SCRATCH=$1
    local header='digraph bench {
  start [shape=Mdiamond]
  exit [shape=Msquare]'
    {
        echo "$header"; echo "  start -> exit"; echo "}"
    } > "$SCRATCH/w0.fabro"
    {
        echo "$header"
        for i in $(seq 1 1000); do echo "  n$i [shape=diamond]"; done
        echo "  start -> n1"
        for i in $(seq 1 999); do echo "  n$i -> n$((i + 1)) [condition=\"outcome=success\"]"; echo "  n$i -> exit"; done
        echo "  n1000 -> exit"; echo "}"
    } > "$SCRATCH/w1.fabro"
    {
        echo "$header"
        for i in $(seq 1 200); do echo "  c$i [shape=parallelogram, script=\"true\"]"; done
        echo "  start -> c1"
        for i in $(seq 1 199); do echo "  c$i -> c$((i + 1))"; done
        echo "  c200 -> exit"; echo "}"
    } > "$SCRATCH/w2.fabro"
    {
        echo "$header"
        echo "  fan [shape=component, max_parallel=100]"; echo "  join [shape=tripleoctagon]"
        echo "  start -> fan"; echo "  join -> exit"
        for i in $(seq 1 100); do echo "  b$i [shape=parallelogram, script=\"sleep 0.2\"]"; echo "  fan -> b$i -> join"; done
        echo "}"
    } > "$SCRATCH/w3.fabro"
    {
        echo "$header"
        echo "  spin [shape=diamond]"; echo "  start -> spin"
        echo "  spin -> exit [condition=\"context.internal.node_visit_count >= 500\"]"
        echo "  spin -> spin"; echo "}"
    } > "$SCRATCH/w4.fabro"
    {
        echo "$header"
        echo "  node [shape=tab, provider=\"simulated\"]"
        for i in $(seq 1 100); do echo "  p$i [prompt=\"Step $i of \$goal\"]"; done
        echo "  start -> p1"
        for i in $(seq 1 99); do echo "  p$i -> p$((i + 1))"; done
        echo "  p100 -> exit"; echo "}"
    } > "$SCRATCH/w5.fabro"
}
