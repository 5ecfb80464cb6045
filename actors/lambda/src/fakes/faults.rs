//! The API server's refusals [`MemoryCluster`](super::MemoryCluster) can be told to
//! answer: the next calls of one verb on one resource fail with a [`Fault`], as the
//! binary's client reports them (`bosun_kube::cluster_error`).

use std::collections::VecDeque;

use crate::ports::{ClusterError, Resource};

/// A call of the cluster port that a fault can refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// An uncached GET.
    Get,
    /// A read of the informer cache's list or owner index (the informer failing to list).
    List,
    /// Subscribing to a watch.
    Watch,
    Create,
    /// PUT of the whole object.
    Replace,
    /// PUT of `/status`.
    ReplaceStatus,
    /// Server-side apply.
    Apply,
    Delete,
}

/// How the API server refuses a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 409: the object changed since it was read.
    Conflict,
    /// 409 `AlreadyExists` on a create.
    AlreadyExists,
    /// 404.
    NotFound,
    /// 500 with the server's message.
    ServerError,
    /// 503, or no answer at all.
    Unavailable,
    /// 403: RBAC refuses the verb on the resource.
    Forbidden,
    /// 413: the object is larger than the server stores.
    TooLarge,
}

impl Fault {
    /// The port's error for `verb` on `resource` about `what`, as the binary maps it.
    pub fn error(&self, verb: Verb, resource: &Resource, what: &str) -> ClusterError {
        let what = what.to_string();
        let other = |message: String| ClusterError::Other {
            what: what.clone(),
            message,
        };
        match self {
            Fault::Conflict => ClusterError::Conflict(what),
            Fault::AlreadyExists => ClusterError::AlreadyExists(what),
            Fault::NotFound => ClusterError::NotFound(what),
            Fault::TooLarge => ClusterError::TooLarge {
                what,
                message: "Request entity too large: limit is 3145728".into(),
            },
            Fault::ServerError => {
                other("ApiError: Internal error occurred: etcdserver: leader changed (500)".into())
            }
            Fault::Unavailable => {
                other("ApiError: the server is currently unable to handle the request (503)".into())
            }
            Fault::Forbidden => other(format!(
                "ApiError: {plural}.{group} is forbidden: User \"system:serviceaccount:metacontroller:metacontroller\" cannot {verb} resource \"{plural}\" in API group \"{group}\": Forbidden (403)",
                plural = resource.plural,
                group = resource.group,
                verb = match verb {
                    Verb::Get => "get",
                    Verb::List => "list",
                    Verb::Watch => "watch",
                    Verb::Create => "create",
                    Verb::Replace | Verb::ReplaceStatus => "update",
                    Verb::Apply => "patch",
                    Verb::Delete => "delete",
                }
            )),
        }
    }
}

/// A fault armed for the next calls of a verb on a resource (any resource: `None`).
struct Armed {
    verb: Verb,
    group: Option<String>,
    times: usize,
    fault: Fault,
}

/// The faults armed on a cluster, met in the order they were armed.
#[derive(Default)]
pub(super) struct Faults {
    armed: VecDeque<Armed>,
    met: usize,
}

impl Faults {
    pub(super) fn arm(&mut self, verb: Verb, group: Option<String>, times: usize, fault: Fault) {
        self.armed.push_back(Armed {
            verb,
            group,
            times,
            fault,
        });
    }

    /// The fault a call of `verb` on `group` meets now, if any (counted as met).
    pub(super) fn meet(&mut self, verb: Verb, group: &str) -> Option<Fault> {
        let at = self.armed.iter().position(|a| {
            a.verb == verb && a.times > 0 && a.group.as_deref().is_none_or(|g| g == group)
        })?;
        let armed = &mut self.armed[at];
        armed.times -= 1;
        let fault = armed.fault.clone();
        if armed.times == 0 {
            self.armed.remove(at);
        }
        self.met += 1;
        Some(fault)
    }

    pub(super) fn met(&self) -> usize {
        self.met
    }

    pub(super) fn left(&self) -> usize {
        self.armed.iter().map(|a| a.times).sum()
    }
}
