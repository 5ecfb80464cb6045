//! Leader election on a `coordination.k8s.io/v1` Lease through `kube-lease-manager`, with
//! what bosun adds around it:
//!
//! - **fencing**: the leader watches its own Lease and stops all work once its last
//!   renewal is older than the renew deadline (or another replica holds the Lease), which
//!   is before the lease duration lets anyone else take it;
//! - **fast takeover**: a standby that sees the Lease released (a leader shutting down)
//!   asks for it at once instead of sleeping until the old lease would have expired;
//! - the holder as every replica sees it, for the standby's journal follower.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::watcher;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseParams};
use tokio::sync::watch;

/// Lease timings (addon-operator's: 35 s / 30 s / 10 s).
#[derive(Clone, Copy, Debug)]
pub struct Timings {
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// The leader stops all work when it could not renew for this long.
    pub renew_deadline: Duration,
    /// How often the leader renews, and how often a standby tries.
    pub retry_period: Duration,
}

impl Timings {
    /// Checks the timings against each other.
    pub fn check(&self) -> Result<(), String> {
        let whole = |d: Duration| d.as_secs() >= 1 && d.subsec_nanos() == 0;
        if !whole(self.lease_duration) || !whole(self.retry_period) {
            return Err("the lease duration and the retry period are whole seconds (≥ 1s)".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the retry period ({:?}) must be shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// Who holds the Lease, as last seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    /// `spec.holderIdentity` (`None`: released or never taken).
    pub identity: Option<String>,
    /// `spec.renewTime` (the holder's clock).
    pub renewed: Option<SystemTime>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Option<Duration>,
}

impl Holder {
    fn of(lease: &Lease) -> Holder {
        let Some(spec) = &lease.spec else {
            return Holder::default();
        };
        let renewed = spec.renew_time.as_ref().and_then(|t| {
            let text = serde_json::to_value(t).ok()?;
            humantime::parse_rfc3339_weak(text.as_str()?).ok()
        });
        Holder {
            identity: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            renewed,
            duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }

    /// The holder, unless the lease is free or has expired (by this clock).
    pub fn current(&self) -> Option<&str> {
        let identity = self.identity.as_deref()?;
        match (self.renewed, self.duration) {
            (Some(r), Some(d)) if r + d < SystemTime::now() => None,
            _ => Some(identity),
        }
    }
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// No renewal was seen for the renew deadline.
    NotRenewed(Duration),
    /// Another replica holds the Lease.
    TakenBy(String),
    /// The lease manager reported the lock lost.
    Released,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::NotRenewed(d) => write!(
                f,
                "the lease was not renewed for {d:?} (the renew deadline)"
            ),
            Lost::TakenBy(h) => write!(f, "the lease is held by {h}"),
            Lost::Released => write!(f, "the lease manager lost the lock"),
        }
    }
}

/// One replica's side of the election.
pub struct Elector {
    client: kube::Client,
    namespace: String,
    name: String,
    identity: String,
    timings: Timings,
    holder: watch::Receiver<Holder>,
    watch_task: tokio::task::JoinHandle<()>,
    manager: tokio::sync::Mutex<Option<Arc<LeaseManager>>>,
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.watch_task.abort();
    }
}

impl Elector {
    /// Starts watching the Lease `namespace/name` (it is created when first taken).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: Timings,
    ) -> Elector {
        let (tx, holder) = watch::channel(Holder::default());
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let lease = name.to_string();
        let watch_task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                        tx.send_replace(Holder::of(&l));
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        tx.send_replace(Holder::default());
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(lease = %lease, "lease watch: {e}"),
                }
            }
        });
        Elector {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timings,
            holder,
            watch_task,
            manager: tokio::sync::Mutex::new(None),
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The Lease's holder as it changes.
    pub fn holder(&self) -> watch::Receiver<Holder> {
        self.holder.clone()
    }

    async fn fresh_manager(
        &self,
    ) -> Result<Arc<LeaseManager>, kube_lease_manager::LeaseManagerError> {
        let secs = |d: Duration| d.as_secs().max(1);
        let duration = secs(self.timings.lease_duration);
        // The manager renews `grace` before expiry: every retry period.
        let grace = duration
            .saturating_sub(secs(self.timings.retry_period))
            .clamp(1, duration - 1);
        let params = LeaseParams::new(self.identity.clone(), duration, grace);
        let manager = LeaseManager::new(
            self.client.clone(),
            &self.name,
            &self.namespace,
            params,
            LeaseCreateMode::AutoCreate,
        )
        .await?;
        let manager = Arc::new(manager);
        *self.manager.lock().await = Some(manager.clone());
        Ok(manager)
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&self) {
        let mut holder = self.holder.clone();
        loop {
            let manager = match self.fresh_manager().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(lease = %self.name, "cannot use the leader election lease: {e}");
                    tokio::time::sleep(self.timings.retry_period).await;
                    continue;
                }
            };
            // A manager caches the lease until it expires; a release seen on the watch starts
            // over with a fresh one, so that a leader shutting down is replaced at once.
            let was_held = holder.borrow_and_update().current().is_some();
            let released = async {
                let mut held = was_held;
                loop {
                    if holder.changed().await.is_err() {
                        return std::future::pending::<()>().await;
                    }
                    let now_held = holder.borrow_and_update().current().is_some();
                    if held && !now_held {
                        return;
                    }
                    held = now_held;
                }
            };
            tokio::select! {
                won = manager.changed() => match won {
                    Ok(true) => {
                        tracing::info!(lease = %self.name, identity = %self.identity, "this replica is the leader");
                        return;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(lease = %self.name, "leader election: {e}");
                        tokio::time::sleep(self.timings.retry_period).await;
                    }
                },
                () = released => {
                    tracing::info!(lease = %self.name, "the lease was released; trying to take it");
                }
            }
        }
    }

    /// Keeps the Lease renewed while this replica leads; returns when it must stop all
    /// work: no renewal seen for the renew deadline, or the Lease held by another.
    pub async fn hold(&self) -> Lost {
        let manager = match self.manager.lock().await.clone() {
            Some(m) => m,
            None => return Lost::Released,
        };
        let renew = async {
            loop {
                match manager.changed().await {
                    Ok(true) => {}
                    Ok(false) => return Lost::Released,
                    Err(e) => {
                        tracing::warn!(lease = %self.name, "cannot renew the lease: {e}");
                        tokio::time::sleep(self.timings.retry_period.min(Duration::from_secs(1)))
                            .await;
                    }
                }
            }
        };
        tokio::select! {
            lost = renew => lost,
            lost = self.fence() => lost,
        }
    }

    /// Resolves when this leader's last renewal seen is older than the renew deadline, or
    /// another replica holds the Lease.
    async fn fence(&self) -> Lost {
        let mut holder = self.holder.clone();
        // Until a renewal is seen on the watch: the moment of taking the lease.
        let mut deadline = Instant::now() + self.timings.renew_deadline;
        loop {
            let seen = holder.borrow_and_update().clone();
            match seen.identity.as_deref() {
                Some(other) if other != self.identity => return Lost::TakenBy(other.to_string()),
                Some(_) => {
                    if let Some(renewed) = seen.renewed {
                        // The renewal time is this process's own clock.
                        let age = SystemTime::now()
                            .duration_since(renewed)
                            .unwrap_or_default();
                        let at = Instant::now() + self.timings.renew_deadline.saturating_sub(age);
                        deadline = deadline.max(at);
                    }
                }
                None => {}
            }
            tokio::select! {
                changed = holder.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(deadline.into()).await;
                        return Lost::NotRenewed(self.timings.renew_deadline);
                    }
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    return Lost::NotRenewed(self.timings.renew_deadline);
                }
            }
        }
    }

    /// Gives the Lease up, so that a standby takes over at once.
    pub async fn release(&self) {
        let manager = self.manager.lock().await.clone();
        if let Some(m) = manager {
            match tokio::time::timeout(Duration::from_secs(5), m.release()).await {
                Ok(Ok(())) => tracing::info!(lease = %self.name, "lease released"),
                Ok(Err(e)) => tracing::warn!(lease = %self.name, "cannot release the lease: {e}"),
                Err(_) => tracing::warn!(lease = %self.name, "releasing the lease timed out"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_must_nest() {
        let t = |d, r, p| Timings {
            lease_duration: Duration::from_secs(d),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
        };
        assert!(t(35, 30, 10).check().is_ok());
        assert!(t(4, 3, 1).check().is_ok());
        assert!(t(30, 30, 10).check().is_err());
        assert!(t(35, 10, 10).check().is_err());
    }

    #[test]
    fn an_expired_holder_is_no_holder() {
        let mut h = Holder {
            identity: Some("a".into()),
            renewed: Some(SystemTime::now()),
            duration: Some(Duration::from_secs(30)),
        };
        assert_eq!(h.current(), Some("a"));
        h.renewed = Some(SystemTime::now() - Duration::from_secs(31));
        assert_eq!(h.current(), None);
        h.identity = None;
        assert_eq!(h.current(), None);
    }
}
