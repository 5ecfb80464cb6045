//! Modules, global hooks and their bindings end to end: real hook processes, real Helm and
//! the sandbox API server over HTTP.
//!
//! One test binary for the subsystem (each binary links all of bosun): a module per area.

#[path = "../common/mod.rs"]
mod common;

mod bad_input_patcher;
mod bindings;
mod engine_global_hooks;
mod engine_modules;
mod helm_engines;
mod object_patcher;
