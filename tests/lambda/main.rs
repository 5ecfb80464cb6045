//! Lambda controllers (metacontroller) end to end: a real sandbox API server, `bosun run`
//! and webhooks served by the tests on 127.0.0.1.
//!
//! One test binary for the subsystem (each binary links all of bosun): a module per area.

#[path = "../common/mod.rs"]
mod common;

mod controllers;
mod examples;
mod rollout;
mod webhook;
