//! The one mapping of the Kubernetes client's errors to the cluster ports' error
//! ([`ClusterError`], shared by every subsystem).

use bosun_runtime::{ClusterError, PortError};

/// `e`, from a request about `what` (`"Pod ns/name"`), as a [`ClusterError`].
pub fn cluster_error(what: String, e: kube::Error) -> ClusterError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => ClusterError::NotFound(what),
        kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists" => {
            ClusterError::AlreadyExists(what)
        }
        kube::Error::Api(s) if s.code == 409 => ClusterError::Conflict(what),
        // kube-apiserver's request limit, or etcd's (a 500 naming it).
        kube::Error::Api(s)
            if s.code == 413 || s.message.contains("etcdserver: request is too large") =>
        {
            ClusterError::TooLarge {
                what,
                message: s.message.clone(),
            }
        }
        _ => ClusterError::Other {
            what,
            message: e.to_string(),
        },
    }
}

/// `e` as a port failure with `message` as its text, classed as [`cluster_error`] classes it.
pub fn port_error(message: String, e: kube::Error) -> PortError {
    PortError::new(cluster_error(String::new(), e).class(), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn codes_and_reasons_sort_the_error() {
        let e = |code, reason| cluster_error("Pod ns/p".into(), api(code, reason));
        assert_eq!(
            e(404, "NotFound"),
            ClusterError::NotFound("Pod ns/p".into())
        );
        assert_eq!(
            e(409, "AlreadyExists"),
            ClusterError::AlreadyExists("Pod ns/p".into())
        );
        assert_eq!(
            e(409, "Conflict"),
            ClusterError::Conflict("Pod ns/p".into())
        );
        assert!(matches!(
            e(413, "RequestEntityTooLarge"),
            ClusterError::TooLarge { .. }
        ));
        assert!(
            matches!(e(500, "InternalError"), ClusterError::Other { what, message }
            if what == "Pod ns/p" && message.contains("refused"))
        );
    }
}
