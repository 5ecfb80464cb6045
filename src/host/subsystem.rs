//! A subsystem as the host starts it: one `impl Subsystem` per subsystem (in its adapter
//! folder, `src/<name>/subsystem.rs`), listed once in `cli::subsystems`. `start_all`,
//! the journals an HA leader serves and a standby follows, and `/readyz`'s list of what is
//! still starting are all one loop over that list.
//!
//! ```text
//!   Subsystem ──(switched on?)── start(&Host) ──► Handle ──► view: in Parts by its name
//!     name, journal, essential?,                     │   └──► register: its journal's
//!     idle_view (shown until it runs)                │        health in Parts
//!                                                    └──────► journal: served to standbys
//! ```

use std::sync::Arc;

use futures::future::BoxFuture;

use super::{Host, Parts, SubsystemView};

/// One subsystem bosun hosts (the modules, the lambda controllers, the deployer).
pub trait Subsystem: Send {
    /// How logs and `/readyz` name it (`modules`, `lambda controllers`, `deployer`).
    fn name(&self) -> &'static str;

    /// Whether it is switched on: one switched off is not started at all.
    fn switched_on(&self) -> bool;

    /// Its journal: its name on the HA stream, its folder, its event type.
    fn journal(&self) -> crate::ha::JournalSpec;

    /// Whether bosun runs only with it: it starts before the endpoints, which answer
    /// about it from their first request, and its failure stops the start. Any other
    /// starts after them, is listed by `/readyz` while it starts and named if it fails,
    /// and the rest runs on without it.
    fn essential(&self) -> bool {
        false
    }

    /// Said when it is switched off (default: nothing).
    fn switched_off(&self) {}

    /// What the endpoints show of it while it does not run (switched off, starting or
    /// failed); `None`: nothing.
    fn idle_view(&self) -> Option<Arc<dyn SubsystemView>> {
        None
    }

    /// Starts it on the host.
    fn start<'a>(self: Box<Self>, host: &'a Host) -> BoxFuture<'a, anyhow::Result<Box<dyn Handle>>>
    where
        Self: 'a;
}

/// A started subsystem: it runs until dropped.
pub trait Handle: Send {
    /// Its journal, served to standbys.
    fn journal(&self) -> Arc<dyn crate::ha::replication::Source>;

    /// What the endpoints show of it while it runs.
    fn view(&self) -> Arc<dyn SubsystemView>;

    /// Registers its journal's health, which `/readyz` and the metrics read.
    fn register(&self, parts: &mut Parts);
}
