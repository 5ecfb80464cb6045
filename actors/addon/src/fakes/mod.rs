//! In-memory stand-ins for every port, so the engine runs in-process in tests: hooks that
//! answer from a script, a ConfigMap in a map, Helm releases in a map, object patches
//! recorded, kubernetes bindings over objects the test puts. The journal's stand-in is the
//! runtime's [`crate::ports::MemoryJournal`].
//!
//! ```text
//!   Engine ──► ScriptedHooks (configs, outputs, gates)   ──► runs(): what ran, in order
//!          ──► MemoryConfigMap / MemoryReleases / RecordingPatcher ──► what was written
//!          ──► MemoryBindings: objects the test adds, changes and deletes, by kind
//!   test   ──► fault toggles on each: the next N calls fail with a given PortError
//! ```
//!
//! Every fake can fail the way its real adapter does, one toggle per port operation: the
//! next `times` calls fail with the given [`PortError`] (transient, conflict, permanent),
//! then the fake answers again ([`ALWAYS`] keeps failing until cleared).
//!
//! | fake                | toggles                                                          |
//! |---------------------|------------------------------------------------------------------|
//! | [`ScriptedHooks`]   | `fail` (a run exits non-zero), `fail_config`, `fail_enabled`, `gate` |
//! | [`MemoryConfigMap`] | `fail_saves` (a conflict), `fail_removes`, `fail_loads`          |
//! | [`MemoryReleases`]  | `fail_upgrades` (left `failed`), `fail_renders`, `fail_uninstalls`, `fail_status`, `fail_list`, `fail_apply`, `set_status`, `delete_object`, `rewrite_object` |
//! | [`RecordingPatcher`]| `refuse`                                                         |
//! | [`MemoryBindings`]  | `fail_start`, `break_watch` / `resume_watch` (relist), `replace_all` (a restarted API server) |

mod bindings;
mod config_map;
mod hooks;
mod patcher;
mod releases;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::ports::PortError;

pub use bindings::MemoryBindings;
pub use config_map::MemoryConfigMap;
pub use hooks::{Answer, Gate, ScriptedHooks, SeenEnabled, SeenRun};
pub use patcher::RecordingPatcher;
pub use releases::MemoryReleases;

/// `times` for a fault that lasts until it is cleared (set again with 0).
pub const ALWAYS: u32 = u32::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Failures planned per key (a hook, a release, an operation): the next calls fail.
#[derive(Default)]
struct Faults(HashMap<String, (u32, PortError)>);

impl Faults {
    /// The next `times` calls for `key` fail with `error` (0 clears).
    fn set(&mut self, key: &str, times: u32, error: PortError) {
        if times == 0 {
            self.0.remove(key);
        } else {
            self.0.insert(key.to_string(), (times, error));
        }
    }

    /// The failure planned for this call of `key`, if any (one is used up).
    fn take(&mut self, key: &str) -> Option<PortError> {
        let (left, error) = self.0.get_mut(key)?;
        let error = error.clone();
        if *left != ALWAYS {
            *left -= 1;
            if *left == 0 {
                self.0.remove(key);
            }
        }
        Some(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fails_its_calls_then_passes() {
        let mut f = Faults::default();
        f.set("upgrade a", 2, PortError::transient("boom"));
        assert!(f.take("upgrade b").is_none());
        assert_eq!(
            f.take("upgrade a").map(|e| e.to_string()),
            Some("boom".into())
        );
        assert!(f.take("upgrade a").is_some());
        assert!(f.take("upgrade a").is_none());
        f.set("x", ALWAYS, PortError::permanent("no"));
        for _ in 0..5 {
            assert!(f.take("x").is_some());
        }
        f.set("x", 0, PortError::permanent("no"));
        assert!(f.take("x").is_none());
    }
}
