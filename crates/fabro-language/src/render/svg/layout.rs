//! Node and edge placement on top of `rust-sugiyama`, which ranks vertices, orders ranks and assigns coordinates.
//!
//! The crate places vertices only and hides its own dummy vertices, so this module adds what a drawing needs:
//!
//! 1. **Acyclic orientation.** A depth-first search from the start node, then from sources, then in input order,
//!    reverses back edges before the crate sees the graph, as Graphviz does.
//!    The crate would break cycles itself with a greedy feedback arc set, which can put the start node mid-page,
//!    and it fails an internal assertion on self-loops; self-loops never reach it (`route` draws them).
//!    Parallel edges can make its network simplex loop forever, so they never reach it either (see below).
//! 2. **First pass: ranks.** The crate lays out the real vertices, each linked pair once; each component's distinct
//!    y values, sorted, give ranks (its own dummies fill every rank a component spans, so no rank goes missing).
//! 3. **Second pass: routes.** Each edge spanning `s` ranks becomes a chain of `2s - 1` dummy vertices of our own
//!    (Graphviz's trick of doubling ranks), so every edge, even between adjacent ranks, gets a middle vertex.
//!    The middle vertex of a labelled edge is as big as its label, so labels get room of their own.
//!    A chain of unit edges has the same optimal ranking as the doubled first pass, so ranks stay put,
//!    and the dummies' coordinates are the edge's route. Parallel edges get separate chains and so separate routes.
//! 4. **Components, packing and rankdir.** Each weakly connected component goes to the crate on its own
//!    (lone nodes not at all); components are packed side by side along the in-rank axis, in input order,
//!    then axes are swapped or mirrored for the rankdir.
//!
//! Layout runs in a top-to-bottom frame: `x` along a rank, `y` across ranks.
//! Sizes are swapped into that frame for LR and RL, and points swapped back.
//! Calling the crate safely is the job of the `component` module.
//! Should the crate fail, a plain one-node-per-rank column is drawn instead.

use std::collections::HashSet;

use super::component::{place, Purpose};
use super::geometry::{Bounds, Point, Size};
use super::RankDir;

/// Minimum gap between neighbours in a rank, and the basis of the gap between ranks.
const SPACING: f64 = 20.0;
/// In-rank and cross-rank size of an unlabelled dummy vertex.
const DUMMY_SIZE: Size = Size::new(4.0, 2.0);
/// Gap between an edge and its label.
const LABEL_GAP: f64 = 6.0;
/// Gap between packed components.
const COMPONENT_GAP: f64 = 40.0;
/// A node to place.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayoutNode {
    /// Drawn size in the final frame.
    pub(super) size: Size,
    /// Extra room on each side along the in-rank axis, for self-loops.
    pub(super) reserve: f64,
    /// Whether depth-first orientation starts here (the start node).
    pub(super) root: bool,
}

/// An edge to route between two different nodes.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayoutEdge {
    pub(super) from: usize,
    pub(super) to: usize,
    /// Label size in the final frame, if the edge has a label.
    pub(super) label: Option<Size>,
}

/// Where an edge runs, in the final frame.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct EdgeRoute {
    /// From the centre of the tail through the route's bends to the centre of the head; empty if unroutable.
    pub(super) points: Vec<Point>,
    /// Centre of the label box, for labelled edges.
    pub(super) label: Option<Point>,
}

/// Placed nodes and routed edges in the final frame.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    /// Node centres, indexed like the input nodes.
    pub(super) nodes: Vec<Point>,
    /// Edge routes, indexed like the input edges.
    pub(super) edges: Vec<EdgeRoute>,
    /// Everything placed: nodes with their self-loop room, edge bends and labels.
    pub(super) bounds: Bounds,
    /// Whether the crate failed and the fallback column was used.
    pub(super) fallback: bool,
}

