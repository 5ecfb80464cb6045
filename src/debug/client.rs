//! The debug commands' client: one HTTP/1.1 request per connection over the unix socket
//! (or a TCP address), spoken by hyper.
//!
//! ```text
//!   get / post_form ──► UnixStream ─┐
//!   tcp             ──► TcpStream ──┴► exchange (hyper http1) ──► status, whole body
//! ```

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// How long a request may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(30);

/// GETs `path` (with its query) from the debug socket and returns the body. A missing
/// socket or a non-2xx answer is an error carrying the server's message.
pub async fn get(socket: &Path, path: &str) -> anyhow::Result<String> {
    let body = get_bytes(socket, path).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Like [`get`], for answers that are not text (the PNG of `/graph`).
pub async fn get_bytes(socket: &Path, path: &str) -> anyhow::Result<Vec<u8>> {
    send(socket, path, None).await
}

/// POSTs a form (`application/x-www-form-urlencoded` fields) to `path`.
pub async fn post_form(socket: &Path, path: &str, form: &[(&str, &str)]) -> anyhow::Result<String> {
    let body = form
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let answer = send(socket, path, Some(body)).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Percent-encodes a query value or a form field: everything but ASCII letters, digits and
/// `-._~`.
pub fn encode(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

async fn send(socket: &Path, path: &str, form: Option<String>) -> anyhow::Result<Vec<u8>> {
    tokio::time::timeout(TIMEOUT, request(socket, path, form))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the debug socket {} did not answer {path} within {}s",
                socket.display(),
                TIMEOUT.as_secs()
            )
        })?
}

async fn request(socket: &Path, path: &str, form: Option<String>) -> anyhow::Result<Vec<u8>> {
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot connect to the debug socket {}: {e} (is bosun running? set --debug-unix-socket)",
            socket.display()
        )
    })?;
    let mut headers = vec![("Host", "unix"), ("Accept", "*/*"), ("Connection", "close")];
    let length;
    let (method, body) = match form {
        None => ("GET", Vec::new()),
        Some(body) => {
            length = body.len().to_string();
            headers.push(("Content-Type", "application/x-www-form-urlencoded"));
            // Marks bosun's own client: a web page cannot send this header cross-origin.
            headers.push(("X-Bosun-Client", "cli"));
            headers.push(("Content-Length", &length));
            ("POST", body.into_bytes())
        }
    };
    let (status, body) = exchange(stream, method, path, &headers, body)
        .await
        .map_err(|e| match e {
            ExchangeError::Request(e) => anyhow::anyhow!("cannot request {path}: {e}"),
            ExchangeError::Send(e) => {
                anyhow::anyhow!("cannot send {path} to the debug socket: {e}")
            }
            ExchangeError::Read(e) => anyhow::anyhow!("cannot read the answer to {path}: {e}"),
        })?;
    if !(200..300).contains(&status) {
        let body = String::from_utf8_lossy(&body);
        let message = body.trim();
        let message = message.strip_prefix("Error: ").unwrap_or(message);
        anyhow::bail!("{path}: {message} (HTTP {status})");
    }
    Ok(body)
}

/// Why an [`exchange`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The method, path or a header is not valid HTTP.
    #[error("not a valid request: {0}")]
    Request(#[from] hyper::http::Error),
    /// The request could not be written, or no answer came back.
    #[error("{0}")]
    Send(hyper::Error),
    /// The answer's body could not be read.
    #[error("{0}")]
    Read(hyper::Error),
}

/// One HTTP/1.1 request on a fresh connection `io` (send `Connection: close`: it is not
/// reused): `method path` with exactly `headers` (`Host` included; names written in
/// Title-Case) and `body`. Answers the status and the whole body, whatever the status.
pub async fn exchange<T>(
    io: T,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ExchangeError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut request = hyper::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body)))?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(ExchangeError::Send)?;
    // The connection is driven beside the request; it ends when the answer has been read.
    let driver = tokio::spawn(connection);
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(ExchangeError::Send)?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(ExchangeError::Read)?
            .to_bytes();
        Ok((status, body.to_vec()))
    }
    .await;
    driver.abort();
    answer
}

/// [`exchange`] on a new connection to a TCP address (`host:port`).
pub async fn tcp(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {addr}: {e}"))?;
    exchange(stream, method, path, headers, body)
        .await
        .map_err(|e| anyhow::anyhow!("{method} {path} on {addr}: {e}"))
}

/// Splits a raw HTTP/1.1 response into its status and body (de-chunked when chunked).
pub fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    parse_response_bytes(raw)
        .map(|(status, body)| (status, String::from_utf8_lossy(&body).into_owned()))
}

/// [`parse_response`] with the body as bytes.
pub fn parse_response_bytes(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        } else if name == "content-length" {
            length = value.parse().ok();
        }
    }
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    } else if let Some(n) = length {
        body.truncate(n);
    }
    Ok((status, body))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let pos = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk")?;
        let size_text = String::from_utf8_lossy(&data[..pos]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let start = pos + 2;
        let end = start + size;
        if end > data.len() {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(plain), Ok((200, "hello".to_string())));
        let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Ok((404, "abcde".to_string())));
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn encoding_keeps_only_unreserved_characters() {
        assert_eq!(encode("a-Z_0.9~"), "a-Z_0.9~");
        assert_eq!(encode("a b/ü&="), "a%20b%2F%C3%BC%26%3D");
    }

    #[tokio::test]
    async fn requests_go_through_the_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("debug.socket");
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let app = axum::Router::new()
            .route(
                "/echo",
                axum::routing::post(|body: String| async move { body }),
            )
            .route(
                "/fail",
                axum::routing::get(|| async {
                    (axum::http::StatusCode::NOT_FOUND, "Error: no such thing\n")
                }),
            )
            .route(
                "/chunked",
                axum::routing::get(|| async {
                    let parts = [Ok::<_, std::io::Error>("ab"), Ok("cd")];
                    axum::body::Body::from_stream(futures::stream::iter(parts))
                }),
            );
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let echoed = post_form(&path, "/echo", &[("name", "a b"), ("value", "x&y")]).await;
        assert_eq!(echoed.ok().as_deref(), Some("name=a%20b&value=x%26y"));
        let err = get(&path, "/fail").await.err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("/fail: no such thing (HTTP 404)"));
        assert_eq!(get(&path, "/chunked").await.ok().as_deref(), Some("abcd"));
        server.abort();
    }

    #[tokio::test]
    async fn a_missing_socket_says_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = get(&dir.path().join("nope.socket"), "/queue/list.text")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("cannot connect to the debug socket "),
            "{err}"
        );
        assert!(
            err.ends_with("(is bosun running? set --debug-unix-socket)"),
            "{err}"
        );
    }
}
