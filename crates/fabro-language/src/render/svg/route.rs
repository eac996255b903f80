//! Edge strokes: ends clipped to node outlines, smooth curves through the layout's bends, arrowheads, and self-loops.
//!
//! Self-loops never reach the layout crate; they are drawn here as nested loops on the side of their node
//! that faces along the rank (right for TB and BT, below for LR and RL), each label just outside its loop.

use std::fmt::Write as _;

use super::geometry::{ray_exit, Bounds, Point, Size};
use super::{number, RankDir};

/// Length and half width of an arrowhead.
const ARROW_LENGTH: f64 = 10.0;
const ARROW_HALF_WIDTH: f64 = 4.0;
/// How far the innermost self-loop reaches out of its node, and how much further each next one reaches.
const LOOP_FIRST: f64 = 18.0;
const LOOP_STEP: f64 = 10.0;
/// Gap between a self-loop and its label.
const LOOP_LABEL_GAP: f64 = 4.0;

/// The drawable parts of one edge: an SVG path and an arrowhead polygon.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Stroke {
    pub(super) path: String,
    pub(super) arrow: [Point; 3],
    /// Every point the path and arrowhead are written with, control points included; the
    /// curves lie inside the convex hull of these, so inside this box.
    pub(super) extent: Bounds,
}

impl Stroke {
    fn new(path: String, points: &[Point], arrow: [Point; 3]) -> Stroke {
        let mut extent = Bounds::EMPTY;
        for &point in points.iter().chain(&arrow) {
            extent.include(point);
        }
        Stroke {
            path,
            arrow,
            extent,
        }
    }
}

/// The stroke of an edge whose route runs from the tail centre (`points[0]`) to the head centre (last point).
///
/// `None` for a route of fewer than two points.
pub(super) fn edge_stroke(points: &[Point], tail: &[Point], head: &[Point]) -> Option<Stroke> {
    let (&first, rest) = points.split_first()?;
    let (&last, inner) = rest.split_last()?;
    let start = ray_exit(tail, first, inner.first().copied().unwrap_or(last)).unwrap_or(first);
    let end = ray_exit(head, last, inner.last().copied().unwrap_or(first)).unwrap_or(last);
    let before_end = inner.last().copied().unwrap_or(start);
    let direction = (end - before_end).unit_or((end - first).unit_or(Point::new(0.0, 1.0)));
    let base = end - direction * ARROW_LENGTH;

    let mut curve = Vec::with_capacity(inner.len() + 2);
    curve.push(start);
    curve.extend_from_slice(inner);
    curve.push(base);
    let mut written = Vec::with_capacity(3 * curve.len());
    let path = spline(&curve, end, &mut written);
    Some(Stroke::new(path, &written, arrowhead(end, direction)))
}

/// Self-loops of one node, planned before layout so the node can be given room for them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LoopPlan {
    /// Outward reach of each loop, innermost first, with its label size.
    loops: Vec<(f64, Option<Size>)>,
    /// Room needed beside the node, along the in-rank axis.
    reserve: f64,
}

impl LoopPlan {
    /// Plans loops with these label sizes, innermost first.
    pub(super) fn new(rankdir: RankDir, labels: &[Option<Size>]) -> LoopPlan {
        let axes = Axes::new(rankdir);
        let mut loops = Vec::with_capacity(labels.len());
        let mut reach = LOOP_FIRST;
        let mut reserve = 0.0;
        for &label in labels {
            loops.push((reach, label));
            let label_reach = label.map_or(0.0, |size| LOOP_LABEL_GAP + axes.along_u(size));
            reserve = reach + label_reach + LOOP_LABEL_GAP;
            reach += label_reach + LOOP_STEP;
        }
        LoopPlan { loops, reserve }
    }

    pub(super) fn reserve(&self) -> f64 {
        self.reserve
    }

    /// The stroke and label centre of loop `index` on a node at `center` of `size` with `outline`.
    pub(super) fn stroke(
        &self,
        rankdir: RankDir,
        index: usize,
        center: Point,
        size: Size,
        outline: &[Point],
    ) -> Option<(Stroke, Option<Point>)> {
        let &(reach, label) = self.loops.get(index)?;
        let axes = Axes::new(rankdir);
        let half_u = axes.along_u(size) / 2.0;
        let half_v = axes.along_v(size) / 2.0;
        let spread = (half_v * 0.45).clamp(3.0, 12.0);
        let attach = |side: f64| {
            let inside = center + axes.v * (side * spread);
            let outside = inside + axes.u * (half_u + 1.0);
            ray_exit(outline, inside, outside).unwrap_or(inside + axes.u * half_u)
        };
        let (from, to) = (attach(-1.0), attach(1.0));
        // A cubic whose control points reach 4/3 of the way out peaks at `reach`.
        let flare = 4.0 + 4.0 * index as f64;
        let control_from = from + axes.u * (reach * 4.0 / 3.0) - axes.v * flare;
        let control_to = to + axes.u * (reach * 4.0 / 3.0) + axes.v * flare;
        let direction = (to - control_to).unit_or(axes.u * -1.0);
        let base = to - direction * ARROW_LENGTH;
        let mut path = String::new();
        let _ = write!(
            path,
            "M{},{} C{},{} {},{} {},{}",
            number(from.x),
            number(from.y),
            number(control_from.x),
            number(control_from.y),
            number(control_to.x),
            number(control_to.y),
            number(base.x),
            number(base.y)
        );
        let label_center = label.map(|label| {
            center + axes.u * (half_u + reach + LOOP_LABEL_GAP + axes.along_u(label) / 2.0)
        });
        Some((
            Stroke::new(
                path,
                &[from, control_from, control_to, base],
                arrowhead(to, direction),
            ),
            label_center,
        ))
    }
}