/// Places `nodes` and routes `edges`; edges whose ends are out of range or equal get an empty route.
pub(super) fn compute(rankdir: RankDir, nodes: &[LayoutNode], edges: &[LayoutEdge]) -> Layout {
    let routable: Vec<bool> = edges
        .iter()
        .map(|edge| edge.from < nodes.len() && edge.to < nodes.len() && edge.from != edge.to)
        .collect();
    let reversed = orient(nodes, edges, &routable);
    let frame = Frame { rankdir };
    let mut layout = layered(frame, nodes, edges, &routable, &reversed)
        .unwrap_or_else(|| column(frame, nodes, edges, &routable));
    if layout.bounds.is_empty() {
        layout.bounds.include(Point::default());
    }
    layout
}

/// Maps between the layout frame (ranks down the page) and the final frame of a rankdir.
#[derive(Debug, Clone, Copy)]
struct Frame {
    rankdir: RankDir,
}

impl Frame {
    fn size(self, size: Size) -> Size {
        match self.rankdir {
            RankDir::TopToBottom | RankDir::BottomToTop => size,
            RankDir::LeftToRight | RankDir::RightToLeft => Size::new(size.height, size.width),
        }
    }

    fn point(self, point: Point) -> Point {
        match self.rankdir {
            RankDir::TopToBottom => point,
            RankDir::BottomToTop => Point::new(point.x, -point.y),
            RankDir::LeftToRight => Point::new(point.y, point.x),
            RankDir::RightToLeft => Point::new(-point.y, point.x),
        }
    }

    /// A node's size in the layout frame, with its self-loop room.
    fn node_size(self, node: &LayoutNode) -> Size {
        let size = self.size(node.size);
        Size::new(size.width + 2.0 * node.reserve.max(0.0), size.height)
    }
}

/// Marks the edges to reverse so that the graph is acyclic: the back edges of a depth-first search.
fn orient(nodes: &[LayoutNode], edges: &[LayoutEdge], routable: &[bool]) -> Vec<bool> {
    let mut outgoing: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut has_incoming = vec![false; nodes.len()];
    for (index, edge) in edges.iter().enumerate() {
        if routable.get(index) != Some(&true) {
            continue;
        }
        if let Some(list) = outgoing.get_mut(edge.from) {
            list.push(index);
        }
        if let Some(flag) = has_incoming.get_mut(edge.to) {
            *flag = true;
        }
    }
    let roots = (0..nodes.len())
        .filter(|&node| nodes[node].root)
        .chain((0..nodes.len()).filter(|&node| !has_incoming[node]))
        .chain(0..nodes.len());

    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    let mut state = vec![State::New; nodes.len()];
    let mut reversed = vec![false; edges.len()];
    for root in roots {
        if state[root] != State::New {
            continue;
        }
        state[root] = State::OnPath;
        // Each frame is a node and how many of its outgoing edges have been followed.
        let mut path = vec![(root, 0usize)];
        while let Some((node, next)) = path.last_mut() {
            let node = *node;
            let Some(&edge) = outgoing[node].get(*next) else {
                state[node] = State::Done;
                path.pop();
                continue;
            };
            *next += 1;
            let head = edges[edge].to;
            match state[head] {
                State::New => {
                    state[head] = State::OnPath;
                    path.push((head, 0));
                }
                State::OnPath => reversed[edge] = true,
                State::Done => {}
            }
        }
    }
    reversed
}

/// One edge as a chain of dummy vertices in the second pass.
struct Chain {
    /// Edge index.
    edge: usize,
    /// Vertex ids from the chain's top (the oriented tail) to its bottom, dummies only.
    dummies: Vec<usize>,
    /// Position in `dummies` of the label vertex.
    label_at: Option<usize>,
}

