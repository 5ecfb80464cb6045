//! In-memory stand-ins for every port, so the engine runs in-process in tests: hooks that
//! answer from a script, a ConfigMap in a map, Helm releases in a map, object patches
//! recorded. The journal's stand-in is the runtime's [`crate::ports::MemoryJournal`].
//!
//! ```text
//!   Engine ──► ScriptedHooks (configs, outputs, gates)   ──► runs(): what ran, in order
//!          ──► MemoryConfigMap / MemoryReleases / RecordingPatcher ──► what was written
//!          ──► MemoryBindings: objects the test adds, changes and deletes, by kind
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use crate::bindings::{BindingEvent, BindingEvents, HookRef};
use crate::hook_config::{KubernetesBinding, WatchEvent};
use crate::ports::{
    BoxFut, ConfigStore, EnabledRun, HookExecutor, HookResult, HookRun, KubeBindings,
    ObjectPatcher, ObjectPreview, PortError, ReleaseInfo, Releases, Rendered,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One hook run as the fake saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenRun {
    /// The hook's name.
    pub hook: String,
    /// The first binding context's `binding` (`onStartup`, `beforeHelm`, …).
    pub binding: String,
    /// The module, for module hooks.
    pub module: Option<String>,
    /// `VALUES_PATH` as the hook received it.
    pub values: Value,
    /// `BINDING_CONTEXT_PATH` as the hook received it.
    pub contexts: Value,
}

/// What a scripted hook answers.
pub type Answer = Arc<dyn Fn(&HookRun) -> Result<HookResult, PortError> + Send + Sync>;

#[derive(Default)]
struct Script {
    configs: HashMap<String, String>,
    answers: HashMap<String, Answer>,
    enabled: HashMap<String, bool>,
    gates: HashMap<String, watch::Receiver<bool>>,
    runs: Vec<SeenRun>,
}

/// Hooks whose `--config`, output and `enabled` answers come from a script.
#[derive(Clone, Default)]
pub struct ScriptedHooks {
    script: Arc<Mutex<Script>>,
}

/// Holds a hook's runs until [`Gate::open`].
pub struct Gate(watch::Sender<bool>);

impl Gate {
    /// Lets every held and later run go on.
    pub fn open(&self) {
        let _ = self.0.send(true);
    }
}

impl ScriptedHooks {
    /// `hook --config` prints `config`.
    pub fn config(&self, hook: &str, config: &str) -> &Self {
        lock(&self.script)
            .configs
            .insert(hook.to_string(), config.to_string());
        self
    }

    /// Runs of `hook` answer with `answer` (the default: exit 0, no output).
    pub fn answer(
        &self,
        hook: &str,
        answer: impl Fn(&HookRun) -> Result<HookResult, PortError> + Send + Sync + 'static,
    ) -> &Self {
        lock(&self.script)
            .answers
            .insert(hook.to_string(), Arc::new(answer));
        self
    }

    /// The `enabled` script of `module` answers `on` (the default: true).
    pub fn enabled(&self, module: &str, on: bool) -> &Self {
        lock(&self.script).enabled.insert(module.to_string(), on);
        self
    }

    /// Runs of `hook` wait until the returned gate opens.
    pub fn gate(&self, hook: &str) -> Gate {
        let (tx, rx) = watch::channel(false);
        lock(&self.script).gates.insert(hook.to_string(), rx);
        Gate(tx)
    }

    /// Every run so far, in the order they started.
    pub fn runs(&self) -> Vec<SeenRun> {
        lock(&self.script).runs.clone()
    }
}

impl HookExecutor for ScriptedHooks {
    fn config(&self, name: &str, _path: &Path) -> BoxFut<'_, Result<String, PortError>> {
        let config = lock(&self.script).configs.get(name).cloned();
        let name = name.to_string();
        Box::pin(async move {
            config.ok_or_else(|| {
                PortError::permanent(format!("hook {name:?}: no scripted configuration"))
            })
        })
    }

    fn run(&self, run: HookRun) -> BoxFut<'static, Result<HookResult, PortError>> {
        // Recorded when called, as the real runner starts the process when called.
        let (answer, gate) = {
            let mut script = lock(&self.script);
            script.runs.push(SeenRun {
                hook: run.name.clone(),
                binding: run.binding_context[0]["binding"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                module: run.log_fields.module.clone(),
                values: run.values.clone(),
                contexts: run.binding_context.clone(),
            });
            (
                script.answers.get(&run.name).cloned(),
                script.gates.get(&run.name).cloned(),
            )
        };
        Box::pin(async move {
            if let Some(mut gate) = gate {
                let _ = gate.wait_for(|open| *open).await;
            }
            match answer {
                Some(answer) => answer(&run),
                None => Ok(HookResult::default()),
            }
        })
    }

    fn enabled(&self, run: EnabledRun) -> BoxFut<'_, Result<bool, PortError>> {
        let on = lock(&self.script)
            .enabled
            .get(&run.module)
            .copied()
            .unwrap_or(true);
        Box::pin(async move { Ok(on) })
    }
}

