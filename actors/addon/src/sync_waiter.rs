//! Synchronization runs the startup waits for (`GlobalHookWaitKubernetesSynchronization`):
//! bindings with `waitForSynchronization` whose run went to a named queue.

use std::collections::BTreeSet;
use std::sync::Arc;

/// The set of `(hook, binding index)` whose Synchronization has not run yet.
#[derive(Clone, Debug)]
pub(crate) struct SyncWaiter(Arc<tokio::sync::watch::Sender<BTreeSet<(String, usize)>>>);

impl Default for SyncWaiter {
    fn default() -> Self {
        SyncWaiter(Arc::new(
            tokio::sync::watch::Sender::new(Default::default()),
        ))
    }
}

impl SyncWaiter {
    /// Binding `index` of `hook` must synchronize before the startup goes on.
    pub fn expect(&self, hook: &str, index: usize) {
        self.0.send_modify(|s| {
            s.insert((hook.to_string(), index));
        });
    }

    /// Binding `index` of `hook` has synchronized.
    pub fn done(&self, hook: &str, index: usize) {
        self.0
            .send_if_modified(|s| s.remove(&(hook.to_string(), index)));
    }

    /// Resolves once nothing is awaited.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(|s| s.is_empty()).await;
    }
}
