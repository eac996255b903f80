//! RFC 3339 UTC timestamps with milliseconds (SPEC 11.3), as events, checkpoints and
//! run records write them: the calendar arithmetic is [`fabro_agent::timestamp`]'s.

pub use fabro_agent::timestamp::parse_rfc3339;
pub(crate) use fabro_agent::timestamp::{format_rfc3339, now_rfc3339};
