//! Tasks as every subsystem queues them: an id, a queue, a description and a
//! subsystem-defined kind `K` (what to do, with its typed parameters), and the
//! transitions a task goes through, which are journaled before they take effect.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Identifier of a task, unique within a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(pub u64);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A task id that does not parse (`t<number>` expected).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid task id {0:?}: expected t<number>, e.g. t42")]
pub struct InvalidTaskId(pub String);

impl std::str::FromStr for TaskId {
    type Err = InvalidTaskId;

    fn from_str(s: &str) -> Result<TaskId, InvalidTaskId> {
        s.trim_start_matches('t')
            .parse()
            .map(TaskId)
            .map_err(|_| InvalidTaskId(s.to_string()))
    }
}

/// Allocates task ids, above every id in the journal.
#[derive(Clone, Debug)]
pub struct TaskIds(Arc<AtomicU64>);

impl TaskIds {
    /// Starts after `last`.
    pub fn after(last: u64) -> TaskIds {
        TaskIds(Arc::new(AtomicU64::new(last + 1)))
    }

    /// A fresh id.
    pub fn next(&self) -> TaskId {
        TaskId(self.0.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a subsystem's task kind must offer the queue fold.
pub trait TaskKind:
    Clone
    + std::fmt::Debug
    + PartialEq
    + Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The task's type as queue dumps show it (`ModuleRun`, `GlobalHookRun`, …).
    fn type_name(&self) -> &'static str;
    /// Takes over what a task merged into this one carried (its binding contexts), so a
    /// restart between the merge and the run loses none of it.
    fn absorb(&mut self, merged: &Self);
}

/// What a task is: enough to rebuild and show it. Read by `SpecVisitor`, which hands
/// `kind` its fields as they come instead of buffering them as `flatten` does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec<K> {
    /// Its identity.
    pub id: TaskId,
    /// The named queue it runs in (`main`, …).
    pub queue: String,
    /// The queue-dump description after `<Type>:<queue>:`, e.g. `onStartup:hook.sh`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// What it does, with its parameters (the subsystem's own type).
    #[serde(flatten)]
    pub kind: K,
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for TaskSpec<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SpecVisitor(std::marker::PhantomData))
    }
}

/// Reads a [`TaskSpec`]: the object goes to `K` as a map whose `id`, `queue` and
/// `description` entries are taken out on the way ([`SpecFields`]).
struct SpecVisitor<K>(std::marker::PhantomData<K>);

impl<'de, K: Deserialize<'de>> serde::de::Visitor<'de> for SpecVisitor<K> {
    type Value = TaskSpec<K>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a task")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TaskSpec<K>, A::Error> {
        use serde::de::Error as _;
        let mut fields = SpecFields {
            map: &mut map,
            done: false,
            id: None,
            queue: None,
            description: None,
        };
        let kind = K::deserialize(serde::de::value::MapAccessDeserializer::new(&mut fields))?;
        // Whatever the kind did not read (it stopped early) may still hold the task's own.
        while !fields.done {
            use serde::de::MapAccess as _;
            if fields.next_key::<serde::de::IgnoredAny>()?.is_some() {
                fields.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(TaskSpec {
            id: fields.id.ok_or_else(|| A::Error::missing_field("id"))?,
            queue: fields
                .queue
                .ok_or_else(|| A::Error::missing_field("queue"))?,
            description: fields.description.unwrap_or_default(),
            kind,
        })
    }
}

/// A task's object as its kind sees it: its own entries are read into these fields and
/// skipped.
struct SpecFields<'a, A> {
    map: &'a mut A,
    /// The object has no more entries.
    done: bool,
    id: Option<TaskId>,
    queue: Option<String>,
    description: Option<String>,
}

impl<'de, A: serde::de::MapAccess<'de>> serde::de::MapAccess<'de> for SpecFields<'_, A> {
    type Error = A::Error;

    fn next_key_seed<S: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        use serde::de::IntoDeserializer as _;
        while !self.done {
            let Some(key) = self.map.next_key::<String>()? else {
                self.done = true;
                break;
            };
            match key.as_str() {
                "id" => self.id = Some(self.map.next_value()?),
                "queue" => self.queue = Some(self.map.next_value()?),
                "description" => self.description = Some(self.map.next_value()?),
                _ => return seed.deserialize(key.into_deserializer()).map(Some),
            }
        }
        Ok(None)
    }

    fn next_value_seed<S: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// Where an enqueued task goes in its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "at", content = "task")]