/// The outward axis `u` of self-loops and the axis `v` along the node side they sit on.
#[derive(Debug, Clone, Copy)]
struct Axes {
    u: Point,
    v: Point,
}

impl Axes {
    fn new(rankdir: RankDir) -> Axes {
        match rankdir {
            RankDir::TopToBottom | RankDir::BottomToTop => Axes {
                u: Point::new(1.0, 0.0),
                v: Point::new(0.0, 1.0),
            },
            RankDir::LeftToRight | RankDir::RightToLeft => Axes {
                u: Point::new(0.0, 1.0),
                v: Point::new(1.0, 0.0),
            },
        }
    }

    fn along_u(self, size: Size) -> f64 {
        size.width * self.u.x.abs() + size.height * self.u.y.abs()
    }

    fn along_v(self, size: Size) -> f64 {
        size.width * self.v.x.abs() + size.height * self.v.y.abs()
    }
}

/// A smooth path through `points` (a Catmull-Rom spline as cubic Béziers); `after` steers the final tangent.
///
/// Every point the path is written with, control points included, is added to `written`.
fn spline(points: &[Point], after: Point, written: &mut Vec<Point>) -> String {
    let mut path = String::new();
    let Some(&first) = points.first() else {
        return path;
    };
    written.push(first);
    let _ = write!(path, "M{},{}", number(first.x), number(first.y));
    if points.len() == 2 {
        written.push(points[1]);
        let _ = write!(path, " L{},{}", number(points[1].x), number(points[1].y));
        return path;
    }
    for index in 0..points.len().saturating_sub(1) {
        let previous = points[index.saturating_sub(1)];
        let from = points[index];
        let to = points[index + 1];
        let next = points.get(index + 2).copied().unwrap_or(after);
        let control_from = from + (to - previous) * (1.0 / 6.0);
        let control_to = to - (next - from) * (1.0 / 6.0);
        written.extend([control_from, control_to, to]);
        let _ = write!(
            path,
            " C{},{} {},{} {},{}",
            number(control_from.x),
            number(control_from.y),
            number(control_to.x),
            number(control_to.y),
            number(to.x),
            number(to.y)
        );
    }
    path
}

fn arrowhead(tip: Point, direction: Point) -> [Point; 3] {
    let base = tip - direction * ARROW_LENGTH;
    let across = Point::new(-direction.y, direction.x) * ARROW_HALF_WIDTH;
    [tip, base + across, base - across]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square(center: Point, half: f64) -> Vec<Point> {
        vec![
            center + Point::new(-half, -half),
            center + Point::new(half, -half),
            center + Point::new(half, half),
            center + Point::new(-half, half),
        ]
    }

    #[test]
    fn straight_edge_ends_on_outlines_with_arrow_at_head() {
        let (tail, head) = (Point::new(0.0, 0.0), Point::new(0.0, 100.0));
        let stroke = edge_stroke(&[tail, head], &square(tail, 10.0), &square(head, 10.0))
            .expect("two points make a stroke");
        assert_eq!(stroke.path, "M0,10 L0,80");
        assert_eq!(stroke.arrow[0], Point::new(0.0, 90.0));
    }

    #[test]
    fn bent_edge_is_a_curve_through_its_bends() {
        let points = [
            Point::new(0.0, 0.0),
            Point::new(30.0, 50.0),
            Point::new(0.0, 100.0),
        ];
        let stroke = edge_stroke(&points, &[], &[]).expect("three points make a stroke");
        assert_eq!(stroke.path.matches('C').count(), 2);
        assert!(stroke.path.contains(" 30,50 "));
    }

    #[test]
    fn short_routes_have_no_stroke() {
        assert_eq!(edge_stroke(&[Point::default()], &[], &[]), None);
        assert_eq!(edge_stroke(&[], &[], &[]), None);
    }

    #[test]
    fn nested_loops_leave_room_for_labels() {
        let label = Size::new(40.0, 14.0);
        let plan = LoopPlan::new(RankDir::TopToBottom, &[Some(label), Some(label)]);
        let center = Point::new(0.0, 0.0);
        let size = Size::new(60.0, 30.0);
        let outline = square(center, 15.0);
        let (_, inner) = plan
            .stroke(RankDir::TopToBottom, 0, center, size, &outline)
            .expect("loop 0 is planned");
        let (_, outer) = plan
            .stroke(RankDir::TopToBottom, 1, center, size, &outline)
            .expect("loop 1 is planned");
        let (inner, outer) = (inner.expect("labelled"), outer.expect("labelled"));
        assert!(outer.x - inner.x >= label.width);
        assert!(outer.x + label.width / 2.0 <= 30.0 + plan.reserve());
        assert_eq!(
            plan.stroke(RankDir::TopToBottom, 2, center, size, &outline),
            None
        );
    }

    #[test]
    fn loops_go_below_in_left_to_right() {
        let plan = LoopPlan::new(RankDir::LeftToRight, &[Some(Size::new(40.0, 14.0))]);
        let (stroke, label) = plan
            .stroke(
                RankDir::LeftToRight,
                0,
                Point::default(),
                Size::new(60.0, 30.0),
                &[],
            )
            .expect("loop 0 is planned");
        assert!(label.expect("labelled").y > 15.0);
        assert!(stroke.arrow[0].y >= 15.0 - 1e-9);
        assert_eq!(LoopPlan::new(RankDir::LeftToRight, &[]).reserve(), 0.0);
    }
}
