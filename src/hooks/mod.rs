//! Hooks as child processes: discovery on disk, `--config`, and runs with the file-based
//! contract (binding context, values and patch files named by environment variables).

pub mod discovery;
pub mod process;
mod spawn;

pub use discovery::{DiscoveredHook, discover};
pub use process::{HookInput, HookOutput, HookProcess, HookRunError};
