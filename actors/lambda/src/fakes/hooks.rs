//! Webhooks answered by closures ([`ScriptedHooks`]), with the faults a real webhook
//! shows armed for the next calls ([`HookFault`]): an error status, a 429, a refused
//! connection, an answer that is not what the protocol asks, an answer that takes long.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::lock;
use crate::ports::{BoxFut, HookClient, HookError, HookFactory, HookSpec, HookType};

/// A webhook's answer to a request: a JSON body, or the hook's failure.
pub type Script = Arc<dyn Fn(&Value) -> Result<Value, HookError> + Send + Sync>;

/// The hook's timeout when the webhook names none (as the binary's client).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a webhook misbehaves for one call.
#[derive(Clone, Debug, PartialEq)]
pub enum HookFault {
    /// Answers with this HTTP status and body.
    Status(u16, String),
    /// Answers 429 with this `Retry-After`.
    TooManyRequests(Duration),
    /// Nobody listens: the connection is refused (the request never arrives).
    Unreachable,
    /// Answers 200 with this body instead of the script's answer.
    Garbage(String),
    /// Answers the script's answer after this long (tokio time): past the hook's timeout
    /// the call fails as the binary's client fails it, at the timeout.
    Slow(Duration),
}

/// A fault armed for the next calls of one hook.
struct Armed {
    controller: String,
    hook: HookType,
    times: usize,
    fault: HookFault,
}

/// Calls of one hook about one object in flight, and the most there ever were.
#[derive(Default)]
struct InFlight {
    now: HashMap<(String, String), usize>,
    most_for_one_object: usize,
    most: usize,
    total: usize,
}

/// Webhooks answered by closures, by controller name and hook type; the answer may be
/// changed while controllers run. Every request that reaches a webhook is kept.
#[derive(Default)]
pub struct ScriptedHooks {
    scripts: Mutex<HashMap<(String, HookType), Script>>,
    requests: Mutex<Vec<(String, HookType, Value)>>,
    faults: Mutex<VecDeque<Armed>>,
    in_flight: Mutex<InFlight>,
}

impl ScriptedHooks {
    /// Answers `controller`'s `hook` with `script` from now on.
    pub fn answer(
        &self,
        controller: &str,
        hook: HookType,
        script: impl Fn(&Value) -> Result<Value, HookError> + Send + Sync + 'static,
    ) {
        lock(&self.scripts).insert((controller.to_string(), hook), Arc::new(script));
    }

    /// The next `times` calls of `controller`'s `hook` meet `fault` (after faults armed
    /// before, in order).
    pub fn fail(&self, controller: &str, hook: HookType, times: usize, fault: HookFault) {
        lock(&self.faults).push_back(Armed {
            controller: controller.to_string(),
            hook,
            times,
            fault,
        });
    }

    /// Faults armed and not met yet.
    pub fn faults_left(&self) -> usize {
        lock(&self.faults).iter().map(|a| a.times).sum()
    }

    /// The requests `controller`'s `hook` got, oldest first.
    pub fn requests(&self, controller: &str, hook: HookType) -> Vec<Value> {
        lock(&self.requests)
            .iter()
            .filter(|(c, h, _)| c == controller && *h == hook)
            .map(|(_, _, r)| r.clone())
            .collect()
    }

    /// The most calls in flight at once for one object of one controller, and over all.
    pub fn most_in_flight(&self) -> (usize, usize) {
        let f = lock(&self.in_flight);
        (f.most_for_one_object, f.most)
    }

    fn next_fault(&self, controller: &str, hook: HookType) -> Option<HookFault> {
        let mut faults = lock(&self.faults);
        let at = faults
            .iter()
            .position(|a| a.controller == controller && a.hook == hook && a.times > 0)?;
        let armed = &mut faults[at];
        armed.times -= 1;
        let fault = armed.fault.clone();
        if armed.times == 0 {
            faults.remove(at);
        }
        Some(fault)
    }
}

/// One controller's hook of [`ScriptedHooks`].
struct ScriptedClient {
    hooks: Arc<ScriptedHooks>,
    controller: String,
    hook: HookType,
    url: String,
    timeout: Duration,
}

/// Counts a call in flight while it lives.
struct Flying<'a> {
    hooks: &'a ScriptedHooks,
    key: (String, String),
}

