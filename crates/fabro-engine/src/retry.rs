//! Node retry plans (SPEC 9.3): attempts and delays per policy.

use std::time::Duration;

use fabro_language::model::RetryPolicy;
use fabro_language::Node;
use rand::Rng;

/// How many attempts a stage gets and how long to wait between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RetryPlan {
    /// Total attempts, at least 1.
    pub max_attempts: u32,
    /// Delay before attempt 2.
    pub initial_delay: Duration,
    /// Growth factor per further attempt.
    pub factor: f64,
}

/// Upper bound of every delay.
const MAX_DELAY: Duration = Duration::from_secs(60);

impl RetryPlan {
    /// The plan of `node`: its `retry_policy`, else its `max_retries` with the default
    /// backoff, else the graph's `default_max_retries` with the default backoff.
    pub(crate) fn for_node(node: &Node, graph_default_retries: u32) -> RetryPlan {
        if let Some(policy) = node.retry_policy {
            return RetryPlan::preset(policy);
        }
        let retries = node.max_retries().unwrap_or(graph_default_retries);
        RetryPlan {
            max_attempts: retries.saturating_add(1),
            initial_delay: Duration::from_secs(5),
            factor: 2.0,
        }
    }

    /// A named preset.
    pub(crate) fn preset(policy: RetryPolicy) -> RetryPlan {
        let (max_attempts, initial_ms, factor) = match policy {
            RetryPolicy::None => (1, 0, 1.0),
            RetryPolicy::Standard => (5, 200, 2.0),
            RetryPolicy::Aggressive => (5, 500, 2.0),
            RetryPolicy::Linear => (3, 500, 1.0),
            RetryPolicy::Patient => (3, 2000, 3.0),
        };
        RetryPlan {
            max_attempts,
            initial_delay: Duration::from_millis(initial_ms),
            factor,
        }
    }

    /// The delay before attempt `next_attempt` (2, 3, …) without jitter.
    pub(crate) fn base_delay(&self, next_attempt: u32) -> Duration {
        let exponent = i32::try_from(next_attempt.saturating_sub(2)).unwrap_or(i32::MAX);
        let seconds = self.initial_delay.as_secs_f64() * self.factor.powi(exponent);
        Duration::from_secs_f64(seconds.min(MAX_DELAY.as_secs_f64()))
    }

    /// The delay before `next_attempt`, multiplied by U(0.5, 1.5) and capped at 60 s.
    pub(crate) fn delay(&self, next_attempt: u32, rng: &mut impl Rng) -> Duration {
        let jitter: f64 = rng.random_range(0.5..1.5);
        let seconds = self.base_delay(next_attempt).as_secs_f64() * jitter;
        Duration::from_secs_f64(seconds.min(MAX_DELAY.as_secs_f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn millis(plan: &RetryPlan) -> Vec<u128> {
        (2..=plan.max_attempts)
            .map(|attempt| plan.base_delay(attempt).as_millis())
            .collect()
    }

    #[test]
    fn presets_match_the_table() {
        assert_eq!(
            millis(&RetryPlan::preset(RetryPolicy::None)),
            Vec::<u128>::new()
        );
        assert_eq!(
            millis(&RetryPlan::preset(RetryPolicy::Standard)),
            [200, 400, 800, 1600]
        );
        assert_eq!(
            millis(&RetryPlan::preset(RetryPolicy::Aggressive)),
            [500, 1000, 2000, 4000]
        );
        assert_eq!(millis(&RetryPlan::preset(RetryPolicy::Linear)), [500, 500]);
        assert_eq!(
            millis(&RetryPlan::preset(RetryPolicy::Patient)),
            [2000, 6000]
        );
    }

    #[test]
    fn default_backoff_doubles_from_five_seconds_and_caps() {
        let plan = RetryPlan {
            max_attempts: 7,
            initial_delay: Duration::from_secs(5),
            factor: 2.0,
        };
        assert_eq!(millis(&plan), [5000, 10000, 20000, 40000, 60000, 60000]);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for attempt in 2..=7 {
            let delay = plan.delay(attempt, &mut rng);
            assert!(delay <= MAX_DELAY);
            assert!(delay >= plan.base_delay(attempt) / 2);
        }
    }
}
