//! The external backends: agent CLIs (`cli`) and Agent Client Protocol agents (`acp`).

pub(crate) mod acp;
pub(crate) mod cli;
