//! The debug commands' client: one HTTP/1.1 request per connection over the unix socket.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    let mut stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot connect to the debug socket {}: {e} (is bosun running? set --debug-unix-socket)",
            socket.display()
        )
    })?;
    let head = match &form {
        None => {
            format!("GET {path} HTTP/1.1\r\nHost: unix\r\nAccept: */*\r\nConnection: close\r\n\r\n")
        }
        Some(body) => format!(
            "POST {path} HTTP/1.1\r\nHost: unix\r\nAccept: */*\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    };
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| anyhow::anyhow!("cannot send {path} to the debug socket: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the answer to {path}: {e}"))?;
    let (status, body) = parse_response_bytes(&raw)
        .map_err(|e| anyhow::anyhow!("invalid answer to {path} from the debug socket: {e}"))?;
    if !(200..300).contains(&status) {
        let body = String::from_utf8_lossy(&body);
        let message = body.trim();
        let message = message.strip_prefix("Error: ").unwrap_or(message);
        anyhow::bail!("{path}: {message} (HTTP {status})");
    }
    Ok(body)
}

/// Splits an HTTP/1.1 response into its status and body (de-chunked when chunked).
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