pub enum Position {
    /// At the head (runs next).
    Head,
    /// At the tail.
    Tail,
    /// Right after this task (or at the tail if it is gone).
    After(TaskId),
    /// Right before this task (or at the head if it is gone).
    Before(TaskId),
}

crate::tagged_enum! {
    /// A task transition: the part of the journal every subsystem's queues share. Read through
    /// `TaskEventDe`, its mirror ([`crate::tagged`]).
    #[derive(Clone, Debug, PartialEq, Serialize)]
    #[serde(tag = "type", rename_all = "camelCase")]
    pub enum TaskEvent<K> as TaskEventDe {
        /// A task was put in a queue.
        TaskEnqueued {
            /// The task.
            task: TaskSpec<K>,
            /// Where.
            position: Position,
        },
        /// A task started an attempt.
        TaskStarted {
            /// Which task.
            id: TaskId,
            /// 1 for the first attempt.
            attempt: u32,
        },
        /// A task finished successfully and left its queue.
        TaskSucceeded {
            /// Which task.
            id: TaskId,
        },
        /// A task attempt failed; the task stays at the head of its queue.
        TaskFailed {
            /// Which task.
            id: TaskId,
            /// The error, as shown in `queue list`.
            error: String,
            /// Failures so far, this one included.
            failures: u32,
            /// When the next attempt is due (unix milliseconds).
            next_retry_at_ms: u64,
        },
        /// A task was merged into another (compaction) and left its queue.
        TaskMerged {
            /// The merged task.
            id: TaskId,
            /// The task that absorbed it.
            into: TaskId,
        },
        /// A task was removed without running (deduplicated, module disabled, queue drained).
        TaskDropped {
            /// Which task.
            id: TaskId,
            /// Why.
            reason: String,
        },
        /// A task reached the maximum number of attempts and was set aside so its queue can
        /// go on; it stays visible until an operator retries or drops it.
        TaskParked {
            /// Which task.
            id: TaskId,
            /// Why (the last error).
            reason: String,
        },
    }
}

impl<K: serde::de::DeserializeOwned> crate::tagged::Tagged for TaskEvent<K> {
    const TAG: &'static str = "type";
    const EXPECTING: &'static str = "a task event";

    fn from_tag<'de, A: serde::de::MapAccess<'de>>(tag: String, rest: A) -> Result<Self, A::Error> {
        crate::tagged::read_variant::<TaskEventDe<K>, A>(tag, rest).map(TaskEvent::from)
    }
}

impl<'de, K: serde::de::DeserializeOwned> Deserialize<'de> for TaskEvent<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::tagged::deserialize_tagged(d)
    }
}

impl<K> TaskEvent<K> {
    /// The `type` names of task events, as written in the journal.
    pub const TYPE_NAMES: [&'static str; 7] = [
        "taskEnqueued",
        "taskStarted",
        "taskSucceeded",
        "taskFailed",
        "taskMerged",
        "taskDropped",
        "taskParked",
    ];

    /// The event's type name, as written in the journal.
    pub fn type_name(&self) -> &'static str {
        match self {
            TaskEvent::TaskEnqueued { .. } => "taskEnqueued",
            TaskEvent::TaskStarted { .. } => "taskStarted",
            TaskEvent::TaskSucceeded { .. } => "taskSucceeded",
            TaskEvent::TaskFailed { .. } => "taskFailed",
            TaskEvent::TaskMerged { .. } => "taskMerged",
            TaskEvent::TaskDropped { .. } => "taskDropped",
            TaskEvent::TaskParked { .. } => "taskParked",
        }
    }

    /// The task the event concerns.
    pub fn task(&self) -> TaskId {
        match self {
            TaskEvent::TaskEnqueued { task, .. } => task.id,
            TaskEvent::TaskStarted { id, .. }
            | TaskEvent::TaskSucceeded { id }
            | TaskEvent::TaskFailed { id, .. }
            | TaskEvent::TaskMerged { id, .. }
            | TaskEvent::TaskDropped { id, .. }
            | TaskEvent::TaskParked { id, .. } => *id,
        }
    }
}