impl<'a> Flying<'a> {
    fn start(hooks: &'a ScriptedHooks, key: (String, String)) -> Flying<'a> {
        let mut f = lock(&hooks.in_flight);
        let n = {
            let n = f.now.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        f.total += 1;
        f.most_for_one_object = f.most_for_one_object.max(n);
        f.most = f.most.max(f.total);
        Flying { hooks, key }
    }
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        let mut f = lock(&self.hooks.in_flight);
        f.total -= 1;
        if let Some(n) = f.now.get_mut(&self.key) {
            *n -= 1;
        }
    }
}

impl ScriptedClient {
    fn status(&self, code: u16, body: &str) -> HookError {
        HookError::Status {
            hook: self.hook,
            url: self.url.clone(),
            code,
            body: body.to_string(),
        }
    }

    /// The script's answer to `body` (kept as a request the webhook got).
    fn scripted(&self, body: &[u8]) -> Result<Bytes, HookError> {
        let request: Value = serde_json::from_slice(body).map_err(|e| HookError::Config {
            hook: self.hook,
            message: format!("the request is not JSON: {e}"),
        })?;
        lock(&self.hooks.requests).push((self.controller.clone(), self.hook, request.clone()));
        let script = lock(&self.hooks.scripts)
            .get(&(self.controller.clone(), self.hook))
            .cloned()
            .ok_or_else(|| self.status(404, "no script"))?;
        script(&request).map(|v| Bytes::from(v.to_string()))
    }
}

impl HookClient for ScriptedClient {
    fn url(&self) -> &str {
        &self.url
    }

    fn call(&self, body: Bytes, cache_key: String) -> BoxFut<'_, Result<Bytes, HookError>> {
        Box::pin(async move {
            let _flying = Flying::start(&self.hooks, (self.controller.clone(), cache_key));
            let fault = self.hooks.next_fault(&self.controller, self.hook);
            match fault {
                None => self.scripted(&body),
                Some(HookFault::Status(code, text)) => {
                    self.scripted(&body)?;
                    Err(self.status(code, &text))
                }
                Some(HookFault::TooManyRequests(retry_after)) => {
                    self.scripted(&body)?;
                    Err(HookError::TooManyRequests {
                        hook: self.hook,
                        url: self.url.clone(),
                        retry_after,
                    })
                }
                Some(HookFault::Unreachable) => Err(HookError::Transport {
                    hook: self.hook,
                    url: self.url.clone(),
                    message: "client error (Connect): tcp connect error: Connection refused".into(),
                }),
                Some(HookFault::Garbage(text)) => {
                    self.scripted(&body)?;
                    Ok(Bytes::from(text))
                }
                Some(HookFault::Slow(delay)) => {
                    if delay >= self.timeout {
                        tokio::time::sleep(self.timeout).await;
                        lock(&self.hooks.requests).push((
                            self.controller.clone(),
                            self.hook,
                            serde_json::from_slice(&body).unwrap_or(Value::Null),
                        ));
                        return Err(HookError::Transport {
                            hook: self.hook,
                            url: self.url.clone(),
                            message: format!(
                                "timeout: no complete answer within {:?} (Client.Timeout exceeded)",
                                self.timeout
                            ),
                        });
                    }
                    tokio::time::sleep(delay).await;
                    self.scripted(&body)
                }
            }
        })
    }
}

/// Builds [`ScriptedHooks`] clients (a `HookFactory` of an `Arc<ScriptedHooks>`); each
/// takes its webhook's `timeout` as the binary's client does.
pub struct ScriptedFactory(pub Arc<ScriptedHooks>);

impl HookFactory for ScriptedFactory {
    fn client(&self, spec: HookSpec) -> BoxFut<'_, Result<Arc<dyn HookClient>, HookError>> {
        let timeout = spec
            .hook
            .webhook
            .as_ref()
            .and_then(|w| w.timeout.as_deref())
            .and_then(|t| bosun_runtime::clock::parse_go_duration(t).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TIMEOUT);
        let client: Arc<dyn HookClient> = Arc::new(ScriptedClient {
            hooks: Arc::clone(&self.0),
            url: format!("http://hooks.test/{}/{}", spec.controller, spec.hook_type),
            controller: spec.controller,
            hook: spec.hook_type,
            timeout,
        });
        Box::pin(async move { Ok(client) })
    }
}