/// The operator's ConfigMap as a map.
#[derive(Clone, Default)]
pub struct MemoryConfigMap {
    data: Arc<Mutex<Option<BTreeMap<String, String>>>>,
}

impl MemoryConfigMap {
    /// Its `data` (`None` while it does not exist).
    pub fn data(&self) -> Option<BTreeMap<String, String>> {
        lock(&self.data).clone()
    }
}

impl ConfigStore for MemoryConfigMap {
    fn load(&self) -> BoxFut<'_, Result<Option<crate::ports::ConfigMapData>, PortError>> {
        let data = self.data();
        Box::pin(async move { Ok(data) })
    }

    fn save(&self, key: String, yaml: String) -> BoxFut<'_, Result<(), PortError>> {
        lock(&self.data)
            .get_or_insert_with(Default::default)
            .insert(key, yaml);
        Box::pin(async { Ok(()) })
    }

    fn remove(&self, key: String) -> BoxFut<'_, Result<(), PortError>> {
        if let Some(data) = lock(&self.data).as_mut() {
            data.remove(&key);
        }
        Box::pin(async { Ok(()) })
    }
}

/// Helm releases as a map: a render's checksum is the md5 of its values, an upgrade bumps
/// the revision. Every operation is logged as `upgrade <release>`, `uninstall <release>`.
#[derive(Clone, Default)]
pub struct MemoryReleases {
    releases: Arc<Mutex<BTreeMap<String, ReleaseInfo>>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl MemoryReleases {
    /// Operations so far, in order.
    pub fn log(&self) -> Vec<String> {
        lock(&self.log).clone()
    }

    /// The releases that exist, with their revisions.
    pub fn revisions(&self) -> BTreeMap<String, u32> {
        lock(&self.releases)
            .iter()
            .map(|(k, v)| (k.clone(), v.revision))
            .collect()
    }

    fn note(&self, line: String) {
        lock(&self.log).push(line);
    }
}

impl Releases for MemoryReleases {
    fn render(
        &self,
        _release: String,
        _chart: std::path::PathBuf,
        values: Value,
    ) -> BoxFut<'_, Result<Rendered, PortError>> {
        let checksum = crate::values::checksum(&values);
        Box::pin(async move {
            Ok(Rendered {
                checksum,
                objects: Vec::new(),
            })
        })
    }

    fn status(&self, release: String) -> BoxFut<'_, Result<Option<ReleaseInfo>, PortError>> {
        let info = lock(&self.releases).get(&release).cloned();
        Box::pin(async move { Ok(info) })
    }

    fn upgrade(
        &self,
        release: String,
        _chart: std::path::PathBuf,
        _values: Value,
        checksum: String,
    ) -> BoxFut<'_, Result<u32, PortError>> {
        self.note(format!("upgrade {release}"));
        let revision = {
            let mut releases = lock(&self.releases);
            let info = releases.entry(release).or_default();
            info.revision += 1;
            info.status = "deployed".into();
            info.checksum = Some(checksum);
            info.revision
        };
        Box::pin(async move { Ok(revision) })
    }

    fn uninstall(&self, release: String) -> BoxFut<'_, Result<bool, PortError>> {
        self.note(format!("uninstall {release}"));
        let existed = lock(&self.releases).remove(&release).is_some();
        Box::pin(async move { Ok(existed) })
    }

    fn list(&self) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        let names = lock(&self.releases).keys().cloned().collect();
        Box::pin(async move { Ok(names) })
    }

    fn drift(&self, _objects: Vec<Value>) -> BoxFut<'_, Result<Vec<String>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn apply(&self, objects: Vec<Value>) -> BoxFut<'_, Result<(), PortError>> {
        self.note(format!("apply {} objects", objects.len()));
        Box::pin(async { Ok(()) })
    }

    fn preview(
        &self,
        _release: String,
        _objects: Vec<Value>,
    ) -> BoxFut<'_, Result<Vec<ObjectPreview>, PortError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Records the object patcher operations hooks write.
#[derive(Clone, Default)]
pub struct RecordingPatcher {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl RecordingPatcher {
    /// `(hook, KUBERNETES_PATCH_PATH text)` so far.
    pub fn seen(&self) -> Vec<(String, String)> {
        lock(&self.seen).clone()
    }
}

impl ObjectPatcher for RecordingPatcher {
    fn apply(&self, hook: String, text: String) -> BoxFut<'_, Result<(), PortError>> {
        lock(&self.seen).push((hook, text));
        Box::pin(async { Ok(()) })
    }
}

