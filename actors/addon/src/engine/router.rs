//! The queues' router: one queue actor per named queue, spawned on first use; tasks a
//! handler returns for another queue are sent there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ractor::Actor;

use bosun_runtime::Queues;
use bosun_runtime::mailbox::{Mailboxes, Tracked};
use bosun_runtime::queue_actor::{self, QueueActor, QueueArgs, QueueMsg};

use super::error::EngineError;
use crate::events::{Event, Position, TaskSpec};
use crate::ports::Journal;
use crate::queue::AddonQueueRules;
use crate::task::AddonTask;

/// A queue as the queue actors route to it.
pub(super) type Router = dyn queue_actor::Router<AddonTask>;
/// What runs the tasks of every queue.
pub(super) type TaskHandler = dyn queue_actor::TaskHandler<AddonTask>;

pub(super) struct QueueRouter {
    pub(super) queues: Mutex<HashMap<String, Tracked<QueueMsg<AddonTask>>>>,
    pub(super) handler: Arc<TaskHandler>,
    pub(super) sink: Journal,
    pub(super) mailboxes: Mailboxes,
    pub(super) max_attempts: Option<u32>,
    pub(super) action_metrics: bool,
    pub(super) gate: bosun_runtime::lifecycle::WorkGate,
    pub(super) this: Mutex<Option<std::sync::Weak<QueueRouter>>>,
}

impl QueueRouter {
    pub(super) fn get(&self, name: &str) -> Option<Tracked<QueueMsg<AddonTask>>> {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(super) async fn spawn(
        self: &Arc<Self>,
        name: &str,
        restored: Queues<AddonTask>,
    ) -> Result<Tracked<QueueMsg<AddonTask>>, EngineError> {
        let mailbox = self.mailboxes.handle(&format!("queue/{name}"));
        let router: Arc<Router> = self.clone();
        let args = QueueArgs {
            name: name.to_string(),
            sink: self.sink.clone(),
            handler: self.handler.clone(),
            router,
            rules: Arc::new(AddonQueueRules),
            mailbox: mailbox.clone(),
            restored,
            max_attempts: self.max_attempts,
            action_metrics: self.action_metrics,
            gate: self.gate.clone(),
        };
        let (actor, _) = Actor::spawn(None, QueueActor::<AddonTask, Event>::default(), args)
            .await
            .map_err(|e| EngineError::Spawn {
                name: format!("queue/{name}"),
                message: e.to_string(),
            })?;
        let tracked = Tracked::new(actor, mailbox);
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), tracked.clone());
        Ok(tracked)
    }
}

impl queue_actor::Router<AddonTask> for QueueRouter {
    fn enqueue(&self, queue: &str, tasks: Vec<TaskSpec>) {
        let batch: Vec<(TaskSpec, Position)> =
            tasks.into_iter().map(|t| (t, Position::Tail)).collect();
        if let Some(q) = self.get(queue) {
            let _ = q.cast(QueueMsg::Enqueue(batch));
            return;
        }
        let Some(this) = self
            .this
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(std::sync::Weak::upgrade)
        else {
            return;
        };
        let queue = queue.to_string();
        tokio::spawn(async move {
            let q = match this.get(&queue) {
                Some(q) => q,
                None => match this.spawn(&queue, Queues::default()).await {
                    Ok(q) => q,
                    Err(e) => {
                        tracing::error!("{e}");
                        return;
                    }
                },
            };
            let _ = q.cast(QueueMsg::Enqueue(batch));
        });
    }
}
