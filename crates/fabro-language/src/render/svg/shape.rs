//! Node shapes (SPEC 2.8): the size of each outline around its label, the convex outline edges are clipped to, and its SVG elements.
//!
//! Shapes keep their orientation whatever the rankdir, as in Graphviz.

use std::fmt::Write as _;

use super::geometry::{Point, Size};
use super::{number, NodeShape};

/// Padding between a label and a rectangular outline, per side.
const PAD_X: f64 = 12.0;
const PAD_Y: f64 = 7.0;
/// Smallest node, as Graphviz's default 0.75in × 0.5in.
const MIN_WIDTH: f64 = 54.0;
const MIN_HEIGHT: f64 = 36.0;
/// Gap between the nested outlines of Msquare, tripleoctagon and insulator.
const INSET: f64 = 4.0;
/// Height of the tab on a `tab` node.
const TAB_HEIGHT: f64 = 6.0;
/// Width of the two small rectangles on the left of a `component` node.
const EAR_WIDTH: f64 = 12.0;
const STROKE: &str = "#333333";

/// The outer size of a node of `shape` drawn around a label of size `label`.
pub(super) fn node_size(shape: NodeShape, label: Size) -> Size {
    let base = Size::new(
        (label.width + 2.0 * PAD_X).max(MIN_WIDTH),
        (label.height + 2.0 * PAD_Y).max(MIN_HEIGHT),
    );
    match shape {
        NodeShape::Box => base,
        NodeShape::Msquare => Size::new(base.width + 2.0 * INSET, base.height + 2.0 * INSET),
        NodeShape::Insulator => Size::new(base.width + 4.0 * INSET, base.height + 2.0 * INSET),
        NodeShape::Tab => Size::new(base.width, base.height + TAB_HEIGHT),
        NodeShape::Component => Size::new(base.width + EAR_WIDTH, base.height),
        NodeShape::Parallelogram => Size::new(base.width + 2.0 * skew(base.height), base.height),
        NodeShape::Hexagon => Size::new(base.width + 2.0 * hexagon_cut(base.height), base.height),
        NodeShape::Diamond | NodeShape::Mdiamond => {
            // A diamond of half-diagonals A, B holds a centred w × h box when w/2A + h/2B <= 1;
            // A = 0.9w and B = 1.2h satisfy it with a wide rather than tall diamond.
            let text = Size::new(label.width + 12.0, label.height + 6.0);
            Size::new(
                (1.8 * text.width).max(MIN_WIDTH + 10.0),
                (2.4 * text.height).max(MIN_HEIGHT + 4.0),
            )
        }
        NodeShape::TripleOctagon => {
            let height = base.height + 4.0 * INSET;
            Size::new(base.width + 4.0 * INSET + octagon_cut(height), height)
        }
        NodeShape::House => Size::new(base.width, base.height + roof(base.height)),
        NodeShape::Other => Size::new(
            ((label.width + 16.0) * std::f64::consts::SQRT_2).max(MIN_WIDTH),
            ((label.height + 8.0) * std::f64::consts::SQRT_2).max(MIN_HEIGHT),
        ),
    }
}

/// Where the label of a node centred on `center` goes: the middle of the shape's body.
pub(super) fn label_center(shape: NodeShape, center: Point, size: Size) -> Point {
    match shape {
        NodeShape::Tab => center + Point::new(0.0, TAB_HEIGHT / 2.0),
        NodeShape::Component => center + Point::new(EAR_WIDTH / 4.0, 0.0),
        NodeShape::House => {
            let body = size.height / (1.0 + ROOF_RATIO);
            center + Point::new(0.0, (size.height - body) / 2.0)
        }
        NodeShape::Box
        | NodeShape::Mdiamond
        | NodeShape::Msquare
        | NodeShape::Parallelogram
        | NodeShape::Hexagon
        | NodeShape::Diamond
        | NodeShape::TripleOctagon
        | NodeShape::Insulator
        | NodeShape::Other => center,
    }
}

