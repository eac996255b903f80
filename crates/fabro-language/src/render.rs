//! Rendering workflows for people and for Graphviz: SVG with a built-in layered layout,
//! and normalised DOT text.

pub mod dot;
pub mod svg;

use crate::model::{RankDir, Workflow};
use svg::{NodeShape, SvgCluster, SvgEdge, SvgNode};

/// Renders `workflow` as a standalone SVG document (SPEC 12.1): one
/// `<g class="node" id="node-{id}">` per node and one `<g class="edge">` per edge, laid
/// out in layers along `rankdir`, and one `<g class="cluster" id="cluster-{name}">` box per
/// `subgraph cluster…`. `fallback_name` titles graphs without an id.
pub fn render_svg(workflow: &Workflow, fallback_name: &str) -> String {
    let nodes: Vec<SvgNode<'_>> = workflow
        .nodes()
        .iter()
        .map(|node| SvgNode {
            id: &node.id,
            label: node.label(),
            shape: shape(node.shape()),
        })
        .collect();
    let edges: Vec<SvgEdge<'_>> = workflow
        .edges()
        .iter()
        .map(|edge| SvgEdge {
            from: edge.from.get(),
            to: edge.to.get(),
            label: edge.label(),
        })
        .collect();
    let rankdir = match workflow.settings.rankdir {
        RankDir::TopToBottom => svg::RankDir::TopToBottom,
        RankDir::LeftToRight => svg::RankDir::LeftToRight,
        RankDir::BottomToTop => svg::RankDir::BottomToTop,
        RankDir::RightToLeft => svg::RankDir::RightToLeft,
    };
    let title = if workflow.settings.label.is_empty() {
        workflow.name(fallback_name)
    } else {
        &workflow.settings.label
    };
    let clusters: Vec<SvgCluster<'_>> = workflow
        .clusters
        .iter()
        .map(|cluster| SvgCluster {
            name: &cluster.name,
            label: &cluster.label,
            nodes: cluster.nodes.iter().map(|node| node.get()).collect(),
            parent: cluster.parent,
        })
        .collect();
    svg::render_clustered_svg(title, rankdir, &nodes, &edges, &clusters)
}

fn shape(shape: &str) -> NodeShape {
    match shape {
        "box" | "rect" | "rectangle" | "square" => NodeShape::Box,
        "Mdiamond" => NodeShape::Mdiamond,
        "Msquare" => NodeShape::Msquare,
        "tab" => NodeShape::Tab,
        "parallelogram" => NodeShape::Parallelogram,
        "hexagon" => NodeShape::Hexagon,
        "diamond" => NodeShape::Diamond,
        "component" => NodeShape::Component,
        "tripleoctagon" => NodeShape::TripleOctagon,
        "insulator" => NodeShape::Insulator,
        "house" => NodeShape::House,
        _ => NodeShape::Other,
    }
}
