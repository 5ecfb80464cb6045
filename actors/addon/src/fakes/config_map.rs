//! The operator's ConfigMap as a map, with writes that can conflict or fail as the API
//! server's do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{Faults, lock};
use crate::ports::{BoxFut, ConfigMapData, ConfigStore, PortError};

#[derive(Default)]
struct Inner {
    data: Option<BTreeMap<String, String>>,
    writes: Vec<String>,
    faults: Faults,
}

/// The operator's ConfigMap as a map.
#[derive(Clone, Default)]
pub struct MemoryConfigMap {
    inner: Arc<Mutex<Inner>>,
}

impl MemoryConfigMap {
    /// Its `data` (`None` while it does not exist).
    pub fn data(&self) -> Option<BTreeMap<String, String>> {
        lock(&self.inner).data.clone()
    }

    /// A user's edit: sets `key` to `text` (creating the ConfigMap).
    pub fn put(&self, key: &str, text: &str) -> &Self {
        lock(&self.inner)
            .data
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), text.to_string());
        self
    }

    /// Writes that went through, in order: `save <key>: <text>`, `remove <key>`.
    pub fn writes(&self) -> Vec<String> {
        lock(&self.inner).writes.clone()
    }

    /// The next `times` saves fail with `error` (a conflict: someone else updated it).
    pub fn fail_saves(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("save", times, error);
        self
    }

    /// The next `times` removals of a key fail with `error`.
    pub fn fail_removes(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("remove", times, error);
        self
    }

    /// The next `times` loads fail with `error`.
    pub fn fail_loads(&self, times: u32, error: PortError) -> &Self {
        lock(&self.inner).faults.set("load", times, error);
        self
    }
}

impl ConfigStore for MemoryConfigMap {
    fn load(&self) -> BoxFut<'_, Result<Option<ConfigMapData>, PortError>> {
        let result = {
            let mut inner = lock(&self.inner);
            match inner.faults.take("load") {
                Some(e) => Err(e),
                None => Ok(inner.data.clone()),
            }
        };
        Box::pin(async move { result })
    }

    fn save(&self, key: String, yaml: String) -> BoxFut<'_, Result<(), PortError>> {
        let result = {
            let mut inner = lock(&self.inner);
            match inner.faults.take("save") {
                Some(e) => Err(e),
                None => {
                    inner
                        .writes
                        .push(format!("save {key}: {}", yaml.trim_end()));
                    inner
                        .data
                        .get_or_insert_with(Default::default)
                        .insert(key, yaml);
                    Ok(())
                }
            }
        };
        Box::pin(async move { result })
    }

    fn remove(&self, key: String) -> BoxFut<'_, Result<(), PortError>> {
        let result = {
            let mut inner = lock(&self.inner);
            match inner.faults.take("remove") {
                Some(e) => Err(e),
                None => {
                    inner.writes.push(format!("remove {key}"));
                    if let Some(data) = inner.data.as_mut() {
                        data.remove(&key);
                    }
                    Ok(())
                }
            }
        };
        Box::pin(async move { result })
    }
}
