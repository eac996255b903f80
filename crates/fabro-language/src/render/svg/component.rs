//! Weakly connected components laid out by `rust-sugiyama`, one at a time, without letting it crash or overflow.
//!
//! The crate splits components itself, but in quadratic time, which hundreds of lone nodes make noticeable,
//! and lone vertices do not need it at all.
//! It recurses once per vertex along a path in its depth-first searches, which would overflow a small stack
//! (a test thread or an async worker), so it runs on a thread of its own with a stack sized for the input.
//! It asserts and unwraps internally; a panic there is contained and reported as `None`.

use rust_sugiyama::configure::{Config, CrossingMinimization, RankingType};
use rust_sugiyama::from_vertices_and_edges;

use super::geometry::{Point, Size};

/// Above this many vertices in a component the crate's transpose step (a crossing-reduction refinement) is skipped:
/// it is the part whose cost grows fastest with layer width.
const TRANSPOSE_LIMIT: usize = 20_000;
/// Above this many vertices in a component, ranks come from the crate's longest-path ranking instead of its
/// network simplex, which grows quadratically (about 0.5 s for 40,000 vertices and 38 s for 400,000).
/// In the second pass both give the same ranks when each component has a single source, as workflows do.
const SIMPLEX_LIMIT: usize = 30_000;

/// What a layout is for, which decides the crate's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Purpose {
    /// Only ranks are wanted: unit spacing, no ordering refinement.
    Ranks,
    /// Coordinates to draw with, `spacing` apart.
    Drawing { spacing: f64 },
}

/// Vertices placed by the crate, as (vertex id, centre in the layout frame), one list per connected component.
pub(super) type Components = Vec<Vec<(usize, Point)>>;

/// Lays out `links` between vertices of `sizes`, one weakly connected component at a time, in order of their
/// smallest vertex id.
///
/// Big components get the crate's cheaper steps (see `SIMPLEX_LIMIT` and `TRANSPOSE_LIMIT`).
/// `None` if the crate failed (see `run`) or a component has more vertices than `u32` can number.
pub(super) fn place(
    sizes: &[Size],
    links: &[(usize, usize)],
    purpose: Purpose,
) -> Option<Components> {
    let base = config(purpose);
    let mut jobs = Vec::new();
    let mut local = vec![0usize; sizes.len()];
    for Component {
        vertices,
        links: component_links,
    } in components(sizes.len(), links)
    {
        for (position, &vertex) in vertices.iter().enumerate() {
            local[vertex] = position;
        }
        let input = vertices
            .iter()
            .enumerate()
            .map(|(position, &vertex)| {
                let size = sizes[vertex];
                Some((u32::try_from(position).ok()?, (size.width, size.height)))
            })
            .collect::<Option<Vec<_>>>()?;
        let links = component_links
            .iter()
            .map(|&(a, b)| Some((u32::try_from(local[a]).ok()?, u32::try_from(local[b]).ok()?)))
            .collect::<Option<Vec<_>>>()?;
        let config = Config {
            transpose: base.transpose && vertices.len() <= TRANSPOSE_LIMIT,
            ranking_type: if vertices.len() <= SIMPLEX_LIMIT {
                base.ranking_type
            } else {
                RankingType::Up
            },
            ..base
        };
        jobs.push(Job {
            vertices,
            input,
            links,
            config,
        });
    }
    run(&jobs)
}

/// A weakly connected component: its vertices ascending and the links between them.
#[derive(Debug, Default, PartialEq)]
struct Component {
    vertices: Vec<usize>,
    links: Vec<(usize, usize)>,
}

/// Weakly connected components, ordered by smallest vertex.
fn components(count: usize, links: &[(usize, usize)]) -> Vec<Component> {
    fn find(parent: &mut [usize], mut vertex: usize) -> usize {
        while parent[vertex] != vertex {
            parent[vertex] = parent[parent[vertex]];
            vertex = parent[vertex];
        }
        vertex
    }
    let mut parent: Vec<usize> = (0..count).collect();
    for &(a, b) in links {
        let (a, b) = (find(&mut parent, a), find(&mut parent, b));
        // The smaller id becomes the root, so roots are each component's smallest vertex.
        parent[a.max(b)] = a.min(b);
    }
    let mut slot = vec![usize::MAX; count];
    let mut groups: Vec<Component> = Vec::new();
    for vertex in 0..count {
        let root = find(&mut parent, vertex);
        if slot[root] == usize::MAX {
            slot[root] = groups.len();
            groups.push(Component::default());
        }
        groups[slot[root]].vertices.push(vertex);
    }
    for &(a, b) in links {
        let root = find(&mut parent, a);
        groups[slot[root]].links.push((a, b));
    }
    groups
}

