//! What bosun's processes need from the machine and the network, below every other bosun
//! crate (the binary, the journal, the sandbox, the Kubernetes layer):
//!
//! ```text
//!   serve.rs    HTTP/1 listeners that close slow clients as kube-apiserver does
//!   private.rs  private files and folders (0700 / 0600), and tightening older ones
//!   signal.rs   the stop signal (SIGINT, SIGTERM)
//!   host.rs     the Host header of a loopback listener (DNS rebinding refused)
//!   secret.rs   a Secret's stringData folded into data, as kube-apiserver stores it
//! ```

mod host;
mod private;
mod secret;
mod serve;
mod signal;

pub use host::{loopback_host, single_host};
pub use private::{
    create_private_dir, log_tightened, tighten_one, tighten_tree, write_private_file,
};
pub use secret::fold_string_data;
pub use serve::{HEADER_READ_TIMEOUT, IDLE_TIMEOUT, Limits, connection, serve};
pub use signal::shutdown_signal;