/// Runs both passes through the crate; `None` if it panicked or the graph is too big for its `u32` ids.
fn layered(
    frame: Frame,
    nodes: &[LayoutNode],
    edges: &[LayoutEdge],
    routable: &[bool],
    reversed: &[bool],
) -> Option<Layout> {
    let oriented: Vec<(usize, usize, usize)> = edges
        .iter()
        .enumerate()
        .filter(|(index, _)| routable[*index])
        .map(|(index, edge)| {
            if reversed[index] {
                (index, edge.to, edge.from)
            } else {
                (index, edge.from, edge.to)
            }
        })
        .collect();

    let ranks = first_pass_ranks(nodes.len(), &oriented)?;

    // Second pass: real vertices first, so a vertex id below `nodes.len()` is the node index.
    let mut sizes: Vec<Size> = nodes.iter().map(|node| frame.node_size(node)).collect();
    let mut links: Vec<(usize, usize)> = Vec::new();
    let mut chains: Vec<Chain> = Vec::with_capacity(oriented.len());
    for &(edge, top, bottom) in &oriented {
        let span = ranks[bottom].saturating_sub(ranks[top]).max(1);
        let label_at = edges[edge].label.map(|_| span - 1);
        let mut dummies = Vec::with_capacity(2 * span - 1);
        let mut previous = top;
        for position in 0..2 * span - 1 {
            let vertex = sizes.len();
            sizes.push(match (label_at, edges[edge].label) {
                (Some(at), Some(label)) if at == position => {
                    let label = frame.size(label);
                    Size::new(label.width + LABEL_GAP, label.height)
                }
                _ => DUMMY_SIZE,
            });
            links.push((previous, vertex));
            dummies.push(vertex);
            previous = vertex;
        }
        links.push((previous, bottom));
        chains.push(Chain {
            edge,
            dummies,
            label_at,
        });
    }

    // Pack components side by side along the in-rank axis, in order of their first vertex.
    let mut centers = vec![Point::default(); sizes.len()];
    let mut cursor = 0.0;
    for placed in place(&sizes, &links, Purpose::Drawing { spacing: SPACING })? {
        let mut extent = Bounds::EMPTY;
        for &(id, center) in &placed {
            extent.include_box(center, sizes[id]);
        }
        if extent.is_empty() {
            continue;
        }
        let shift = cursor - extent.min.x;
        for &(id, center) in &placed {
            centers[id] = center + Point::new(shift, 0.0);
        }
        cursor += extent.max.x - extent.min.x + COMPONENT_GAP;
    }

    let mut bounds = Bounds::EMPTY;
    for (id, size) in sizes.iter().enumerate() {
        let corner = Point::new(size.width / 2.0, size.height / 2.0);
        bounds.include(frame.point(centers[id] - corner));
        bounds.include(frame.point(centers[id] + corner));
    }

    let mut routes = vec![EdgeRoute::default(); edges.len()];
    for chain in chains {
        let (from, to) = (edges[chain.edge].from, edges[chain.edge].to);
        let (top, bottom) = if reversed[chain.edge] {
            (to, from)
        } else {
            (from, to)
        };
        let mut points = Vec::with_capacity(chain.dummies.len() + 2);
        points.push(frame.point(centers[top]));
        let mut label = None;
        for (position, &vertex) in chain.dummies.iter().enumerate() {
            let center = centers[vertex];
            if chain.label_at == Some(position) {
                // The edge runs down the left of its label vertex; the text sits to the right of it.
                let half = sizes[vertex].width / 2.0;
                points.push(frame.point(center - Point::new(half, 0.0)));
                label = Some(frame.point(center + Point::new(LABEL_GAP / 2.0, 0.0)));
            } else {
                points.push(frame.point(center));
            }
        }
        points.push(frame.point(centers[bottom]));
        if reversed[chain.edge] {
            points.reverse();
        }
        routes[chain.edge] = EdgeRoute { points, label };
    }

    Some(Layout {
        nodes: centers
            .iter()
            .take(nodes.len())
            .map(|&center| frame.point(center))
            .collect(),
        edges: routes,
        bounds,
        fallback: false,
    })
}

/// Ranks from a first pass over the oriented graph, relative to the top of each component.
fn first_pass_ranks(count: usize, oriented: &[(usize, usize, usize)]) -> Option<Vec<usize>> {
    // The crate's network simplex can loop forever on parallel edges, so each pair goes in once.
    // (Second-pass chains never repeat a pair: every link has a dummy vertex of its own at one end.)
    let mut seen = HashSet::new();
    let links: Vec<(usize, usize)> = oriented
        .iter()
        .map(|&(_, top, bottom)| (top, bottom))
        .filter(|&link| seen.insert(link))
        .collect();
    let mut ranks = vec![0; count];
    for placed in place(&vec![Size::new(1.0, 1.0); count], &links, Purpose::Ranks)? {
        let mut levels: Vec<f64> = placed.iter().map(|(_, center)| center.y).collect();
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        for (id, center) in placed {
            if let (Some(rank), Ok(level)) = (
                ranks.get_mut(id),
                levels.binary_search_by(|level| level.total_cmp(&center.y)),
            ) {
                *rank = level;
            }
        }
    }
    Some(ranks)
}