/// One connected component, renumbered from zero for the crate.
struct Job {
    /// Vertex ids, ascending; a vertex's position here is its id for the crate.
    vertices: Vec<usize>,
    input: Vec<(u32, (f64, f64))>,
    links: Vec<(u32, u32)>,
    config: Config,
}

fn config(purpose: Purpose) -> Config {
    let (spacing, transpose) = match purpose {
        // Ranks do not depend on ordering, so the costly transpose refinement is skipped.
        Purpose::Ranks => (1.0, false),
        Purpose::Drawing { spacing } => (spacing, true),
    };
    Config {
        minimum_length: 1,
        vertex_spacing: spacing,
        dummy_vertices: true,
        dummy_size: 1.0,
        ranking_type: RankingType::MinimizeEdgeLength,
        // The median heuristic can divide zero by zero and then panic while sorting.
        c_minimization: CrossingMinimization::Barycenter,
        transpose,
    }
}

/// Stack for the layout thread: the crate's depth-first searches recurse once per vertex of a path,
/// about 0.4 KiB a level in release builds and 0.8 KiB in debug builds.
const STACK_BASE: usize = 8 << 20;
const STACK_PER_VERTEX: usize = 2 << 10;
const STACK_MAX: usize = 1 << 30;

/// Runs the crate on each job, on a thread of its own sized for the crate's recursion, and contains its panics
/// (it asserts and unwraps internally): a picture is not worth a crash.
/// `None` if the thread cannot be started, a component is too deep for the largest stack, or the crate panicked.
fn run(jobs: &[Job]) -> Option<Components> {
    let largest = jobs.iter().map(|job| job.vertices.len()).max().unwrap_or(0);
    let stack = largest
        .checked_mul(STACK_PER_VERTEX)?
        .checked_add(STACK_BASE)?;
    if stack > STACK_MAX {
        return None;
    }
    let layout = || {
        jobs.iter()
            .map(|job| {
                if job.links.is_empty() {
                    // A lone vertex needs no layout.
                    return job
                        .vertices
                        .iter()
                        .map(|&vertex| (vertex, Point::default()))
                        .collect();
                }
                from_vertices_and_edges(&job.input, &job.links, &job.config)
                    .into_iter()
                    .flat_map(|(placed, _, _)| placed)
                    .filter_map(|(position, (x, y))| {
                        Some((*job.vertices.get(position)?, Point::new(x, y)))
                    })
                    .collect()
            })
            .collect()
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("fabro-graph-layout".to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, layout)
            .ok()?
            .join()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_split_and_ordered_by_first_vertex() {
        let found = components(6, &[(4, 2), (0, 5), (2, 3)]);
        let expected = [
            Component {
                vertices: vec![0, 5],
                links: vec![(0, 5)],
            },
            Component {
                vertices: vec![1],
                links: vec![],
            },
            Component {
                vertices: vec![2, 3, 4],
                links: vec![(4, 2), (2, 3)],
            },
        ];
        assert_eq!(found, expected);
    }

    #[test]
    fn a_panic_in_the_crate_is_contained() {
        // The crate asserts that cycle removal leaves no cycle, which a self-loop defeats.
        let job = Job {
            vertices: vec![0, 1],
            input: vec![(0, (1.0, 1.0)), (1, (1.0, 1.0))],
            links: vec![(0, 1), (1, 1)],
            config: config(Purpose::Ranks),
        };
        assert_eq!(run(&[job]), None);
    }

    #[test]
    fn lone_vertices_are_placed_without_the_crate() {
        let placed =
            place(&[Size::new(5.0, 5.0); 3], &[(2, 0)], Purpose::Ranks).expect("layout succeeds");
        assert_eq!(placed.len(), 2);
        assert_eq!(placed[1], vec![(1, Point::default())]);
        let mut first: Vec<usize> = placed[0].iter().map(|(vertex, _)| *vertex).collect();
        first.sort_unstable();
        assert_eq!(first, vec![0, 2]);
    }
}
