//! `RunRewound`: a run moved back to the checkpoint written after one of its stages
//! (SPEC 20.3).

use serde::{Deserialize, Serialize};

/// `RunRewound {to_rank, k}` (run-level): rewind `k` of the run moved it back to the
/// checkpoint written after the stage of rank `to_rank`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRewound {
    /// The rewind's number in the run, from 1 (`refs/fabro-rewound/{id}/{k}`).
    pub k: u32,
    /// The rank of the stage the run went back to.
    pub to_rank: u32,
}