/// The convex outline that edges end on, in absolute coordinates.
pub(super) fn outline(shape: NodeShape, center: Point, size: Size) -> Vec<Point> {
    let frame = Frame::new(center, size);
    match shape {
        NodeShape::Box
        | NodeShape::Msquare
        | NodeShape::Tab
        | NodeShape::Insulator
        | NodeShape::Component => frame.rect(0.0),
        NodeShape::Parallelogram => frame.parallelogram(),
        NodeShape::Hexagon => frame.hexagon(),
        NodeShape::Diamond | NodeShape::Mdiamond => frame.diamond(),
        NodeShape::TripleOctagon => frame.octagon(0.0),
        NodeShape::House => frame.house(),
        NodeShape::Other => frame.ellipse(),
    }
}

/// Writes the SVG elements of a node outline.
pub(super) fn write(out: &mut String, shape: NodeShape, center: Point, size: Size) {
    let frame = Frame::new(center, size);
    let fill = fill(shape);
    let paint = format!(r#"fill="{fill}" stroke="{STROKE}" stroke-width="1.2""#);
    let line = format!(r#"fill="none" stroke="{STROKE}" stroke-width="1""#);
    match shape {
        NodeShape::Box => write_rect(out, &frame, 0.0, &paint),
        NodeShape::Msquare => {
            write_rect(out, &frame, 0.0, &paint);
            write_rect(out, &frame, INSET, &line);
        }
        NodeShape::Insulator => {
            write_rect(out, &frame, 0.0, &paint);
            let inner = Frame {
                left: frame.left + 2.0 * INSET,
                right: frame.right - 2.0 * INSET,
                ..frame
            };
            write_rect(
                out,
                &inner,
                INSET,
                &format!(r#"{line} stroke-dasharray="4 2""#),
            );
        }
        NodeShape::Tab => {
            let body = Frame {
                top: frame.top + TAB_HEIGHT,
                ..frame
            };
            let tab_width = (frame.width() / 4.0).min(24.0);
            let tab = Frame {
                left: frame.left + 6.0,
                right: frame.left + 6.0 + tab_width,
                bottom: body.top,
                ..frame
            };
            write_rect(out, &tab, 0.0, &paint);
            write_rect(out, &body, 0.0, &paint);
        }
        NodeShape::Component => {
            let body = Frame {
                left: frame.left + EAR_WIDTH / 2.0,
                ..frame
            };
            write_rect(out, &body, 0.0, &paint);
            let quarter = frame.height() / 4.0;
            for middle in [center.y - quarter, center.y + quarter] {
                let ear = Frame {
                    left: frame.left,
                    right: frame.left + EAR_WIDTH,
                    top: middle - 4.0,
                    bottom: middle + 4.0,
                };
                write_rect(out, &ear, 0.0, &paint);
            }
        }
        NodeShape::Parallelogram => write_polygon(out, &frame.parallelogram(), &paint),
        NodeShape::Hexagon => write_polygon(out, &frame.hexagon(), &paint),
        NodeShape::Diamond => write_polygon(out, &frame.diamond(), &paint),
        NodeShape::Mdiamond => {
            let corners = frame.diamond();
            write_polygon(out, &corners, &paint);
            write_corner_ticks(out, &corners, &line);
        }
        NodeShape::TripleOctagon => {
            write_polygon(out, &frame.octagon(0.0), &paint);
            write_polygon(out, &frame.octagon(INSET), &line);
            write_polygon(out, &frame.octagon(2.0 * INSET), &line);
        }
        NodeShape::House => write_polygon(out, &frame.house(), &paint),
        NodeShape::Other => {
            let _ = write!(
                out,
                r#"<ellipse cx="{}" cy="{}" rx="{}" ry="{}" {paint}/>"#,
                number(center.x),
                number(center.y),
                number(size.width / 2.0),
                number(size.height / 2.0)
            );
        }
    }
}

/// Height of the roof of a `house` as a share of its body.
const ROOF_RATIO: f64 = 0.45;

fn roof(body_height: f64) -> f64 {
    body_height * ROOF_RATIO
}

fn skew(height: f64) -> f64 {
    height * 0.3
}

fn hexagon_cut(height: f64) -> f64 {
    height * 0.35
}

fn octagon_cut(height: f64) -> f64 {
    height * 0.29
}

fn fill(shape: NodeShape) -> &'static str {
    match shape {
        NodeShape::Mdiamond => "#d8f0d8",
        NodeShape::Msquare => "#f6d5d8",
        NodeShape::Box => "#e4eefc",
        NodeShape::Tab => "#e9e4fb",
        NodeShape::Parallelogram => "#fff1c7",
        NodeShape::Hexagon => "#fde0c6",
        NodeShape::Diamond => "#f0e6f6",
        NodeShape::Component => "#d9f2f5",
        NodeShape::TripleOctagon => "#dcefe9",
        NodeShape::Insulator => "#ececec",
        NodeShape::House => "#fbe3ee",
        NodeShape::Other => "#ffffff",
    }
}

/// The box a node occupies, as edges rather than centre and size.
#[derive(Debug, Clone, Copy)]
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl Frame {
    fn new(center: Point, size: Size) -> Self {
        Frame {
            left: center.x - size.width / 2.0,
            right: center.x + size.width / 2.0,
            top: center.y - size.height / 2.0,
            bottom: center.y + size.height / 2.0,
        }
    }

    fn width(&self) -> f64 {
        self.right - self.left
    }

    fn height(&self) -> f64 {
        self.bottom - self.top
    }

    fn center(&self) -> Point {
        Point::new(
            (self.left + self.right) / 2.0,
            (self.top + self.bottom) / 2.0,
        )
    }

    fn rect(&self, inset: f64) -> Vec<Point> {
        vec![
            Point::new(self.left + inset, self.top + inset),
            Point::new(self.right - inset, self.top + inset),
            Point::new(self.right - inset, self.bottom - inset),
            Point::new(self.left + inset, self.bottom - inset),
        ]
    }

    fn parallelogram(&self) -> Vec<Point> {
        let skew = skew(self.height());
        vec![
            Point::new(self.left + skew, self.top),
            Point::new(self.right, self.top),
            Point::new(self.right - skew, self.bottom),
            Point::new(self.left, self.bottom),
        ]
    }

    fn hexagon(&self) -> Vec<Point> {
        let cut = hexagon_cut(self.height()).min(self.width() / 2.0);
        let middle = self.center().y;
        vec![
            Point::new(self.left, middle),
            Point::new(self.left + cut, self.top),
            Point::new(self.right - cut, self.top),
            Point::new(self.right, middle),
            Point::new(self.right - cut, self.bottom),
            Point::new(self.left + cut, self.bottom),
        ]
    }

    fn diamond(&self) -> Vec<Point> {
        let center = self.center();
        vec![
            Point::new(center.x, self.top),
            Point::new(self.right, center.y),
            Point::new(center.x, self.bottom),
            Point::new(self.left, center.y),
        ]
    }

    fn octagon(&self, inset: f64) -> Vec<Point> {
        let (left, right) = (self.left + inset, self.right - inset);
        let (top, bottom) = (self.top + inset, self.bottom - inset);
        let cut = octagon_cut(bottom - top).min((right - left) / 2.0);
        vec![
            Point::new(left + cut, top),
            Point::new(right - cut, top),
            Point::new(right, top + cut),
            Point::new(right, bottom - cut),
            Point::new(right - cut, bottom),
            Point::new(left + cut, bottom),
            Point::new(left, bottom - cut),
            Point::new(left, top + cut),
        ]
    }

    fn house(&self) -> Vec<Point> {
        let eaves = self.top + self.height() * ROOF_RATIO / (1.0 + ROOF_RATIO);
        vec![
            Point::new(self.center().x, self.top),
            Point::new(self.right, eaves),
            Point::new(self.right, self.bottom),
            Point::new(self.left, self.bottom),
            Point::new(self.left, eaves),
        ]
    }

    fn ellipse(&self) -> Vec<Point> {
        const SIDES: u32 = 32;
        let center = self.center();
        (0..SIDES)
            .map(|step| {
                let angle = f64::from(step) * std::f64::consts::TAU / f64::from(SIDES);
                Point::new(
                    center.x + self.width() / 2.0 * angle.cos(),
                    center.y + self.height() / 2.0 * angle.sin(),
                )
            })
            .collect()
    }
}

fn write_rect(out: &mut String, frame: &Frame, inset: f64, paint: &str) {
    let _ = write!(
        out,
        r#"<rect x="{}" y="{}" width="{}" height="{}" {paint}/>"#,
        number(frame.left + inset),
        number(frame.top + inset),
        number((frame.width() - 2.0 * inset).max(0.0)),
        number((frame.height() - 2.0 * inset).max(0.0))
    );
}

fn write_polygon(out: &mut String, corners: &[Point], paint: &str) {
    out.push_str(r#"<polygon points=""#);
    out.push_str(&points(corners));
    let _ = write!(out, r#"" {paint}/>"#);
}

/// The short strokes across each corner that mark Graphviz's `M` shapes.
fn write_corner_ticks(out: &mut String, corners: &[Point], paint: &str) {
    const TICK: f64 = 9.0;
    let count = corners.len();
    for (index, &corner) in corners.iter().enumerate() {
        let previous = corners[(index + count - 1) % count];
        let next = corners[(index + 1) % count];
        let a = corner + (previous - corner).unit_or(Point::default()) * TICK;
        let b = corner + (next - corner).unit_or(Point::default()) * TICK;
        let _ = write!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {paint}/>"#,
            number(a.x),
            number(a.y),
            number(b.x),
            number(b.y)
        );
    }
}

/// Formats corners as an SVG `points` list.
pub(super) fn points(corners: &[Point]) -> String {
    let mut out = String::new();
    for (index, corner) in corners.iter().enumerate() {
        if index > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{},{}", number(corner.x), number(corner.y));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [NodeShape; 12] = [
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

    #[test]
    fn every_shape_holds_its_label() {
        let label = Size::new(120.0, 34.0);
        for shape in ALL {
            let size = node_size(shape, label);
            assert!(
                size.width >= label.width && size.height >= label.height,
                "{shape:?}"
            );
        }
    }

    #[test]
    fn outlines_lie_inside_the_node_box() {
        let center = Point::new(100.0, 50.0);
        for shape in ALL {
            let size = node_size(shape, Size::new(60.0, 17.0));
            let corners = outline(shape, center, size);
            assert!(corners.len() >= 4, "{shape:?}");
            for corner in corners {
                assert!(
                    (corner.x - center.x).abs() <= size.width / 2.0 + 1e-9,
                    "{shape:?}"
                );
                assert!(
                    (corner.y - center.y).abs() <= size.height / 2.0 + 1e-9,
                    "{shape:?}"
                );
            }
        }
    }

    #[test]
    fn shapes_use_recognisable_elements() {
        let check = |shape: NodeShape, element: &str, count: usize| {
            let mut out = String::new();
            write(
                &mut out,
                shape,
                Point::new(50.0, 50.0),
                Size::new(80.0, 40.0),
            );
            assert_eq!(out.matches(element).count(), count, "{shape:?}: {out}");
        };
        check(NodeShape::Box, "<rect", 1);
        check(NodeShape::Msquare, "<rect", 2);
        check(NodeShape::Diamond, "<polygon", 1);
        check(NodeShape::Mdiamond, "<line", 4);
        check(NodeShape::TripleOctagon, "<polygon", 3);
        check(NodeShape::Component, "<rect", 3);
        check(NodeShape::Tab, "<rect", 2);
        check(NodeShape::Other, "<ellipse", 1);
    }
}
