//! Faults the fakes can be told to answer with, worded as the real ports word them, so
//! that a test sees what a user of the real deployer sees when the API server, a target
//! cluster or a registry misbehaves.

use std::collections::BTreeMap;

use crate::item::ErrorCode;
use crate::ports::ClusterError;

/// How a call is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 409: the object changed since it was read.
    Conflict,
    /// 500: the API server failed.
    ServerError,
    /// 403: the deployer's identity may not do it.
    Forbidden,
    /// No answer at all: the connection was refused.
    Unreachable,
    /// 413: larger than the API server stores.
    TooLarge,
}

impl Fault {
    /// The message an API server (or the client, for a connection) gives.
    pub fn message(&self, verb: &str, what: &str) -> String {
        match self {
            Fault::Conflict => "the object has been modified; please apply your changes to the latest version and try again".into(),
            Fault::ServerError => "Internal error occurred: etcdserver: request timed out".into(),
            Fault::Forbidden => format!(
                "{what} is forbidden: User \"system:serviceaccount:ls-system:bosun\" cannot {verb} it"
            ),
            Fault::Unreachable => {
                "error trying to connect: tcp connect error: Connection refused (os error 111)"
                    .into()
            }
            Fault::TooLarge => "etcdserver: request is too large".into(),
        }
    }

    /// The error of the items' cluster port for this fault on `verb` of `what`.
    pub fn cluster_error(&self, verb: &str, what: &str) -> ClusterError {
        match self {
            Fault::Conflict => ClusterError::Conflict(what.to_string()),
            Fault::TooLarge => ClusterError::TooLarge {
                what: what.to_string(),
                message: self.message(verb, what),
            },
            other => ClusterError::Other {
                what: what.to_string(),
                message: other.message(verb, what),
            },
        }
    }

    /// The codes the real target port gives it (403 is `ERR_UNAUTHORIZED`, the rest is
    /// retried).
    pub fn target_codes(&self) -> &'static [ErrorCode] {
        match self {
            Fault::Forbidden => &[ErrorCode::Unauthorized],
            _ => &[],
        }
    }
}

/// Faults armed per call: each answers a number of calls (or every call until healed).
#[derive(Debug)]
pub(super) struct Armed<K> {
    faults: BTreeMap<K, (Fault, Option<usize>)>,
}

impl<K> Default for Armed<K> {
    fn default() -> Self {
        Armed {
            faults: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Copy> Armed<K> {
    /// `call` fails with `fault` `times` times (`None`: until [`Armed::heal`]).
    pub(super) fn arm(&mut self, call: K, fault: Fault, times: Option<usize>) {
        if times == Some(0) {
            self.faults.remove(&call);
        } else {
            self.faults.insert(call, (fault, times));
        }
    }

    /// `call` answers again.
    pub(super) fn heal(&mut self, call: K) {
        self.faults.remove(&call);
    }

    /// The fault this call of `call` meets, counted.
    pub(super) fn take(&mut self, call: K) -> Option<Fault> {
        let (fault, left) = self.faults.get_mut(&call)?;
        let fault = fault.clone();
        if let Some(n) = left {
            *n -= 1;
            if *n == 0 {
                self.faults.remove(&call);
            }
        }
        Some(fault)
    }
}
