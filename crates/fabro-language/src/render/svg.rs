//! SVG rendering of a workflow graph for `fabro graph` (SPEC 12.1), with a built-in layered layout and no Graphviz.
//!
//! [`render_svg`] takes nodes and edges already reduced to what a picture needs (id, label, [`NodeShape`])
//! and returns a standalone SVG document.
//! The `layout` submodule places nodes with the `rust-sugiyama` crate (called through `component`, which keeps the
//! crate from crashing or overflowing the stack) and routes edges through vertices of its own;
//! `shape` draws the outlines of SPEC 2.8, `route` the edges and self-loops, `label` the text.
//!
//! The document's structure is a contract: one `<g class="node" id="node-{id}">` per node holding its outline and
//! its label as `<text>`, and one `<g class="edge">` per drawable edge holding a `<path>`, an arrowhead
//! `<polygon>` and, when labelled, a `<text>`.
//! Rendering never fails: out-of-range edges are left out, cycles, self-loops and parallel edges are all drawn,
//! and the same input always gives the same bytes.

mod component;
mod geometry;
mod label;
mod layout;
mod route;
mod shape;

use std::fmt::Write as _;

use self::geometry::{Bounds, Point, Size};
use self::label::{escape, Label, Names, EDGE_FONT_SIZE, NODE_FONT_SIZE};
use self::layout::{EdgeRoute, LayoutEdge, LayoutNode};
use self::route::{LoopPlan, Stroke};

/// Layout direction (graph attribute rankdir).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankDir {
    /// Ranks run down the page (`TB`, the default).
    #[default]
    TopToBottom,
    /// Ranks run rightwards (`LR`).
    LeftToRight,
    /// Ranks run up the page (`BT`).
    BottomToTop,
    /// Ranks run leftwards (`RL`).
    RightToLeft,
}

/// Node outline, from the DOT shape (SPEC 2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeShape {
    /// `box`: an agent stage, drawn as a rectangle.
    Box,
    /// `Mdiamond`: the start node, a diamond with its corners ticked.
    Mdiamond,
    /// `Msquare`: the exit node, a double rectangle.
    Msquare,
    /// `tab`: a prompt stage, a rectangle with a tab on top.
    Tab,
    /// `parallelogram`: a command stage.
    Parallelogram,
    /// `hexagon`: a human gate.
    Hexagon,
    /// `diamond`: a conditional.
    Diamond,
    /// `component`: a parallel fan-out, a rectangle with two small rectangles on its left side.
    Component,
    /// `tripleoctagon`: a fan-in, three nested octagons.
    TripleOctagon,
    /// `insulator`: a wait, a rectangle holding a dashed one.
    Insulator,
    /// `house`: a sub-workflow, a pentagon with a pointed roof.
    House,
    /// Any other shape, drawn as an ellipse.
    Other,
}

/// One node to draw.
#[derive(Debug, Clone, Copy)]
pub struct SvgNode<'a> {
    /// Node id; it becomes the group id `node-{id}` (escaped).
    pub id: &'a str,
    /// Label text; `\n`, `\l` and `\r` (escapes or real newlines) break lines, `\N` stands for the id.
    pub label: &'a str,
    /// Outline to draw.
    pub shape: NodeShape,
}

/// One edge to draw; `from`/`to` index into the node slice.
#[derive(Debug, Clone, Copy)]
pub struct SvgEdge<'a> {
    /// Index of the tail node.
    pub from: usize,
    /// Index of the head node.
    pub to: usize,
    /// Label text; empty for none.
    pub label: &'a str,
}

/// One cluster to draw: a labelled box around its nodes (a Graphviz `subgraph cluster…`).
#[derive(Debug, Clone)]
pub struct SvgCluster<'a> {
    /// Subgraph name; it becomes the group id `cluster-{name}` (escaped).
    pub name: &'a str,
    /// Label text, drawn at the top of the box; empty for none.
    pub label: &'a str,
    /// Indices into the node slice of the nodes inside, those of nested clusters included.
    pub nodes: Vec<usize>,
    /// Index of the innermost enclosing cluster; it must come earlier in the cluster slice.
    pub parent: Option<usize>,
}

/// Margin around the drawing.
const MARGIN: f64 = 12.0;
const EDGE_COLOR: &str = "#555555";
const CLUSTER_COLOR: &str = "#888888";
/// Room between a cluster's box and what it holds.
const CLUSTER_PADDING: f64 = 8.0;

