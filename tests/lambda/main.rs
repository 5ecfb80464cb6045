//! Lambda controllers (metacontroller) end to end: a real sandbox API server, `bosun run`
//! and webhooks served by the tests on 127.0.0.1. The top of the subsystem's tests: the
//! examples, integration cases, rollouts and faults run in-process, on the fakes beside the
//! ports, in `actors/lambda/tests/`; here is what only the process, HTTP and an API server
//! can show.
//!
//! One test binary for the subsystem (each binary links all of bosun): a module per area.

#[path = "../common/mod.rs"]
mod common;

mod controllers;
mod examples;
mod rollout;
mod webhook;