/// A task waiting or running in a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedTask<K> {
    /// What it is.
    pub spec: TaskSpec<K>,
    /// Attempts started.
    pub attempts: u32,
    /// Failures so far.
    pub failures: u32,
    /// The last error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// When the next attempt is due (unix ms), after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_parse_as_printed() {
        assert_eq!("t42".parse::<TaskId>(), Ok(TaskId(42)));
        assert_eq!(TaskId(42).to_string(), "t42");
        let err = "x".parse::<TaskId>().unwrap_err();
        assert!(err.to_string().contains("expected t<number>"), "{err}");
    }

    #[test]
    fn ids_are_allocated_above_the_journal() {
        let ids = TaskIds::after(41);
        assert_eq!([ids.next(), ids.next()], [TaskId(42), TaskId(43)]);
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Kind {
        hook: String,
    }

    fn every_task_event() -> Vec<TaskEvent<Kind>> {
        let id = TaskId(7);
        vec![
            TaskEvent::TaskEnqueued {
                task: TaskSpec {
                    id,
                    queue: "main".into(),
                    description: "d".into(),
                    kind: Kind { hook: "h".into() },
                },
                position: Position::After(TaskId(3)),
            },
            TaskEvent::TaskStarted { id, attempt: 2 },
            TaskEvent::TaskSucceeded { id },
            TaskEvent::TaskFailed {
                id,
                error: "e".into(),
                failures: 1,
                next_retry_at_ms: 5,
            },
            TaskEvent::TaskMerged {
                id,
                into: TaskId(8),
            },
            TaskEvent::TaskDropped {
                id,
                reason: "r".into(),
            },
            TaskEvent::TaskParked {
                id,
                reason: "p".into(),
            },
        ]
    }

    #[test]
    fn every_task_event_reads_back_as_written_wherever_its_tag_is() {
        let all = every_task_event();
        assert_eq!(all.len(), TaskEvent::<Kind>::TYPE_NAMES.len());
        for e in all {
            // As written (the tag first), and with the tag last (keys sorted: the fallback).
            let text = serde_json::to_string(&e).unwrap_or_default();
            assert!(text.starts_with(r#"{"type":"#), "{text}");
            let back: TaskEvent<Kind> = serde_json::from_str(&text).expect(&text);
            assert_eq!(back, e);
            let value = serde_json::to_value(&e).unwrap_or_default();
            let sorted = value.to_string();
            let back: TaskEvent<Kind> = serde_json::from_str(&sorted).expect(&sorted);
            assert_eq!(back, e, "{sorted}");
            let back: TaskEvent<Kind> = serde_json::from_value(value).expect("from a value");
            assert_eq!(back, e);
        }
        for (bad, want) in [
            (
                r#"{"type":"taskExploded","id":1}"#,
                "unknown variant `taskExploded`",
            ),
            (
                r#"{"id":1,"type":"taskExploded"}"#,
                "unknown variant `taskExploded`",
            ),
            (
                r#"{"type":"taskStarted","id":1}"#,
                "missing field `attempt`",
            ),
            (r#"{"id":1,"attempt":1}"#, "missing field `type`"),
            (r#"{"id":1,"type":3}"#, "a string tag"),
            (r#"[1]"#, "a task event"),
        ] {
            let e = serde_json::from_str::<TaskEvent<Kind>>(bad).expect_err(bad);
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
        // A task's own fields may come anywhere among its kind's; a description may be left out.
        let spec: TaskSpec<Kind> =
            serde_json::from_str(r#"{"hook":"h","extra":1,"queue":"q","id":3}"#).expect("spec");
        assert_eq!(
            spec,
            TaskSpec {
                id: TaskId(3),
                queue: "q".into(),
                description: String::new(),
                kind: Kind { hook: "h".into() }
            }
        );
        for (bad, want) in [
            (r#"{"id":3,"hook":"h"}"#, "missing field `queue`"),
            (r#"{"id":3,"queue":"q"}"#, "missing field `hook`"),
            (r#"{"id":"x","queue":"q","hook":"h"}"#, "invalid type"),
        ] {
            let e = serde_json::from_str::<TaskSpec<Kind>>(bad).expect_err(bad);
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
        // Fields a variant does not have are skipped, as before.
        let e: TaskEvent<Kind> =
            serde_json::from_str(r#"{"type":"taskSucceeded","id":1,"extra":[1,{"a":2}]}"#)
                .expect("extra field");
        assert_eq!(e, TaskEvent::TaskSucceeded { id: TaskId(1) });
    }
}
