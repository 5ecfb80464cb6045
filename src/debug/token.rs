//! The debug TCP listener's token. Any local user can connect to a loopback port, and the
//! endpoints show values, config values and the journal (secrets included) and change the
//! runtime configuration; so on TCP every route but the page `/ui` itself asks for a token,
//! as notebook servers do:
//!
//! ```text
//!   start ──► 32 random bytes (hex) ──► <socket folder>/debug.token (0600, bosun's user)
//!                                  └──► printed: http://127.0.0.1:9652/ui?token=…
//!   request ──► Authorization: Bearer <token>  or  ?token=<token> ──► served
//!           └─► neither, or another token ──► 401
//! ```
//!
//! The page `/ui` holds no data: it takes the token from its address and sends it in the
//! `Authorization` header of its own requests. The unix socket (`0600`) needs no token.

use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};

/// A token's length in bytes (hex in the file and the address).
const TOKEN_BYTES: usize = 32;

/// The debug TCP listener's token.
#[derive(Clone)]
pub struct DebugToken(String);

impl std::fmt::Debug for DebugToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DebugToken(..)")
    }
}

impl DebugToken {
    /// A fresh random token.
    pub fn generate() -> Result<DebugToken, ring::error::Unspecified> {
        let mut bytes = [0u8; TOKEN_BYTES];
        SystemRandom::new().fill(&mut bytes)?;
        Ok(DebugToken(
            bytes.iter().map(|b| format!("{b:02x}")).collect(),
        ))
    }

    /// The token as text (hex).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this token (compared in constant time).
    pub fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// The token a request carries: `Authorization: Bearer <token>`, else the `token`
    /// query parameter.
    pub fn of_request<'a>(
        authorization: Option<&'a str>,
        query: Option<&'a str>,
    ) -> Option<std::borrow::Cow<'a, str>> {
        if let Some(t) = authorization.and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        }) {
            return Some(t.trim().into());
        }
        query?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == "token").then(|| percent_decode(v))
        })
    }
}

/// `%XX` and `+` in a query value, decoded (a token is hex, so this is only for odd clients).
fn percent_decode(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['%', '+']) {
        return v.into();
    }
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned().into()
}

/// Where the token of the listener beside `socket` is kept: `debug.token` next to
/// `debug.socket` (the socket's name with the extension `token`).
pub fn token_file(socket: &Path) -> PathBuf {
    socket.with_extension("token")
}

/// Writes `token` to `path`, readable by bosun's user only (`0600`): a new file with a
/// random name (never a link planted there), renamed over the old one.
pub fn write_token_file(path: &Path, token: &DebugToken) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    bosun_platform::create_private_dir(dir)?;
    // tempfile creates it 0600 with O_EXCL.
    let mut file = tempfile::Builder::new()
        .prefix(".debug-token-")
        .tempfile_in(dir)?;
    file.write_all(token.as_str().as_bytes())?;
    file.write_all(b"\n")?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tokens_are_random_hex_and_compared_whole() {
        let a = DebugToken::generate().expect("token");
        let b = DebugToken::generate().expect("token");
        assert_eq!(a.as_str().len(), 64);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.as_str(), b.as_str());
        assert!(a.matches(a.as_str()));
        assert!(!a.matches(b.as_str()));
        assert!(!a.matches(&a.as_str()[..63]));
        assert!(!a.matches(""));
    }

    #[test]
    fn a_request_carries_it_in_the_header_or_the_query() {
        let of =
            |h: Option<&str>, q: Option<&str>| DebugToken::of_request(h, q).map(|t| t.into_owned());
        assert_eq!(of(Some("Bearer abc"), None).as_deref(), Some("abc"));
        assert_eq!(of(None, Some("x=1&token=abc")).as_deref(), Some("abc"));
        assert_eq!(of(None, Some("token=a%62c")).as_deref(), Some("abc"));
        assert_eq!(of(Some("Basic abc"), Some("tokenx=abc")), None);
        assert_eq!(of(None, None), None);
    }

    #[test]
    fn the_file_is_private_and_replaced_at_each_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("run/debug.socket");
        let path = token_file(&socket);
        assert_eq!(path, dir.path().join("run/debug.token"));
        let first = DebugToken::generate().expect("token");
        write_token_file(&path, &first).expect("write");
        let second = DebugToken::generate().expect("token");
        write_token_file(&path, &second).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.trim(), second.as_str());
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0)
        };
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("run")), 0o700);
    }
}
