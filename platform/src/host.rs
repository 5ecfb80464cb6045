//! The `Host` header of a request on a loopback listener: a web page whose own name was
//! made to resolve to 127.0.0.1 (DNS rebinding) sends its own name, which is no loopback
//! name, so the sandbox and the debug listener answer only loopback names.

/// Whether a `Host` header names this machine's loopback: `localhost`, `127.x.x.x` or
/// `[::1]`, with or without a port. Parsed strictly: the port is digits alone, so
/// `127.0.0.1:6445@evil.com` and `[::1]x` are not loopback names.
pub fn loopback_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, "")) => (name, None),
            Some((name, after)) => match after.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok
        && (name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()))
}

/// The one `Host` of a request: `None` when it has several (a request that names two
/// hosts is not one a browser sends; answering it could pick the wrong one).
pub fn single_host(headers: &axum::http::HeaderMap) -> Option<&str> {
    let mut all = headers.get_all("host").iter();
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for ok in [
            "127.0.0.1:6445",
            "127.0.0.1",
            "localhost:6445",
            "LOCALHOST",
            "[::1]:6445",
            "[::1]",
        ] {
            assert!(loopback_host(ok), "{ok}");
        }
        for refused in [
            "rebound.example:6445",
            "evil.example",
            "localhost.example.com",
            "10.0.0.1:6445",
            "",
            "[::2]:6445",
            // A userinfo-like or a trailing part after the port is not a port.
            "127.0.0.1:6445@evil.com",
            "localhost:@evil.com",
            "[::1]evil",
            "[::1]:6445@evil.com",
            "127.0.0.1:",
        ] {
            assert!(!loopback_host(refused), "{refused}");
        }
    }

    #[test]
    fn two_hosts_are_no_host() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(single_host(&headers), None);
        headers.append("host", axum::http::HeaderValue::from_static("127.0.0.1"));
        assert_eq!(single_host(&headers), Some("127.0.0.1"));
        headers.append("host", axum::http::HeaderValue::from_static("evil.example"));
        assert_eq!(single_host(&headers), None);
    }
}