/// Renders a complete standalone SVG document.
///
/// Every node becomes one `<g class="node" id="node-{id}">`, in input order.
/// Every edge whose `from` and `to` are in range becomes one `<g class="edge">`, in input order; others are skipped.
/// Self-loops are drawn as loops beside their node, parallel edges along separate curves, cycles with their
/// back edges bent around.
/// Never panics; an empty graph yields an empty but valid document.
pub fn render_svg(
    title: &str,
    rankdir: RankDir,
    nodes: &[SvgNode<'_>],
    edges: &[SvgEdge<'_>],
) -> String {
    render_clustered_svg(title, rankdir, nodes, edges, &[])
}

/// [`render_svg`] with clusters: each cluster with nodes in range becomes one
/// `<g class="cluster" id="cluster-{name}">` holding a `<rect>` around its nodes and nested clusters and, when
/// labelled, a `<text>` at its top; clusters are written before edges and nodes, outer ones first.
///
/// The view box holds every node, cluster, edge (control points included) and label; it starts at the origin
/// unless something reaches above or left of it, so the coordinates of a drawing do not move when a part of it
/// grows the box.
pub fn render_clustered_svg(
    title: &str,
    rankdir: RankDir,
    nodes: &[SvgNode<'_>],
    edges: &[SvgEdge<'_>],
    clusters: &[SvgCluster<'_>],
) -> String {
    let scene = Scene::new(title, rankdir, nodes, edges, clusters);
    let mut out = String::new();
    let (origin, size) = (scene.view.min, scene.view.max - scene.view.min);
    let _ = write!(
        out,
        concat!(
            r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#,
            "\n",
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="{x} {y} {w} {h}" "#,
            r#"font-family="Helvetica,Arial,sans-serif" font-size="{size}">"#,
            "\n<title>{title}</title>\n",
        ),
        x = number(origin.x),
        y = number(origin.y),
        w = number(size.x),
        h = number(size.y),
        size = number(NODE_FONT_SIZE),
        title = escape(title)
    );
    if origin == Point::default() {
        out.push_str(r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    } else {
        let _ = write!(
            out,
            r##"<rect x="{}" y="{}" width="100%" height="100%" fill="#ffffff"/>"##,
            number(origin.x),
            number(origin.y)
        );
    }
    out.push('\n');
    for (cluster, drawn) in clusters.iter().zip(&scene.clusters) {
        if let Some((bounds, label)) = drawn {
            write_cluster(&mut out, cluster.name, bounds, label);
        }
    }
    for (index, drawing) in scene.edges.iter().enumerate() {
        if let Some(drawing) = drawing {
            scene.write_edge(&mut out, index, drawing);
        }
    }
    for (index, node) in nodes.iter().enumerate() {
        scene.write_node(&mut out, index, node);
    }
    out.push_str("</svg>\n");
    out
}

/// Writes a cluster as a `<g class="cluster">` holding its box and label.
fn write_cluster(out: &mut String, name: &str, bounds: &Bounds, label: &Label) {
    let _ = write!(
        out,
        r#"<g class="cluster" id="cluster-{}"><rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="none" stroke="{CLUSTER_COLOR}"/>"#,
        escape(name),
        number(bounds.min.x),
        number(bounds.min.y),
        number(bounds.max.x - bounds.min.x),
        number(bounds.max.y - bounds.min.y)
    );
    let center = Point::new(
        (bounds.min.x + bounds.max.x) / 2.0,
        bounds.min.y + CLUSTER_PADDING / 2.0 + label.size().height / 2.0,
    );
    label.write(out, center);
    out.push_str("</g>\n");
}

/// What one drawable edge becomes.
struct EdgeDrawing {
    stroke: Option<Stroke>,
    label: Option<Point>,
}

/// Everything measured and placed, in document coordinates, ready to be written.
struct Scene {
    node_labels: Vec<Label>,
    node_sizes: Vec<Size>,
    /// Node centres.
    centers: Vec<Point>,
    edge_labels: Vec<Label>,
    /// Per edge, its drawing; `None` for an edge whose ends are out of range.
    edges: Vec<Option<EdgeDrawing>>,
    /// Per cluster, its box and label; `None` for a cluster with nothing to surround.
    clusters: Vec<Option<(Bounds, Label)>>,
    /// The view box, margins included.
    view: Bounds,
}

impl Scene {
    fn new(
        title: &str,
        rankdir: RankDir,
        nodes: &[SvgNode<'_>],
        edges: &[SvgEdge<'_>],
        clusters: &[SvgCluster<'_>],
    ) -> Scene {
        let node_labels: Vec<Label> = nodes
            .iter()
            .map(|node| {
                let names = Names {
                    node: Some(node.id),
                    graph: title,
                };
                Label::parse(node.label, names, NODE_FONT_SIZE)
            })
            .collect();
        let node_sizes: Vec<Size> = nodes
            .iter()
            .zip(&node_labels)
            .map(|(node, label)| shape::node_size(node.shape, label.size()))
            .collect();
        let edge_labels: Vec<Label> = edges
            .iter()
            .map(|edge| {
                let names = Names {
                    node: None,
                    graph: title,
                };
                Label::parse(edge.label, names, EDGE_FONT_SIZE)
            })
            .collect();
        let loop_plans = loop_plans(rankdir, nodes.len(), edges, &edge_labels);
        let placement = Placement::new(
            rankdir,
            nodes,
            &node_sizes,
            &loop_plans,
            edges,
            &edge_labels,
        );
        let drawings = placement.draw_edges(rankdir, edges, &node_sizes, &loop_plans);
        let cluster_boxes = cluster_boxes(
            clusters,
            &placement.centers,
            &node_sizes,
            &loop_plans,
            rankdir,
            title,
        );
        let view = view_box(placement.size, &drawings, &edge_labels, &cluster_boxes);
        Scene {
            node_labels,
            node_sizes,
            centers: placement.centers,
            edge_labels,
            edges: drawings,
            clusters: cluster_boxes,
            view,
        }
    }

    /// Writes edge `index` as a `<g class="edge">`.
    fn write_edge(&self, out: &mut String, index: usize, drawing: &EdgeDrawing) {
        out.push_str(r#"<g class="edge">"#);
        if let Some(stroke) = &drawing.stroke {
            let _ = write!(
                out,
                r#"<path d="{}" fill="none" stroke="{EDGE_COLOR}" stroke-width="1.2"/><polygon points="{}" fill="{EDGE_COLOR}" stroke="{EDGE_COLOR}"/>"#,
                stroke.path,
                shape::points(&stroke.arrow)
            );
        }
        if let (Some(label), Some(center)) = (self.edge_labels.get(index), drawing.label) {
            label.write(out, center);
        }
        out.push_str("</g>\n");
    }

    /// Writes node `index` as a `<g class="node" id="node-{id}">` holding its outline and label.
    fn write_node(&self, out: &mut String, index: usize, node: &SvgNode<'_>) {
        let (Some(&center), Some(&size), Some(label)) = (
            self.centers.get(index),
            self.node_sizes.get(index),
            self.node_labels.get(index),
        ) else {
            return;
        };
        let _ = write!(out, r#"<g class="node" id="node-{}">"#, escape(node.id));
        shape::write(out, node.shape, center, size);
        label.write(out, shape::label_center(node.shape, center, size));
        out.push_str("</g>\n");
    }
}
/// The size of edge `index`'s label, `None` when it has none.
fn edge_label_size(edge_labels: &[Label], index: usize) -> Option<Size> {
    edge_labels
        .get(index)
        .filter(|label| !label.is_empty())
        .map(Label::size)
}

/// Per node, the plan of its self-loops: numbered per node, innermost first, in input
/// order.
fn loop_plans(
    rankdir: RankDir,
    node_count: usize,
    edges: &[SvgEdge<'_>],
    edge_labels: &[Label],
) -> Vec<LoopPlan> {
    let mut loops: Vec<Vec<Option<Size>>> = vec![Vec::new(); node_count];
    for (index, edge) in edges.iter().enumerate() {
        if edge.from == edge.to {
            if let Some(list) = loops.get_mut(edge.from) {
                list.push(edge_label_size(edge_labels, index));
            }
        }
    }
    loops
        .iter()
        .map(|labels| LoopPlan::new(rankdir, labels))
        .collect()
}

/// The layout's result moved into document coordinates: the drawing starts at the margin.
struct Placement {
    /// The drawing's size, margins included.
    size: Size,
    /// Node centres.
    centers: Vec<Point>,
    /// Node outlines around their centres.
    outlines: Vec<Vec<Point>>,
    /// Per edge, the route the layout gave it.
    routes: Vec<EdgeRoute>,
}

impl Placement {
    /// Lays the nodes and edges out and shifts the result by the margin.
    fn new(
        rankdir: RankDir,
        nodes: &[SvgNode<'_>],
        node_sizes: &[Size],
        loop_plans: &[LoopPlan],
        edges: &[SvgEdge<'_>],
        edge_labels: &[Label],
    ) -> Placement {
        let layout_nodes: Vec<LayoutNode> = nodes
            .iter()
            .zip(node_sizes)
            .zip(loop_plans)
            .map(|((node, &size), plan)| LayoutNode {
                size,
                reserve: plan.reserve(),
                root: node.shape == NodeShape::Mdiamond,
            })
            .collect();
        let layout_edges: Vec<LayoutEdge> = edges
            .iter()
            .enumerate()
            .map(|(index, edge)| LayoutEdge {
                from: edge.from,
                to: edge.to,
                label: edge_label_size(edge_labels, index),
            })
            .collect();
        let placed = layout::compute(rankdir, &layout_nodes, &layout_edges);

        // Shift everything so the drawing starts at the margin.
        let offset = Point::new(MARGIN, MARGIN) - placed.bounds.min;
        let size = Size::new(
            placed.bounds.max.x - placed.bounds.min.x + 2.0 * MARGIN,
            placed.bounds.max.y - placed.bounds.min.y + 2.0 * MARGIN,
        );
        let centers: Vec<Point> = placed.nodes.iter().map(|&center| center + offset).collect();
        let outlines: Vec<Vec<Point>> = nodes
            .iter()
            .zip(&centers)
            .zip(node_sizes)
            .map(|((node, &center), &size)| shape::outline(node.shape, center, size))
            .collect();
        let routes: Vec<EdgeRoute> = placed
            .edges
            .into_iter()
            .map(|route| EdgeRoute {
                points: route.points.iter().map(|&point| point + offset).collect(),
                label: route.label.map(|center| center + offset),
            })
            .collect();
        Placement {
            size,
            centers,
            outlines,
            routes,
        }
    }

    /// Per edge, its drawing; `None` for an edge whose ends are out of range.
    fn draw_edges(
        &self,
        rankdir: RankDir,
        edges: &[SvgEdge<'_>],
        node_sizes: &[Size],
        loop_plans: &[LoopPlan],
    ) -> Vec<Option<EdgeDrawing>> {
        let (centers, outlines) = (&self.centers, &self.outlines);
        // Edges are drawn in input order; `loops_drawn` counts the self-loops already drawn per node, which
        // picks the next loop's place.
        let count = centers.len().min(node_sizes.len()).min(outlines.len());
        let mut loops_drawn = vec![0usize; loop_plans.len()];
        edges
            .iter()
            .enumerate()
            .map(|(index, edge)| {
                if edge.from >= count || edge.to >= count {
                    return None;
                }
                if edge.from == edge.to {
                    let drawn = loops_drawn.get_mut(edge.from)?;
                    let placed = loop_plans.get(edge.from).and_then(|plan| {
                        plan.stroke(
                            rankdir,
                            *drawn,
                            centers[edge.from],
                            node_sizes[edge.from],
                            &outlines[edge.from],
                        )
                    });
                    *drawn += 1;
                    return Some(match placed {
                        Some((stroke, label)) => EdgeDrawing {
                            stroke: Some(stroke),
                            label,
                        },
                        None => EdgeDrawing {
                            stroke: None,
                            label: None,
                        },
                    });
                }
                let route = self.routes.get(index);
                let stroke = route::edge_stroke(
                    route.map_or(&[][..], |route| route.points.as_slice()),
                    &outlines[edge.from],
                    &outlines[edge.to],
                );
                Some(EdgeDrawing {
                    stroke,
                    label: route.and_then(|route| route.label),
                })
            })
            .collect()
    }
}

/// The view box: the layout's bounds (`size`) with their margins, grown to hold whatever
/// reaches further (curves bending past their bends, clusters' boxes) with a margin of its
/// own.
fn view_box(
    size: Size,
    drawings: &[Option<EdgeDrawing>],
    edge_labels: &[Label],
    cluster_boxes: &[Option<(Bounds, Label)>],
) -> Bounds {
    let mut reach = Bounds::EMPTY;
    for (drawing, label) in drawings.iter().zip(edge_labels) {
        let Some(drawing) = drawing else { continue };
        if let Some(stroke) = &drawing.stroke {
            reach.include(stroke.extent.min);
            reach.include(stroke.extent.max);
        }
        if let Some(center) = drawing.label.filter(|_| !label.is_empty()) {
            reach.include_box(center, label.size());
        }
    }
    for (bounds, _) in cluster_boxes.iter().flatten() {
        reach.include(bounds.min);
        reach.include(bounds.max);
    }
    let mut view = Bounds {
        min: Point::default(),
        max: Point::new(size.width, size.height),
    };
    if !reach.is_empty() {
        let margin = Point::new(MARGIN, MARGIN);
        view.include(reach.min - margin);
        view.include(reach.max + margin);
    }
    view
}

/// The box and label of every cluster, in document coordinates: its nodes (with their self-loops' room) and
/// nested clusters, padded, with room for the label on top; `None` for a cluster holding no node in range.
fn cluster_boxes(
    clusters: &[SvgCluster<'_>],
    centers: &[Point],
    node_sizes: &[Size],
    loop_plans: &[LoopPlan],
    rankdir: RankDir,
    title: &str,
) -> Vec<Option<(Bounds, Label)>> {
    let mut boxes: Vec<Bounds> = clusters
        .iter()
        .map(|cluster| {
            let mut bounds = Bounds::EMPTY;
            for &node in &cluster.nodes {
                let (Some(&center), Some(&size)) = (centers.get(node), node_sizes.get(node)) else {
                    continue;
                };
                let reserve = loop_plans.get(node).map_or(0.0, LoopPlan::reserve);
                let room = match rankdir {
                    RankDir::TopToBottom | RankDir::BottomToTop => {
                        Size::new(size.width + 2.0 * reserve, size.height)
                    }
                    RankDir::LeftToRight | RankDir::RightToLeft => {
                        Size::new(size.width, size.height + 2.0 * reserve)
                    }
                };
                bounds.include_box(center, room);
            }
            bounds
        })
        .collect();
    let mut drawn = vec![None; clusters.len()];
    // Nested clusters come after their parents, so going backwards finishes every cluster before its parent.
    for index in (0..clusters.len()).rev() {
        let mut bounds = boxes[index];
        if bounds.is_empty() {
            continue;
        }
        let names = Names {
            node: None,
            graph: title,
        };
        let label = Label::parse(clusters[index].label, names, NODE_FONT_SIZE);
        let label_size = if label.is_empty() {
            Size::default()
        } else {
            label.size()
        };
        let top = CLUSTER_PADDING + label_size.height;
        bounds.min = bounds.min - Point::new(CLUSTER_PADDING, top);
        bounds.max = bounds.max + Point::new(CLUSTER_PADDING, CLUSTER_PADDING);
        let short = label_size.width + 2.0 * CLUSTER_PADDING - (bounds.max.x - bounds.min.x);
        if short > 0.0 {
            bounds.min.x -= short / 2.0;
            bounds.max.x += short / 2.0;
        }
        if let Some(parent) = clusters[index].parent.filter(|&parent| parent < index) {
            boxes[parent].include(bounds.min);
            boxes[parent].include(bounds.max);
        }
        drawn[index] = Some((bounds, label));
    }
    drawn
}

/// Formats a coordinate with at most two decimals and no trailing zeros; non-finite values become 0.
fn number(value: f64) -> String {
    if !value.is_finite() {
        return "0".to_owned();
    }
    let rounded = (value * 100.0).round() / 100.0;
    // Avoid "-0" after rounding tiny negatives.
    let rounded = if rounded == 0.0 { 0.0 } else { rounded };
    let text = format!("{rounded:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node<'a>(id: &'a str, label: &'a str, shape: NodeShape) -> SvgNode<'a> {
        SvgNode { id, label, shape }
    }

    fn edge(from: usize, to: usize, label: &str) -> SvgEdge<'_> {
        SvgEdge { from, to, label }
    }

    fn small_workflow() -> (Vec<SvgNode<'static>>, Vec<SvgEdge<'static>>) {
        let nodes = vec![
            node("start", "Start", NodeShape::Mdiamond),
            node("plan", "Plan", NodeShape::Box),
            node("check", "Tests pass?", NodeShape::Diamond),
            node("exit", "Exit", NodeShape::Msquare),
        ];
        let edges = vec![
            edge(0, 1, ""),
            edge(1, 2, ""),
            edge(2, 3, "yes"),
            edge(2, 1, "no"),
        ];
        (nodes, edges)
    }

    /// Checks that `svg` is well-formed XML (balanced tags, quoted attributes, known entities) and returns the
    /// start tags in order, each as its element name and raw attribute text.
    fn parse(svg: &str) -> Vec<(String, String)> {
        let mut tags = Vec::new();
        let mut open: Vec<String> = Vec::new();
        let mut rest = svg;
        let mut roots = 0;
        while let Some(at) = rest.find('<') {
            check_text(&rest[..at]);
            rest = &rest[at..];
            if let Some(after) = rest.strip_prefix("<?") {
                let end = after.find("?>").expect("processing instruction is closed");
                rest = &after[end + 2..];
                continue;
            }
            let end = rest.find('>').expect("tag is closed");
            let tag = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "closing tag matches");
                continue;
            }
            let (body, empty) = match tag.strip_suffix('/') {
                Some(body) => (body, true),
                None => (tag, false),
            };
            let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
            let (name, attributes) = body.split_at(name_end);
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            );
            check_attributes(attributes);
            if open.is_empty() {
                roots += 1;
            }
            tags.push((name.to_owned(), attributes.to_owned()));
            if !empty {
                open.push(name.to_owned());
            }
        }
        check_text(rest);
        assert!(open.is_empty(), "unclosed elements: {open:?}");
        assert_eq!(roots, 1, "one root element");
        tags
    }

    fn check_attributes(mut text: &str) {
        let mut names = Vec::new();
        loop {
            text = text.trim_start();
            if text.is_empty() {
                return;
            }
            let equals = text.find('=').expect("attribute has a value");
            let name = &text[..equals];
            assert!(!names.contains(&name), "attribute {name} repeated");
            names.push(name);
            let value = text[equals + 1..]
                .strip_prefix('"')
                .expect("value is quoted");
            let close = value.find('"').expect("value is closed");
            check_text(&value[..close]);
            assert!(!value[..close].contains('<'));
            text = &value[close + 1..];
        }
    }

    fn check_text(text: &str) {
        assert!(!text.contains('>') || !text.contains('<'));
        let mut rest = text;
        while let Some(at) = rest.find('&') {
            let end = rest[at..].find(';').expect("entity is closed") + at;
            let entity = &rest[at + 1..end];
            assert!(
                ["amp", "lt", "gt", "quot", "apos"].contains(&entity),
                "unknown entity {entity}"
            );
            rest = &rest[end + 1..];
        }
    }

    /// Contents of every `<g class="node" …>` group, keyed by id attribute text.
    fn node_groups(svg: &str) -> Vec<&str> {
        svg.split(r#"<g class="node""#)
            .skip(1)
            .map(|group| group.find("</g>").map_or(group, |end| &group[..end + 4]))
            .collect()
    }

    /// Parses the `x`/`y` of every node outline from the output: the centre of its first element's box.
    fn node_boxes(svg: &str) -> Vec<geometry::Bounds> {
        node_groups(svg)
            .iter()
            .map(|group| {
                let mut bounds = geometry::Bounds::EMPTY;
                for (name, attributes) in parse(&format!("<g{group}")) {
                    let get = |key: &str| -> Option<f64> {
                        let start = attributes.find(&format!(" {key}=\""))? + key.len() + 3;
                        let end = attributes[start..].find('"')? + start;
                        attributes[start..end].parse().ok()
                    };
                    match name.as_str() {
                        "rect" => {
                            let (x, y) = (get("x").unwrap(), get("y").unwrap());
                            bounds.include(Point::new(x, y));
                            bounds.include(Point::new(
                                x + get("width").unwrap(),
                                y + get("height").unwrap(),
                            ));
                        }
                        "polygon" => {
                            let start = attributes.find("points=\"").unwrap() + 8;
                            let end = attributes[start..].find('"').unwrap() + start;
                            for pair in attributes[start..end].split(' ') {
                                let (x, y) = pair.split_once(',').unwrap();
                                bounds.include(Point::new(x.parse().unwrap(), y.parse().unwrap()));
                            }
                        }
                        "ellipse" => {
                            let (x, y) = (get("cx").unwrap(), get("cy").unwrap());
                            let (rx, ry) = (get("rx").unwrap(), get("ry").unwrap());
                            bounds.include(Point::new(x - rx, y - ry));
                            bounds.include(Point::new(x + rx, y + ry));
                        }
                        _ => {}
                    }
                }
                bounds
            })
            .collect()
    }

    fn center(bounds: &geometry::Bounds) -> Point {
        (bounds.min + bounds.max) * 0.5
    }

    #[test]
    fn small_workflow_has_one_group_per_node_and_edge() {
        let (nodes, edges) = small_workflow();
        let svg = render_svg("demo", RankDir::TopToBottom, &nodes, &edges);
        parse(&svg);
        assert!(svg.contains(r#"<svg xmlns="http://www.w3.org/2000/svg""#));
        assert!(svg.contains("viewBox=\"0 0 "));
        assert!(svg.contains("<title>demo</title>"));
        assert_eq!(svg.matches(r#"<g class="node""#).count(), 4);
        assert_eq!(svg.matches(r#"<g class="edge">"#).count(), 4);
        for id in ["start", "plan", "check", "exit"] {
            assert_eq!(
                svg.matches(&format!(r#"<g class="node" id="node-{id}">"#))
                    .count(),
                1
            );
        }
        let groups = node_groups(&svg);
        assert!(groups[2].contains(">Tests pass?</text>"));
        let edge_groups: Vec<&str> = svg.split(r#"<g class="edge">"#).skip(1).collect();
        assert!(!edge_groups[0].contains("<text"));
        assert!(edge_groups[2].contains(">yes</text>"));
        assert!(edge_groups[3].contains(">no</text>"));
        for group in edge_groups {
            assert!(group.contains("<path d=\"M") && group.contains("<polygon"));
        }
    }

    #[test]
    fn labels_and_ids_are_escaped() {
        let nodes = [
            node("a", r#"<b> & "q" 'x'"#, NodeShape::Box),
            node("b&c", "B", NodeShape::Box),
        ];
        let edges = [edge(0, 1, "x < y && z")];
        let svg = render_svg("T<&>", RankDir::TopToBottom, &nodes, &edges);
        parse(&svg);
        assert!(svg.contains(">&lt;b&gt; &amp; &quot;q&quot; &apos;x&apos;</text>"));
        assert!(svg.contains(r#"id="node-b&amp;c""#));
        assert!(svg.contains(">x &lt; y &amp;&amp; z</text>"));
        assert!(svg.contains("<title>T&lt;&amp;&gt;</title>"));
    }

    #[test]
    fn multi_line_labels_become_tspans() {
        let nodes = [node("a", r"first\nsecond", NodeShape::Box)];
        let svg = render_svg("t", RankDir::TopToBottom, &nodes, &[]);
        parse(&svg);
        let group = node_groups(&svg)[0];
        assert_eq!(group.matches("<text").count(), 1);
        assert!(group.contains(">first</tspan>") && group.contains(">second</tspan>"));
        assert!(!group.contains(r"\n"));
    }

    #[test]
    fn rankdir_left_to_right_puts_successive_ranks_at_increasing_x() {
        let (nodes, edges) = small_workflow();
        let svg = render_svg("t", RankDir::LeftToRight, &nodes, &edges);
        let centers: Vec<Point> = node_boxes(&svg).iter().map(center).collect();
        assert!(centers[0].x < centers[1].x);
        assert!(centers[1].x < centers[2].x);
        assert!(centers[2].x < centers[3].x);
        let top_down = render_svg("t", RankDir::TopToBottom, &nodes, &edges);
        let centers: Vec<Point> = node_boxes(&top_down).iter().map(center).collect();
        assert!(centers[0].y < centers[1].y && centers[2].y < centers[3].y);
        let bottom_up = render_svg("t", RankDir::BottomToTop, &nodes, &edges);
        let centers: Vec<Point> = node_boxes(&bottom_up).iter().map(center).collect();
        assert!(centers[0].y > centers[1].y && centers[2].y > centers[3].y);
    }

    #[test]
    fn cycles_self_loops_and_parallel_edges_are_all_drawn() {
        let nodes = [
            node("a", "A", NodeShape::Box),
            node("b", "B", NodeShape::Diamond),
            node("c", "C", NodeShape::Hexagon),
        ];
        let edges = [
            edge(0, 1, ""),
            edge(1, 2, ""),
            edge(2, 0, "again"),
            edge(1, 1, "retry"),
            edge(1, 1, ""),
            edge(0, 1, "twice"),
            edge(0, 1, "twice"),
        ];
        let svg = render_svg("t", RankDir::TopToBottom, &nodes, &edges);
        parse(&svg);
        let groups: Vec<&str> = svg.split(r#"<g class="edge">"#).skip(1).collect();
        assert_eq!(groups.len(), edges.len());
        let paths: Vec<&str> = groups
            .iter()
            .map(|group| {
                let start = group.find("d=\"").expect("edge has a path") + 3;
                &group[start..start + group[start..].find('"').expect("closed")]
            })
            .collect();
        for (index, path) in paths.iter().enumerate() {
            for other in &paths[index + 1..] {
                assert_ne!(path, other, "every edge follows its own curve");
            }
        }
        assert!(groups[3].contains(">retry</text>"));
    }

    #[test]
    fn disconnected_components_do_not_overlap() {
        let nodes = [
            node("a", "A", NodeShape::Box),
            node("b", "B", NodeShape::Box),
            node("c", "A much longer label", NodeShape::Box),
            node("d", "D", NodeShape::Tab),
            node("lonely", "Lonely", NodeShape::Other),
        ];
        let edges = [edge(0, 1, ""), edge(2, 3, "go")];
        for rankdir in [RankDir::TopToBottom, RankDir::LeftToRight] {
            let svg = render_svg("t", rankdir, &nodes, &edges);
            let boxes = node_boxes(&svg);
            assert_eq!(boxes.len(), 5);
            for (index, one) in boxes.iter().enumerate() {
                for other in &boxes[index + 1..] {
                    assert!(!one.overlaps(other), "{rankdir:?}: {one:?} {other:?}");
                }
            }
        }
    }

    #[test]
    fn empty_graph_is_a_valid_document() {
        let svg = render_svg("empty", RankDir::TopToBottom, &[], &[]);
        let tags = parse(&svg);
        assert_eq!(tags[0].0, "svg");
        assert!(svg.contains("<title>empty</title>"));
        assert!(!svg.contains("class=\"node\"") && !svg.contains("class=\"edge\""));
    }

    #[test]
    fn out_of_range_edges_are_skipped() {
        let nodes = [
            node("a", "A", NodeShape::Box),
            node("b", "B", NodeShape::Box),
        ];
        let edges = [
            edge(0, 7, "lost"),
            edge(0, 1, "kept"),
            edge(usize::MAX, 0, ""),
        ];
        let svg = render_svg("t", RankDir::TopToBottom, &nodes, &edges);
        parse(&svg);
        assert_eq!(svg.matches(r#"<g class="edge">"#).count(), 1);
        assert!(svg.contains(">kept</text>") && !svg.contains("lost"));
    }

    #[test]
    fn every_shape_renders_inside_the_view_box() {
        let shapes = [
            NodeShape::Box,
            NodeShape::Mdiamond,
            NodeShape::Msquare,
            NodeShape::Tab,
            NodeShape::Parallelogram,
            NodeShape::Hexagon,
            NodeShape::Diamond,
            NodeShape::Component,
            NodeShape::TripleOctagon,
            NodeShape::Insulator,
            NodeShape::House,
            NodeShape::Other,
        ];
        let ids: Vec<String> = (0..shapes.len()).map(|index| format!("n{index}")).collect();
        let nodes: Vec<SvgNode<'_>> = shapes
            .iter()
            .zip(&ids)
            .map(|(&shape, id)| node(id, id, shape))
            .collect();
        let edges: Vec<SvgEdge<'_>> = (1..shapes.len())
            .map(|index| edge(index - 1, index, ""))
            .collect();
        let svg = render_svg("shapes", RankDir::LeftToRight, &nodes, &edges);
        parse(&svg);
        let view_box = svg.split("viewBox=\"0 0 ").nth(1).expect("view box");
        let mut sizes = view_box
            .split(['"', ' '])
            .map(|part| part.parse::<f64>().unwrap());
        let (width, height) = (sizes.next().unwrap(), sizes.next().unwrap());
        for bounds in node_boxes(&svg) {
            assert!(bounds.min.x >= 0.0 && bounds.min.y >= 0.0);
            assert!(bounds.max.x <= width && bounds.max.y <= height);
        }
    }

    #[test]
    fn output_is_deterministic() {
        let (nodes, mut edges) = small_workflow();
        edges.push(edge(3, 0, "restart"));
        edges.push(edge(1, 1, "self"));
        let first = render_svg("t", RankDir::TopToBottom, &nodes, &edges);
        for _ in 0..5 {
            assert_eq!(render_svg("t", RankDir::TopToBottom, &nodes, &edges), first);
        }
    }

    #[test]
    fn random_graphs_render_without_the_fallback() {
        // A small xorshift generator keeps the cases fixed without a dependency.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % 1_000_000).unwrap() % bound
        };
        for case in 0..200 {
            let count = 1 + next(12);
            let ids: Vec<String> = (0..count).map(|index| format!("n{index}")).collect();
            let nodes: Vec<SvgNode<'_>> =
                ids.iter().map(|id| node(id, id, NodeShape::Box)).collect();
            let edges: Vec<SvgEdge<'_>> = (0..next(3 * count))
                .map(|_| {
                    edge(
                        next(count + 1),
                        next(count),
                        if next(2) == 0 { "" } else { "l" },
                    )
                })
                .collect();
            let layout_nodes: Vec<LayoutNode> = nodes
                .iter()
                .map(|_| LayoutNode {
                    size: Size::new(50.0, 30.0),
                    reserve: 0.0,
                    root: false,
                })
                .collect();
            let layout_edges: Vec<LayoutEdge> = edges
                .iter()
                .map(|edge| LayoutEdge {
                    from: edge.from,
                    to: edge.to,
                    label: None,
                })
                .collect();
            let placed = layout::compute(RankDir::TopToBottom, &layout_nodes, &layout_edges);
            assert!(
                !placed.fallback,
                "case {case}: {:?}",
                edges.iter().map(|e| (e.from, e.to)).collect::<Vec<_>>()
            );
            let svg = render_svg("t", RankDir::TopToBottom, &nodes, &edges);
            parse(&svg);
            let drawable = edges
                .iter()
                .filter(|edge| edge.from < count && edge.to < count)
                .count();
            assert_eq!(svg.matches(r#"<g class="edge">"#).count(), drawable);
        }
    }

    #[test]
    fn large_chain_with_branches_renders_quickly() {
        let count = 2000;
        let ids: Vec<String> = (0..count).map(|index| format!("n{index}")).collect();
        let nodes: Vec<SvgNode<'_>> = ids.iter().map(|id| node(id, id, NodeShape::Box)).collect();
        let mut edges = Vec::new();
        let mut index = 0;
        while index + 3 < count {
            edges.push(edge(index, index + 1, ""));
            edges.push(edge(index, index + 2, "branch"));
            edges.push(edge(index + 1, index + 3, ""));
            edges.push(edge(index + 2, index + 3, ""));
            index += 3;
        }
        edges.push(edge(count - 2, count - 1, ""));
        edges.push(edge(count - 1, 0, "restart"));
        let started = std::time::Instant::now();
        let svg = render_svg("big", RankDir::TopToBottom, &nodes, &edges);
        let elapsed = started.elapsed();
        assert_eq!(svg.matches(r#"<g class="node""#).count(), count);
        assert_eq!(svg.matches(r#"<g class="edge">"#).count(), edges.len());
        // Generous for debug builds on slow machines; release takes a fraction of this.
        assert!(elapsed.as_secs() < 60, "took {elapsed:?}");
    }

    #[test]
    fn clusters_are_boxes_around_their_nodes_and_nested_clusters() {
        let (nodes, edges) = small_workflow();
        let clusters = [
            SvgCluster {
                name: "cluster_outer",
                label: "Outer & co",
                nodes: vec![1, 2],
                parent: None,
            },
            SvgCluster {
                name: "cluster_inner",
                label: "",
                nodes: vec![2],
                parent: Some(0),
            },
            SvgCluster {
                name: "cluster_empty",
                label: "Nothing",
                nodes: vec![99],
                parent: None,
            },
        ];
        let svg = render_clustered_svg("t", RankDir::TopToBottom, &nodes, &edges, &clusters);
        parse(&svg);
        let boxes: Vec<geometry::Bounds> = ["cluster_outer", "cluster_inner"]
            .iter()
            .map(|name| {
                let group = svg
                    .split(&format!(r#"<g class="cluster" id="cluster-{name}"><rect"#))
                    .nth(1)
                    .expect("cluster drawn");
                let get = |key: &str| -> f64 {
                    let start =
                        group.find(&format!(" {key}=\"")).expect("attribute") + key.len() + 3;
                    let end = group[start..].find('"').expect("closed") + start;
                    group[start..end].parse().expect("number")
                };
                let mut bounds = geometry::Bounds::EMPTY;
                bounds.include(Point::new(get("x"), get("y")));
                bounds.include(Point::new(
                    get("x") + get("width"),
                    get("y") + get("height"),
                ));
                bounds
            })
            .collect();
        assert!(svg.contains(">Outer &amp; co</text>"));
        assert!(
            !svg.contains("cluster_empty"),
            "a cluster without nodes is not drawn"
        );
        let node_bounds = node_boxes(&svg);
        let within = |inner: &geometry::Bounds, outer: &geometry::Bounds| {
            outer.min.x < inner.min.x
                && outer.min.y < inner.min.y
                && inner.max.x < outer.max.x
                && inner.max.y < outer.max.y
        };
        assert!(within(&node_bounds[1], &boxes[0]) && within(&node_bounds[2], &boxes[0]));
        assert!(within(&node_bounds[2], &boxes[1]) && within(&boxes[1], &boxes[0]));
        assert!(!within(&node_bounds[0], &boxes[0]) && !within(&node_bounds[3], &boxes[0]));
        // Clusters come first, so nodes and edges are drawn over them.
        assert!(svg.find("class=\"cluster\"") < svg.find("class=\"edge\""));
    }

    #[test]
    fn view_box_holds_every_curve_and_label() {
        // A back edge over several ranks bends out past its bends; its control points must stay visible.
        let nodes = [
            node("start", "Start", NodeShape::Mdiamond),
            node("a", "A", NodeShape::Box),
            node("b", "B", NodeShape::Box),
            node("c", "C", NodeShape::Box),
            node("exit", "Exit", NodeShape::Msquare),
        ];
        let edges = [
            edge(0, 1, ""),
            edge(1, 2, ""),
            edge(2, 3, ""),
            edge(3, 4, "done"),
            edge(3, 1, "a long label on the way back"),
            edge(4, 0, "again"),
        ];
        for rankdir in [
            RankDir::TopToBottom,
            RankDir::LeftToRight,
            RankDir::RightToLeft,
        ] {
            let svg = render_svg("t", rankdir, &nodes, &edges);
            parse(&svg);
            let view: Vec<f64> = svg
                .split("viewBox=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .expect("view box")
                .split(' ')
                .map(|number| number.parse().expect("number"))
                .collect();
            for group in svg.split(r#"<g class="edge">"#).skip(1) {
                let start = group.find("d=\"").expect("path") + 3;
                let path = &group[start..start + group[start..].find('"').expect("closed")];
                for pair in path.split(' ') {
                    let (x, y) = pair
                        .trim_start_matches(char::is_alphabetic)
                        .split_once(',')
                        .expect("pair");
                    let (x, y): (f64, f64) = (x.parse().expect("x"), y.parse().expect("y"));
                    assert!(
                        view[0] <= x
                            && x <= view[0] + view[2]
                            && view[1] <= y
                            && y <= view[1] + view[3],
                        "{rankdir:?}: ({x}, {y}) outside {view:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_are_short_and_finite() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(1.256), "1.26");
        assert_eq!(number(-0.001), "0");
        assert_eq!(number(f64::NAN), "0");
        assert_eq!(number(12.5), "12.5");
    }
}
