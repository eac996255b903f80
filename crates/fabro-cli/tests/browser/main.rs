//! End-to-end tests of the web UI (SPEC 15) in headless Chromium, each against a real
//! `fabro server` on port 0: live board and run page, stage pages, human gates, cancel
//! and resume, the new-run form, steering the running agent, and hostile text that must
//! stay text.

mod actions;
mod graph;
mod live;
mod security;
mod steer;
mod stream;
mod support;
