//! The join node of a parallel stage (SPEC 5.7): where its branches meet again.

use std::collections::VecDeque;

use fabro_language::{NodeIndex, Workflow};

/// The join node of branches starting at `targets` (SPEC 5.7): among nodes reachable at
/// distance ≥ 1 from every target, the smallest maximum distance, then the smallest
/// distance sum, then the lexically smallest id.
pub(crate) fn join_node(workflow: &Workflow, targets: &[NodeIndex]) -> Option<NodeIndex> {
    let distances: Vec<Vec<Option<u32>>> = targets
        .iter()
        .map(|&target| distances_from(workflow, target))
        .collect();
    workflow
        .node_indices()
        .filter_map(|node| {
            let mut max = 0;
            let mut sum = 0u64;
            for per_target in &distances {
                let distance = per_target[node.get()].filter(|&distance| distance >= 1)?;
                max = max.max(distance);
                sum += u64::from(distance);
            }
            Some((max, sum, workflow.node(node).id.as_str(), node))
        })
        .min_by(|a, b| (a.0, a.1, a.2.as_bytes()).cmp(&(b.0, b.1, b.2.as_bytes())))
        .map(|(_, _, _, node)| node)
}

/// BFS distances from `start`; a node reachable again through a cycle back to `start`
/// does not count as distance 0 for the others.
fn distances_from(workflow: &Workflow, start: NodeIndex) -> Vec<Option<u32>> {
    let mut distances = vec![None; workflow.nodes().len()];
    let mut queue = VecDeque::from([(start, 0u32)]);
    let mut seen = vec![false; workflow.nodes().len()];
    seen[start.get()] = true;
    while let Some((node, distance)) = queue.pop_front() {
        for (_, edge) in workflow.outgoing(node) {
            let next = edge.to;
            if !seen[next.get()] {
                seen[next.get()] = true;
                distances[next.get()] = Some(distance + 1);
                queue.push_back((next, distance + 1));
            }
        }
    }
    distances
}
