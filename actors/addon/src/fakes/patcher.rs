//! Records the object patcher operations hooks write; can refuse them as the API server
//! refuses a patch.

use std::sync::{Arc, Mutex};

use super::{Faults, lock};
use crate::ports::{BoxFut, ObjectPatcher, PortError};

#[derive(Default)]
struct Inner {
    seen: Vec<(String, String)>,
    refused: Vec<(String, String)>,
    faults: Faults,
}

/// Records the object patcher operations hooks write.
#[derive(Clone, Default)]
pub struct RecordingPatcher {
    inner: Arc<Mutex<Inner>>,
}

impl RecordingPatcher {
    /// `(hook, KUBERNETES_PATCH_PATH text)` applied so far.
    pub fn seen(&self) -> Vec<(String, String)> {
        lock(&self.inner).seen.clone()
    }

    /// `(hook, text)` of the calls refused so far.
    pub fn refused(&self) -> Vec<(String, String)> {
        lock(&self.inner).refused.clone()
    }

    /// The next `times` calls are refused with `error` (nothing is applied).
    pub fn refuse(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("apply", times, error);
        self
    }
}

impl ObjectPatcher for RecordingPatcher {
    fn apply(&self, hook: String, text: String) -> BoxFut<'_, Result<(), PortError>> {
        let result = {
            let mut inner = lock(&self.inner);
            match inner.faults.take("apply") {
                Some(e) => {
                    inner.refused.push((hook, text));
                    Err(e)
                }
                None => {
                    inner.seen.push((hook, text));
                    Ok(())
                }
            }
        };
        Box::pin(async move { result })
    }
}
