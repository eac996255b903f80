//! Integration tests of the language crate's public API.

mod data;
