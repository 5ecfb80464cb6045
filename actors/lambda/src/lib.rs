//! metacontroller's lambda controllers on the bosun runtime.
//!
//! A user's webhook maps a parent object (with its children and related objects) to the
//! desired children and status; this crate does the rest: it claims children by
//! ControllerRef rules, calls the hooks, applies the answer with metacontroller's 3-way
//! merge, writes status and manages finalizers. Each CompositeController and
//! DecoratorController is an actor of the runtime: a keyed work queue (one sync in flight
//! per parent) reconciled by the runtime's runner, its mailbox shown as
//! `lambda/<Kind>/<name>` (`controller.rs`); the registry that starts and stops them is
//! one more (`registry.rs`, `lambda/controllers`).
//!
//! ```text
//!   types.rs     the CompositeController / DecoratorController specs
//!   protocol.rs  hook requests and responses (v1 / v2 keys, strict and loose decoding)
//!   keys.rs      GVK keys, object keys of the hook maps, the controllers' queue keys
//!   selector.rs  metav1.LabelSelector and annotation selectors
//!   apply.rs     the 3-way merge and ApplyUpdate (pure)
//!   claim.rs     ControllerRef claim rules (pure)
//!   children.rs  ManageChildren: a pure plan of child actions, then one apply
//!   rollout.rs   rolling updates through ControllerRevisions (pure planning)
//!   steps/       the steps both syncs share: finalizer, hook call and related objects, status
//!   reconcile.rs the `Reconcile` trait the runner (`controller.rs`) drives
//!   composite/   the CompositeController sync: named steps (mod.rs), the pure plan
//!                (plan.rs), the settled memo around it (settled.rs), rollouts (rolling.rs)
//!   decorator.rs the DecoratorController sync: named steps, a pure write-back
//!   events.rs    the lambda journal's event and its readable line
//!   journal_state.rs  the journal folded into each controller's state (`bosun journal replay`)
//! ```
//!
//! The crate does no IO: the cluster and the webhooks are ports (`ports.rs`) implemented
//! in the binary, and in memory by `fakes.rs` (the in-process tests in `tests/`).

pub mod apply;
pub mod children;
pub mod claim;
pub mod composite;
pub mod controller;
pub mod decorator;
pub mod events;
pub mod fakes;
pub mod journal_state;
pub mod keys;
pub mod ports;
pub mod protocol;
pub mod reconcile;
pub mod registry;
pub mod related;
pub mod rollout;
pub mod selector;
pub mod steps;
pub mod types;
