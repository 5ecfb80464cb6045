#![allow(dead_code)] // shared by several benches, each using a part
//! A GET on bosun's loopback HTTP address, and finding that address in its log: what the
//! benches that run `bosun run` in its own process need of it.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `address` (`host:port`): whether it answered 200, and the body.
pub async fn get(address: &str, path: &str) -> Option<(bool, String)> {
    let mut s = tokio::net::TcpStream::connect(address).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    let ok = buf.starts_with("HTTP/1.1 200");
    let body = buf
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Some((ok, body))
}

/// The HTTP address bosun printed in its log `text`, once it has.
pub fn address_in(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.split("bosun HTTP endpoints listening on http://")
            .nth(1)
            .map(|a| a.trim().to_string())
    })
}
