//! Run budgets (SPEC 17.1): limits on stages, tokens, cost and wall time, the run-wide
//! token and cost totals, and the stop that ends a run like a cancellation.
//!
//! One [`Budget`] is shared by the traversal, its parallel branches and every LLM client
//! of the run. The first limit reached is recorded and the run's cancellation token is
//! fired, so a running stage is interrupted as on a signal (SPEC 4.8).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use fabro_language::value::format_duration;
use tokio_util::sync::CancellationToken;

use crate::config::{RunSection, DEFAULT_MAX_STAGES};

/// The limits of one run; `None` (and `max_stages` 0) means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct BudgetLimits {
    /// Stages started in the run, all epochs and branches.
    pub max_stages: Option<u64>,
    /// Input + output tokens of every LLM call.
    pub max_tokens: Option<u64>,
    /// `cost_usd` of every LLM call.
    pub max_cost_usd: Option<f64>,
    /// Wall time since the run or its resume started.
    pub max_duration: Option<Duration>,
}

impl BudgetLimits {
    /// The limits a merged `[run]` section sets, with the defaults of SPEC 17.1.
    pub(crate) fn from_config(run: &RunSection) -> BudgetLimits {
        BudgetLimits {
            max_stages: Some(run.max_stages.unwrap_or(DEFAULT_MAX_STAGES)).filter(|&n| n > 0),
            max_tokens: run.max_tokens,
            max_cost_usd: run.max_cost_usd.map(crate::config::CostLimit::usd),
            max_duration: run
                .max_duration
                .as_deref()
                .and_then(fabro_language::value::parse_duration),
        }
    }
}

/// Which limit stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BudgetKind {
    /// `max_stages`.
    Stages,
    /// `max_tokens`.
    Tokens,
    /// `max_cost_usd`.
    Cost,
    /// `max_duration`.
    Duration,
}

impl BudgetKind {
    /// The name used in the reason and the `BudgetExhausted` event.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Stages => "stages",
            BudgetKind::Tokens => "tokens",
            BudgetKind::Cost => "cost",
            BudgetKind::Duration => "duration",
        }
    }
}

/// A limit reached: what, how much was used and the limit, both as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exhausted {
    /// The limit.
    pub kind: BudgetKind,
    /// Amount used.
    pub used: String,
    /// The limit's value.
    pub limit: String,
}

impl Exhausted {
    /// `budget exhausted: {kind} {used} of {limit}`.
    pub(crate) fn reason(&self) -> String {
        format!(
            "budget exhausted: {} {} of {}",
            self.kind.as_str(),
            self.used,
            self.limit
        )
    }
}

/// Run-wide token and cost totals, persisted in the checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    /// Input + output tokens.
    pub tokens: u64,
    /// Cost in USD (unpriced calls count 0).
    pub cost_usd: f64,
}

/// The budget of one run; see the module docs.
#[derive(Debug)]
pub(crate) struct Budget {
    limits: BudgetLimits,
    started: Instant,
    totals: Mutex<Totals>,
    exhausted: Mutex<Option<Exhausted>>,
    cancel: CancellationToken,
}

impl Budget {
    /// A budget whose clock starts now, with the totals of a resumed run.
    pub(crate) fn new(limits: BudgetLimits, totals: Totals, cancel: CancellationToken) -> Budget {
        Budget {
            limits,
            started: Instant::now(),
            totals: Mutex::new(totals),
            exhausted: Mutex::new(None),
            cancel,
        }
    }