/// Fallback placement: one node per rank in input order, edges straight.
fn column(frame: Frame, nodes: &[LayoutNode], edges: &[LayoutEdge], routable: &[bool]) -> Layout {
    let mut bounds = Bounds::EMPTY;
    let mut centers = Vec::with_capacity(nodes.len());
    let mut cursor = 0.0;
    for node in nodes {
        let size = frame.node_size(node);
        let center = Point::new(0.0, cursor + size.height / 2.0);
        cursor += size.height + 2.0 * SPACING;
        bounds.include(frame.point(center - Point::new(size.width / 2.0, size.height / 2.0)));
        bounds.include(frame.point(center + Point::new(size.width / 2.0, size.height / 2.0)));
        centers.push(frame.point(center));
    }
    let edges = edges
        .iter()
        .enumerate()
        .map(|(index, edge)| {
            if !routable[index] {
                return EdgeRoute::default();
            }
            let (from, to) = (centers[edge.from], centers[edge.to]);
            let label = edge.label.map(|size| {
                let center = (from + to) * 0.5 + Point::new(size.width / 2.0 + LABEL_GAP, 0.0);
                bounds.include_box(center, size);
                center
            });
            EdgeRoute {
                points: vec![from, to],
                label,
            }
        })
        .collect();
    Layout {
        nodes: centers,
        edges,
        bounds,
        fallback: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> LayoutNode {
        LayoutNode {
            size: Size::new(60.0, 30.0),
            reserve: 0.0,
            root: false,
        }
    }

    fn edge(from: usize, to: usize) -> LayoutEdge {
        LayoutEdge {
            from,
            to,
            label: None,
        }
    }

    fn layout(rankdir: RankDir, count: usize, pairs: &[(usize, usize)]) -> Layout {
        let nodes = vec![node(); count];
        let edges: Vec<LayoutEdge> = pairs.iter().map(|&(from, to)| edge(from, to)).collect();
        compute(rankdir, &nodes, &edges)
    }

    #[test]
    fn back_edges_are_reversed_from_the_root() {
        let mut nodes = vec![node(); 3];
        nodes[1].root = true;
        let edges = [edge(0, 1), edge(1, 2), edge(2, 0)];
        let routable = [true; 3];
        // From node 1: 1→2, 2→0, and 0→1 closes the cycle.
        assert_eq!(orient(&nodes, &edges, &routable), vec![true, false, false]);
    }

    #[test]
    fn ranks_follow_edges_down_the_page() {
        let placed = layout(RankDir::TopToBottom, 3, &[(0, 1), (1, 2)]);
        assert!(!placed.fallback);
        assert!(placed.nodes[0].y < placed.nodes[1].y);
        assert!(placed.nodes[1].y < placed.nodes[2].y);
    }

    #[test]
    fn rankdir_swaps_and_mirrors_axes() {
        let check = |rankdir: RankDir, advance: fn(Point, Point) -> bool| {
            let placed = layout(rankdir, 3, &[(0, 1), (1, 2)]);
            assert!(advance(placed.nodes[0], placed.nodes[1]), "{rankdir:?}");
            assert!(advance(placed.nodes[1], placed.nodes[2]), "{rankdir:?}");
        };
        check(RankDir::TopToBottom, |a, b| a.y < b.y && a.x == b.x);
        check(RankDir::BottomToTop, |a, b| a.y > b.y && a.x == b.x);
        check(RankDir::LeftToRight, |a, b| a.x < b.x && a.y == b.y);
        check(RankDir::RightToLeft, |a, b| a.x > b.x && a.y == b.y);
    }

    #[test]
    fn start_node_stays_on_top_of_a_cycle() {
        let mut nodes = vec![node(); 3];
        nodes[0].root = true;
        let edges = [edge(0, 1), edge(1, 2), edge(2, 0)];
        let placed = compute(RankDir::TopToBottom, &nodes, &edges);
        assert!(placed.nodes[0].y < placed.nodes[1].y && placed.nodes[1].y < placed.nodes[2].y);
        // The back edge is routed from its real tail to its real head.
        let back = &placed.edges[2].points;
        assert_eq!(back.first(), Some(&placed.nodes[2]));
        assert_eq!(back.last(), Some(&placed.nodes[0]));
    }

    #[test]
    fn parallel_edges_get_distinct_routes() {
        let placed = layout(RankDir::TopToBottom, 2, &[(0, 1), (0, 1), (1, 0)]);
        let middles: Vec<Point> = placed.edges.iter().map(|route| route.points[1]).collect();
        assert_ne!(middles[0], middles[1]);
        assert_ne!(middles[0], middles[2]);
        assert_ne!(middles[1], middles[2]);
    }

    #[test]
    fn long_edges_bend_through_their_own_vertices() {
        let placed = layout(RankDir::TopToBottom, 4, &[(0, 1), (1, 2), (2, 3), (0, 3)]);
        // Three ranks spanned, doubled: five bends between the two ends.
        assert_eq!(placed.edges[3].points.len(), 7);
    }

    #[test]
    fn labels_get_their_own_room() {
        let nodes = vec![node(); 2];
        let label = Size::new(80.0, 14.0);
        let edges = [LayoutEdge {
            from: 0,
            to: 1,
            label: Some(label),
        }];
        let placed = compute(RankDir::TopToBottom, &nodes, &edges);
        let center = placed.edges[0]
            .label
            .expect("labelled edge has a label position");
        let mut text = Bounds::EMPTY;
        text.include_box(center, label);
        for &node in &placed.nodes {
            let mut shape = Bounds::EMPTY;
            shape.include_box(node, Size::new(60.0, 30.0));
            assert!(!text.overlaps(&shape));
        }
    }

    #[test]
    fn unroutable_edges_get_empty_routes() {
        let placed = layout(RankDir::TopToBottom, 2, &[(0, 5), (1, 1), (0, 1)]);
        assert!(placed.edges[0].points.is_empty());
        assert!(placed.edges[1].points.is_empty());
        assert_eq!(placed.edges[2].points.len(), 3);
    }

    #[test]
    fn fallback_column_places_every_node() {
        let nodes = vec![node(); 3];
        let edges = [edge(0, 2)];
        let placed = column(
            Frame {
                rankdir: RankDir::LeftToRight,
            },
            &nodes,
            &edges,
            &[true],
        );
        assert!(placed.fallback);
        assert!(placed.nodes[0].x < placed.nodes[1].x && placed.nodes[1].x < placed.nodes[2].x);
        assert_eq!(
            placed.edges[0].points,
            vec![placed.nodes[0], placed.nodes[2]]
        );
    }

    #[test]
    fn parallel_edges_in_both_directions_do_not_hang_the_crate() {
        // Before parallel pairs were merged for the first pass, the crate's network simplex looped forever here.
        let placed = layout(
            RankDir::TopToBottom,
            5,
            &[(4, 0), (3, 0), (1, 2), (0, 4), (2, 4), (3, 1), (4, 0)],
        );
        assert!(!placed.fallback);
        assert!(placed.edges.iter().all(|route| route.points.len() >= 3));
    }

    #[test]
    fn deep_graphs_do_not_overflow_the_stack() {
        // The crate recurses once per vertex along a path; 5,000 nodes and their dummies exceed a 2 MiB stack.
        let pairs: Vec<(usize, usize)> = (1..5000).map(|index| (index - 1, index)).collect();
        let placed = layout(RankDir::TopToBottom, 5000, &pairs);
        assert!(!placed.fallback);
        assert!(placed.nodes[0].y < placed.nodes[4999].y);
    }

    #[test]
    fn empty_graph_has_a_point_of_bounds() {
        let placed = layout(RankDir::TopToBottom, 0, &[]);
        assert!(placed.nodes.is_empty());
        assert!(!placed.bounds.is_empty());
    }
}
