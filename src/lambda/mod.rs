//! The cluster side of the metacontroller-compatible lambda controllers (the
//! `bosun_lambda` crate holds their logic): the webhook client that calls a controller's
//! `sync`, `finalize` and `customize` hooks, with its URL, TLS, credentials, ETag cache
//! and metrics, built once per hook when a controller starts.

pub mod webhook;
