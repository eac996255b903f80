//! Plane geometry for the renderer: points, sizes, bounding boxes, and where a ray leaves a node outline.

use std::ops::{Add, Mul, Sub};

/// A point (or vector) in SVG user units.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Point {
    pub(super) x: f64,
    pub(super) y: f64,
}

impl Point {
    pub(super) const fn new(x: f64, y: f64) -> Self {
        Self { x, y }
    }

    pub(super) fn length(self) -> f64 {
        self.x.hypot(self.y)
    }

    /// The unit vector in this direction, or `fallback` for a (near) zero vector.
    pub(super) fn unit_or(self, fallback: Point) -> Point {
        let length = self.length();
        if length > 1e-9 && length.is_finite() {
            self * (1.0 / length)
        } else {
            fallback
        }
    }
}

impl Add for Point {
    type Output = Point;
    fn add(self, other: Point) -> Point {
        Point::new(self.x + other.x, self.y + other.y)
    }
}

impl Sub for Point {
    type Output = Point;
    fn sub(self, other: Point) -> Point {
        Point::new(self.x - other.x, self.y - other.y)
    }
}

impl Mul<f64> for Point {
    type Output = Point;
    fn mul(self, factor: f64) -> Point {
        Point::new(self.x * factor, self.y * factor)
    }
}

/// A width and height in SVG user units.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(super) struct Size {
    pub(super) width: f64,
    pub(super) height: f64,
}

impl Size {
    pub(super) const fn new(width: f64, height: f64) -> Self {
        Self { width, height }
    }
}

/// An axis-aligned bounding box; starts empty and grows with `include`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bounds {
    pub(super) min: Point,
    pub(super) max: Point,
}

impl Bounds {
    pub(super) const EMPTY: Bounds = Bounds {
        min: Point::new(f64::INFINITY, f64::INFINITY),
        max: Point::new(f64::NEG_INFINITY, f64::NEG_INFINITY),
    };

    pub(super) fn is_empty(&self) -> bool {
        !(self.min.x <= self.max.x && self.min.y <= self.max.y)
    }

    pub(super) fn include(&mut self, point: Point) {
        if !(point.x.is_finite() && point.y.is_finite()) {
            return;
        }
        self.min.x = self.min.x.min(point.x);
        self.min.y = self.min.y.min(point.y);
        self.max.x = self.max.x.max(point.x);
        self.max.y = self.max.y.max(point.y);
    }

    /// Grows the box to hold a `size` box centred on `center`.
    pub(super) fn include_box(&mut self, center: Point, size: Size) {
        let half = Point::new(size.width / 2.0, size.height / 2.0);
        self.include(center - half);
        self.include(center + half);
    }

    #[cfg(test)]
    pub(super) fn overlaps(&self, other: &Bounds) -> bool {
        !self.is_empty()
            && !other.is_empty()
            && self.min.x < other.max.x
            && other.min.x < self.max.x
            && self.min.y < other.max.y
            && other.min.y < self.max.y
    }
}

/// Where the ray from `inside` towards `toward` crosses the closed `outline`.
///
/// The outlines are convex and contain `inside`, so the first crossing is the only one.
/// Returns `None` when `toward` lies inside the outline or the outline is degenerate.
pub(super) fn ray_exit(outline: &[Point], inside: Point, toward: Point) -> Option<Point> {
    let direction = toward - inside;
    let mut best: Option<f64> = None;
    for (index, &start) in outline.iter().enumerate() {
        let end = outline[(index + 1) % outline.len()];
        let side = end - start;
        let denominator = cross(direction, side);
        if denominator.abs() < 1e-12 {
            continue;
        }
        let offset = start - inside;
        let along_ray = cross(offset, side) / denominator;
        let along_side = cross(offset, direction) / denominator;
        if along_ray > 1e-9 && (-1e-9..=1.0 + 1e-9).contains(&along_side) {
            best = Some(best.map_or(along_ray, |current: f64| current.min(along_ray)));
        }
    }
    best.filter(|t| *t < 1.0).map(|t| inside + direction * t)
}

fn cross(a: Point, b: Point) -> f64 {
    a.x * b.y - a.y * b.x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square() -> Vec<Point> {
        vec![
            Point::new(-1.0, -1.0),
            Point::new(1.0, -1.0),
            Point::new(1.0, 1.0),
            Point::new(-1.0, 1.0),
        ]
    }

    #[test]
    fn ray_leaves_square_on_its_side() {
        let exit = ray_exit(&square(), Point::default(), Point::new(10.0, 0.0));
        assert_eq!(exit, Some(Point::new(1.0, 0.0)));
        let exit = ray_exit(&square(), Point::default(), Point::new(0.0, -4.0));
        assert_eq!(exit, Some(Point::new(0.0, -1.0)));
    }

    #[test]
    fn target_inside_outline_has_no_exit() {
        assert_eq!(
            ray_exit(&square(), Point::default(), Point::new(0.5, 0.5)),
            None
        );
        assert_eq!(ray_exit(&[], Point::default(), Point::new(5.0, 0.0)), None);
    }

    #[test]
    fn bounds_overlap_only_when_interiors_meet() {
        let mut left = Bounds::EMPTY;
        left.include_box(Point::new(0.0, 0.0), Size::new(10.0, 10.0));
        let mut right = Bounds::EMPTY;
        right.include_box(Point::new(10.0, 0.0), Size::new(10.0, 10.0));
        assert!(!left.overlaps(&right));
        right.include(Point::new(4.0, 0.0));
        assert!(left.overlaps(&right));
        assert!(!Bounds::EMPTY.overlaps(&left));
    }
}