    /// The totals so far.
    pub(crate) fn totals(&self) -> Totals {
        *self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limit that stopped the run, if one did.
    pub(crate) fn exhausted(&self) -> Option<Exhausted> {
        self.exhausted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The wall-time limit left, for the timer that interrupts a long stage.
    pub(crate) fn time_left(&self) -> Option<Duration> {
        self.limits
            .max_duration
            .map(|limit| limit.saturating_sub(self.started.elapsed()))
    }

    /// Before a stage starts, with `stages_started` stages started so far: stops the run
    /// when any limit is reached. Returns whether the run must stop.
    pub(crate) fn check_before_stage(&self, stages_started: u64) -> bool {
        if let Some(limit) = self.limits.max_stages {
            if stages_started >= limit {
                self.stop(Exhausted {
                    kind: BudgetKind::Stages,
                    used: stages_started.to_string(),
                    limit: limit.to_string(),
                });
                return true;
            }
        }
        self.check_usage() || self.check_duration()
    }

    /// Adds one LLM call's usage, then stops the run when a limit is reached.
    pub(crate) fn record_call(&self, tokens: u64, cost_usd: f64) {
        {
            let mut totals = self.totals.lock().unwrap_or_else(PoisonError::into_inner);
            totals.tokens = totals.tokens.saturating_add(tokens);
            totals.cost_usd += cost_usd;
        }
        self.check_usage();
        self.check_duration();
    }

    /// Stops the run when the wall-time limit is reached; returns whether it did.
    pub(crate) fn check_duration(&self) -> bool {
        let Some(limit) = self.limits.max_duration else {
            return false;
        };
        let elapsed = self.started.elapsed();
        if elapsed < limit {
            return false;
        }
        self.stop(Exhausted {
            kind: BudgetKind::Duration,
            used: format_duration(Duration::from_secs(elapsed.as_secs())),
            limit: format_duration(limit),
        });
        true
    }

    fn check_usage(&self) -> bool {
        let totals = self.totals();
        if let Some(limit) = self.limits.max_tokens {
            if totals.tokens >= limit {
                self.stop(Exhausted {
                    kind: BudgetKind::Tokens,
                    used: totals.tokens.to_string(),
                    limit: limit.to_string(),
                });
                return true;
            }
        }
        if let Some(limit) = self.limits.max_cost_usd {
            // Compared in hundredths of a cent, so that sums of prices that print equal
            // to the limit reach it.
            if (totals.cost_usd * 10_000.0).round() >= (limit * 10_000.0).round() {
                self.stop(Exhausted {
                    kind: BudgetKind::Cost,
                    used: format!("{:.2}", totals.cost_usd),
                    limit: format!("{limit:.2}"),
                });
                return true;
            }
        }
        false
    }

    /// Records the first limit reached and cancels the run.
    fn stop(&self, exhausted: Exhausted) {
        {
            let mut slot = self
                .exhausted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = Some(exhausted);
            }
        }
        self.cancel.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BudgetLimits {
        BudgetLimits {
            max_stages: Some(3),
            max_tokens: Some(100),
            max_cost_usd: Some(1.0),
            max_duration: None,
        }
    }

    #[test]
    fn the_stage_limit_stops_before_the_stage_past_it() {
        let cancel = CancellationToken::new();
        let budget = Budget::new(limits(), Totals::default(), cancel.clone());
        assert!(!budget.check_before_stage(2));
        assert!(!cancel.is_cancelled());
        assert!(budget.check_before_stage(3));
        assert!(cancel.is_cancelled());
        assert_eq!(
            budget.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: stages 3 of 3")
        );
    }

    #[test]
    fn tokens_and_cost_add_up_from_the_resumed_totals() {
        let cancel = CancellationToken::new();
        let totals = Totals {
            tokens: 60,
            cost_usd: 0.0,
        };
        let budget = Budget::new(limits(), totals, cancel.clone());
        budget.record_call(30, 0.0);
        assert!(!cancel.is_cancelled());
        budget.record_call(20, 0.0);
        assert_eq!(
            budget.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: tokens 110 of 100")
        );
        // The first limit reached stays the reason.
        budget.record_call(0, 5.0);
        assert_eq!(budget.exhausted().map(|e| e.kind), Some(BudgetKind::Tokens));
    }

    #[test]
    fn cost_reaches_the_limit_despite_rounding() {
        let budget = Budget::new(
            BudgetLimits {
                max_cost_usd: Some(1.5),
                ..BudgetLimits::default()
            },
            Totals::default(),
            CancellationToken::new(),
        );
        for _ in 0..5 {
            budget.record_call(0, 0.3);
        }
        assert_eq!(
            budget.exhausted().map(|e| e.reason()).as_deref(),
            Some("budget exhausted: cost 1.50 of 1.50")
        );
    }

    #[test]
    fn zero_max_stages_is_unlimited_and_the_default_is_1000() {
        let mut run = RunSection::default();
        assert_eq!(BudgetLimits::from_config(&run).max_stages, Some(1000));
        run.max_stages = Some(0);
        assert_eq!(BudgetLimits::from_config(&run).max_stages, None);
        run.max_duration = Some("90s".to_owned());
        assert_eq!(
            BudgetLimits::from_config(&run).max_duration,
            Some(Duration::from_secs(90))
        );
    }
}
