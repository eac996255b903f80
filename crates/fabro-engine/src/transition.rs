//! Edge selection after a stage (SPEC 4.5): conditions, preferred label, suggested next
//! ids, unconditional fallback, with weight and lexical tie-breaks or weighted random.

use std::borrow::Cow;

use fabro_language::label::normalize_label;
use fabro_language::model::Selection;
use fabro_language::{
    ConditionContext, Edge, EdgeIndex, HandlerKind, NodeIndex, StageStatus, Workflow,
};
use rand::Rng;
use serde_json::Value;

use crate::blob::BlobStore;
use crate::context::Context;
use crate::id::BlobRef;
use crate::outcome::Outcome;

/// Why an edge was taken (`EdgeSelected.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SelectionReason {
    /// A condition matched (step 1).
    Condition,
    /// The preferred label matched (step 2).
    PreferredLabel,
    /// A suggested next id matched (step 3).
    SuggestedNext,
    /// Unconditional fallback (step 4).
    Unconditional,
    /// Failure routing to a retry target (SPEC 9.5).
    RetryTarget,
    /// A goal gate sent the run back (SPEC 9.10).
    GoalGateRetry,
    /// A parallel node continued at its join node (SPEC 5.7).
    ParallelJoin,
}

impl SelectionReason {
    /// The reason as written in events.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SelectionReason::Condition => "condition",
            SelectionReason::PreferredLabel => "preferred_label",
            SelectionReason::SuggestedNext => "suggested_next",
            SelectionReason::Unconditional => "unconditional",
            SelectionReason::RetryTarget => "retry_target",
            SelectionReason::GoalGateRetry => "goal_gate_retry",
            SelectionReason::ParallelJoin => "parallel_join",
        }
    }
}

/// What conditions read: the outcome just produced and the context, with blob refs
/// replaced by their stored values (SPEC 4.6, decision 18).
pub(crate) struct ConditionView<'a> {
    /// The condition-visible outcome string.
    pub outcome: &'a str,
    /// The preferred label, or "".
    pub preferred_label: &'a str,
    /// The context after the stage's updates.
    pub context: &'a Context,
    /// Where blob refs are resolved.
    pub blobs: &'a dyn BlobStore,
}

impl ConditionContext for ConditionView<'_> {
    fn outcome(&self) -> &str {
        self.outcome
    }

    fn preferred_label(&self) -> &str {
        self.preferred_label
    }

    fn lookup(&self, key: &str) -> Option<Cow<'_, Value>> {
        let value = self.context.get(key)?;
        if let Some(reference) = value.as_str().and_then(BlobRef::parse) {
            if let Ok(stored) = self.blobs.read_value(&reference) {
                return Some(Cow::Owned(stored));
            }
        }
        Some(Cow::Borrowed(value))
    }
}

/// Chooses the next edge of `node` after `outcome` (steps 1–4 of SPEC 4.5); `None` when
/// no edge is selectable. Parallel nodes only use step 1 here.
pub(crate) fn select_edge(
    workflow: &Workflow,
    node: NodeIndex,
    outcome: &Outcome,
    view: &dyn ConditionContext,
    rng: &mut impl Rng,
) -> Option<(EdgeIndex, SelectionReason)> {
    let spec = workflow.node(node);
    let random = spec.selection == Selection::Random;
    let edges: Vec<(EdgeIndex, &Edge)> = workflow.outgoing(node).collect();

    let matching: Vec<(EdgeIndex, &Edge)> = edges
        .iter()
        .filter(|(_, edge)| {
            edge.condition
                .as_ref()
                .is_some_and(|condition| condition.evaluate(view))
        })
        .copied()
        .collect();
    if let Some(index) = tie_break(workflow, &matching, random, rng) {
        return Some((index, SelectionReason::Condition));
    }
    if spec.handler == HandlerKind::Parallel {
        return None;
    }
    let unconditional: Vec<(EdgeIndex, &Edge)> = edges
        .iter()
        .filter(|(_, edge)| edge.is_unconditional())
        .copied()
        .collect();

    if let Some(preferred) = outcome
        .preferred_label
        .as_deref()
        .filter(|label| !label.is_empty())
    {
        let wanted = normalize_label(preferred);
        let labelled: Vec<_> = unconditional
            .iter()
            .filter(|(_, edge)| normalize_label(edge.label()) == wanted)
            .copied()
            .collect();
        if let Some(index) = first_or_random(&labelled, random, rng) {
            return Some((index, SelectionReason::PreferredLabel));
        }
    }
    for suggested in &outcome.suggested_next_ids {
        let pointing: Vec<_> = unconditional
            .iter()
            .filter(|(_, edge)| workflow.node(edge.to).id == *suggested)
            .copied()
            .collect();
        if let Some(index) = first_or_random(&pointing, random, rng) {
            return Some((index, SelectionReason::SuggestedNext));
        }
    }
    let fails_closed = spec.handler == HandlerKind::Human
        && outcome.status == StageStatus::Fail
        && outcome.preferred_label.is_none()
        && outcome.suggested_next_ids.is_empty();
    if fails_closed {
        return None;
    }
    tie_break(workflow, &unconditional, random, rng)
        .map(|index| (index, SelectionReason::Unconditional))
}

/// Highest weight, then lexically smallest target id; or weighted random.
fn tie_break(
    workflow: &Workflow,
    candidates: &[(EdgeIndex, &Edge)],
    random: bool,
    rng: &mut impl Rng,
) -> Option<EdgeIndex> {
    if random {
        return weighted_random(candidates, rng);
    }
    candidates
        .iter()
        .max_by(|(_, a), (_, b)| {
            a.weight.total_cmp(&b.weight).then_with(|| {
                workflow
                    .node(b.to)
                    .id
                    .as_bytes()
                    .cmp(workflow.node(a.to).id.as_bytes())
            })
        })
        .map(|(index, _)| *index)
}

fn first_or_random(
    candidates: &[(EdgeIndex, &Edge)],
    random: bool,
    rng: &mut impl Rng,
) -> Option<EdgeIndex> {
    if random {
        weighted_random(candidates, rng)
    } else {
        candidates.first().map(|(index, _)| *index)
    }
}

/// Weighted random pick; weights ≤ 0 count as 1.
fn weighted_random(candidates: &[(EdgeIndex, &Edge)], rng: &mut impl Rng) -> Option<EdgeIndex> {
    let weight = |edge: &Edge| if edge.weight > 0.0 { edge.weight } else { 1.0 };
    let total: f64 = candidates.iter().map(|(_, edge)| weight(edge)).sum();
    if candidates.is_empty() || total <= 0.0 {
        return None;
    }
    let mut pick = rng.random::<f64>() * total;
    for (index, edge) in candidates {
        pick -= weight(edge);
        if pick < 0.0 {
            return Some(*index);
        }
    }
    candidates.last().map(|(index, _)| *index)
}

#[cfg(test)]
mod tests;