/// One hook's kubernetes bindings in [`MemoryBindings`].
struct Started {
    hook: HookRef,
    bindings: Vec<KubernetesBinding>,
    events: BindingEvents,
    /// Bindings whose events are delivered (their Synchronization ran).
    released: Vec<bool>,
}

#[derive(Default)]
struct Watched {
    /// Objects by kind, namespace and name.
    objects: BTreeMap<(String, String, String), Value>,
    started: Vec<Started>,
}

/// Kubernetes bindings over objects the test adds, changes and deletes: a binding
/// selects the objects of its `kind` (and `namespace.nameSelector`-less namespace, name
/// selector), keeps them in its snapshot and, once released, tells its hook of each event
/// it executes on. jq filters and label selectors are not evaluated.
#[derive(Clone, Default)]
pub struct MemoryBindings {
    inner: Arc<Mutex<Watched>>,
}

fn selects(binding: &KubernetesBinding, kind: &str, object: &Value) -> bool {
    binding.kind.eq_ignore_ascii_case(kind)
        && (binding.name_selector.is_empty()
            || binding
                .name_selector
                .iter()
                .any(|n| object["metadata"]["name"].as_str() == Some(n.as_str())))
}

impl MemoryBindings {
    /// Adds or changes an object of `kind`.
    pub fn put(&self, kind: &str, object: Value) {
        let key = (
            kind.to_string(),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let event = {
            let mut w = lock(&self.inner);
            let existed = w.objects.insert(key, object.clone()).is_some();
            if existed {
                WatchEvent::Modified
            } else {
                WatchEvent::Added
            }
        };
        self.deliver(kind, &object, event);
    }

    /// Deletes an object of `kind`.
    pub fn delete(&self, kind: &str, namespace: &str, name: &str) {
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        let removed = lock(&self.inner).objects.remove(&key);
        if let Some(object) = removed {
            self.deliver(kind, &object, WatchEvent::Deleted);
        }
    }

    /// Hooks whose bindings run now (`owner/hook`).
    pub fn started(&self) -> Vec<String> {
        lock(&self.inner)
            .started
            .iter()
            .map(|s| format!("{}/{}", s.hook.owner, s.hook.hook))
            .collect()
    }

    fn deliver(&self, kind: &str, object: &Value, event: WatchEvent) {
        // Collected under the lock, delivered after it: the engine may ask for snapshots.
        let deliveries: Vec<(BindingEvents, BindingEvent)> = lock(&self.inner)
            .started
            .iter()
            .flat_map(|s| {
                s.bindings
                    .iter()
                    .enumerate()
                    .filter(|(i, b)| {
                        s.released.get(*i).copied().unwrap_or(false)
                            && selects(b, kind, object)
                            && b.execute_hook_on_event.contains(&event)
                    })
                    .map(|(index, b)| {
                        let object = (b.keep_full_objects_in_memory
                            || event == WatchEvent::Deleted)
                            .then(|| crate::context_stub::SharedJson::new(object));
                        (
                            Arc::clone(&s.events),
                            BindingEvent {
                                hook: s.hook.clone(),
                                index,
                                watch_event: event,
                                object,
                                filter_result: None,
                            },
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for (events, e) in deliveries {
            events(e);
        }
    }
}

impl KubeBindings for MemoryBindings {
    fn start(
        &self,
        hook: HookRef,
        bindings: Vec<KubernetesBinding>,
        events: BindingEvents,
    ) -> BoxFut<'_, Result<(), PortError>> {
        let mut w = lock(&self.inner);
        w.started.retain(|s| s.hook != hook);
        w.started.push(Started {
            hook,
            released: vec![false; bindings.len()],
            bindings,
            events,
        });
        Box::pin(async { Ok(()) })
    }

    fn release(&self, hook: &HookRef, index: usize) {
        let mut w = lock(&self.inner);
        if let Some(s) = w.started.iter_mut().find(|s| s.hook == *hook) {
            for r in s.released.iter_mut().skip(index) {
                *r = true;
            }
        }
    }

    fn snapshot(&self, hook: &HookRef, index: usize) -> Vec<Value> {
        let w = lock(&self.inner);
        let Some(binding) = w
            .started
            .iter()
            .find(|s| s.hook == *hook)
            .and_then(|s| s.bindings.get(index))
        else {
            return Vec::new();
        };
        // BTreeMap order: namespace, then name, within the kind.
        w.objects
            .iter()
            .filter(|((kind, _, _), o)| selects(binding, kind, o))
            .map(|(_, o)| serde_json::json!({"object": o}))
            .collect()
    }

    fn stop_owner(&self, owner: &str) {
        lock(&self.inner).started.retain(|s| s.hook.owner != owner);
    }
}
