//! Journal following between replicas: the leader serves its journals as streams of stored
//! records; each standby appends them to its own journal, durably and byte for byte, so
//! that whichever replica leads next starts from (nearly) everything the last one wrote.
//!
//! ```text
//!  standby ── GET /replication/challenge?nonce=Ns&standby=S&leader=H ──► leader
//!          (only the replica that leads, as H, answers: auth.rs)
//!  standby ── GET /replication/<journal>?after=N&checksum=C (a proof, auth.rs) ──► leader
//!          ◄── frames: Reset(snapshot) · Record(seq, bytes)… · Heartbeat(leader's last)
//!          ── POST /replication/<journal>/ack?seq=N ──► (ack mode: appends wait for it)
//! ```
//!
//! A frame is `kind: u8`, `seq: u64 LE`, `len: u32 LE`, `len` bytes, then a 32-byte tag:
//! an HMAC keyed for this session and journal over the frame's position in the stream,
//! kind, seq and bytes. A standby refuses the stream at the first frame whose tag does not
//! match (forged, replayed from another session or place, reordered) before anything of
//! it reaches the journal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bosun_journal::{FollowFrom, Journal, JournalError, Versioned};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use super::auth::{self, Credentials, FrameKey, Nonces, Session, TAG_BYTES};

const RECORD: u8 = 1;
const RESET: u8 = 2;
const HEARTBEAT: u8 = 3;
const FRAME_HEADER: usize = 1 + 8 + 4;
/// Records read from storage at a time.
const CHUNK: usize = 512;
/// A leader with nothing new says so this often; a standby that hears nothing for
/// [`SILENCE`] reconnects.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);
const SILENCE: Duration = Duration::from_secs(5);
/// The longest identity a challenge may name (a pod's name, its address and namespace).
const IDENTITY_MAX: usize = 512;

/// One frame of a journal stream.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Frame {
    kind: u8,
    seq: u64,
    bytes: Bytes,
    tag: [u8; TAG_BYTES],
}

impl Frame {
    /// The frame at `position` of the stream `key` tags.
    #[cfg(test)]
    fn sealed(key: &FrameKey, position: u64, kind: u8, seq: u64, bytes: &[u8]) -> Frame {
        Frame {
            kind,
            seq,
            bytes: Bytes::copy_from_slice(bytes),
            tag: key.tag(position, kind, seq, bytes),
        }
    }

    #[cfg(test)]
    fn encode(&self) -> Bytes {
        encode(self.kind, self.seq, &self.bytes, &self.tag)
    }

    /// Whether this is the frame at `position` of the stream `key` tags.
    fn authentic(&self, key: &FrameKey, position: u64) -> bool {
        key.verify(position, self.kind, self.seq, &self.bytes, &self.tag)
    }

    fn describe(&self) -> String {
        match self.kind {
            RECORD => format!("record {}", self.seq),
            RESET => format!("reset to snapshot {}", self.seq),
            HEARTBEAT => format!("heartbeat {}", self.seq),
            other => format!("kind {other}, seq {}", self.seq),
        }
    }
}

/// A frame's bytes on the wire.
fn encode(kind: u8, seq: u64, bytes: &[u8], tag: &[u8; TAG_BYTES]) -> Bytes {
    let mut b = BytesMut::with_capacity(FRAME_HEADER + bytes.len() + TAG_BYTES);
    b.extend_from_slice(&[kind]);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    b.extend_from_slice(bytes);
    b.extend_from_slice(tag);
    b.freeze()
}

/// Takes one whole frame off the front of `buf`, if there is one.
fn next_frame(buf: &mut BytesMut) -> Option<Frame> {
    if buf.len() < FRAME_HEADER {
        return None;
    }
    let kind = buf[0];
    let seq = u64::from_le_bytes(buf[1..9].try_into().ok()?);
    let len = u32::from_le_bytes(buf[9..13].try_into().ok()?) as usize;
    if buf.len() < FRAME_HEADER + len + TAG_BYTES {
        return None;
    }
    buf.advance(FRAME_HEADER);
    let bytes = buf.split_to(len).freeze();
    let mut tag = [0u8; TAG_BYTES];
    tag.copy_from_slice(&buf[..TAG_BYTES]);
    buf.advance(TAG_BYTES);
    Some(Frame {
        kind,
        seq,
        bytes,
        tag,
    })
}

/// A journal the leader serves, whatever its event type.
pub trait Source: Send + Sync {
    /// Where a standby at `after` (with `checksum` there) continues.
    fn follow_from(&self, after: u64, checksum: Option<u32>) -> Result<FollowFrom, JournalError>;
    /// Up to `max` stored records from `from` on.
    fn stored_chunk(&self, from: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>, JournalError>;
    /// The last durable sequence number, as it changes.
    fn durable(&self) -> watch::Receiver<u64>;
    /// Waits until everything appended so far is durable (blocking).
    fn sync(&self) -> Result<(), JournalError>;
}

impl<E> Source for Journal<E>
where
    E: Serialize + DeserializeOwned + Versioned + Send + Sync + 'static,
{
    fn follow_from(&self, after: u64, checksum: Option<u32>) -> Result<FollowFrom, JournalError> {
        Journal::follow_from(self, after, checksum)
    }

    fn stored_chunk(&self, from: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        self.stored_from(from).take(max).collect()
    }

    fn durable(&self) -> watch::Receiver<u64> {
        self.durable_watch()
    }

    fn sync(&self) -> Result<(), JournalError> {
        self.append_blocking(&[]).map(|_| ())
    }
}

#[derive(Default)]
struct Inner {
    /// This replica's identity (what the Lease names it when it leads).
    identity: String,
    /// Whether this replica holds the Lease: only then does it answer a challenge.
    leading: AtomicBool,
    credentials: Option<Credentials>,
    nonces: Nonces,
    sources: RwLock<BTreeMap<String, Arc<dyn Source>>>,
    acks: Mutex<BTreeMap<String, watch::Sender<u64>>>,
    /// Standbys streaming each journal now.
    standbys: Mutex<BTreeMap<String, watch::Sender<usize>>>,
}

/// Counts a standby as connected while its stream lasts.
struct Connected {
    tx: watch::Sender<usize>,
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.tx.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The leader's side: the journals it serves and the standbys' acknowledgements.
#[derive(Clone, Default)]
pub struct Replication {
    inner: Arc<Inner>,
}

impl Replication {
    /// Serves journals to standbys holding `token`, once this replica (`identity`) leads.
    pub fn new(token: Option<&str>, identity: &str) -> Replication {
        Replication {
            inner: Arc::new(Inner {
                credentials: token.map(Credentials::new),
                identity: identity.to_string(),
                ..Default::default()
            }),
        }
    }

    /// This replica holds the Lease: from now on it answers standbys' challenges (for its
    /// own identity only).
    pub fn lead(&self) {
        self.inner.leading.store(true, Ordering::Release);
    }

    /// This replica no longer holds the Lease: it answers no challenge.
    pub fn step_down(&self) {
        self.inner.leading.store(false, Ordering::Release);
    }

    fn leads(&self) -> bool {
        self.inner.leading.load(Ordering::Acquire)
    }

    /// Starts serving a journal under `name` (this replica leads).
    pub fn publish(&self, name: &str, source: Arc<dyn Source>) {
        if let Ok(mut s) = self.inner.sources.write() {
            s.insert(name.to_string(), source);
        }
    }

    /// The highest sequence number of `name` a standby has made durable.
    pub fn acked(&self, name: &str) -> watch::Receiver<u64> {
        let mut acks = self.inner.acks.lock().unwrap_or_else(|p| p.into_inner());
        acks.entry(name.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// How many standbys stream `name` now.
    pub fn standbys(&self, name: &str) -> watch::Receiver<usize> {
        self.standbys_tx(name).subscribe()
    }

    fn standbys_tx(&self, name: &str) -> watch::Sender<usize> {
        let mut s = self
            .inner
            .standbys
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        s.entry(name.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .clone()
    }

    fn ack(&self, name: &str, seq: u64) {
        let mut acks = self.inner.acks.lock().unwrap_or_else(|p| p.into_inner());
        let tx = acks
            .entry(name.to_string())
            .or_insert_with(|| watch::channel(0).0);
        tx.send_if_modified(|at| {
            let newer = seq > *at;
            if newer {
                *at = seq;
            }
            newer
        });
    }

    /// The session of a request that proves it comes from a holder of the token, in a
    /// session this replica opened (auth.rs).
    fn authorized(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Session> {
        let credentials = self.inner.credentials.as_ref()?;
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())?;
        let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
        credentials.authorized(header, method.as_str(), path, &self.inner.nonces)
    }

    /// `/replication/…` routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/replication/challenge", get(challenge))
            .route("/replication/{name}", get(stream))
            .route("/replication/{name}/ack", post(ack))
            .with_state(self.clone())
    }
}

#[derive(serde::Deserialize)]
struct StreamQuery {
    #[serde(default)]
    after: u64,
    checksum: Option<u32>,
}

#[derive(serde::Deserialize)]
struct AckQuery {
    seq: u64,
}

#[derive(serde::Deserialize)]
struct ChallengeQuery {
    nonce: String,
    /// The asking standby's identity.
    standby: Option<String>,
    /// The holder the standby's Lease names: the identity it expects to answer.
    leader: Option<String>,
}

/// What a leader answers a standby's challenge with.
#[derive(Serialize, serde::Deserialize)]
struct ChallengeAnswer {
    /// The protocol's version ([`auth::VERSION`]; absent from an older bosun's answer).
    #[serde(default)]
    version: u32,
    /// Proves this replica holds the token, leads as the holder the standby named, and
    /// answers this standby's nonce (auth.rs).
    proof: String,
    /// The standby's requests prove themselves over this one.
    nonce: String,
}

/// Proves to a standby that this replica, the Lease's holder, holds the token, and hands
/// it a nonce. A replica that does not lead, or is not the holder the standby names,
/// answers nothing: so no relay can borrow its proof.
async fn challenge(State(r): State<Replication>, Query(q): Query<ChallengeQuery>) -> Response {
    let Some(credentials) = &r.inner.credentials else {
        return (
            StatusCode::UNAUTHORIZED,
            "this replica has no journal token (BOSUN_HA_TOKEN)\n",
        )
            .into_response();
    };
    if !auth::is_nonce(&q.nonce) {
        return (
            StatusCode::BAD_REQUEST,
            "nonce: expected 32 hexadecimal digits\n",
        )
            .into_response();
    }
    let (Some(standby), Some(leader)) = (q.standby, q.leader) else {
        return (
            StatusCode::BAD_REQUEST,
            format!(
                "standby and leader are required (journal protocol {}): the standby runs an older bosun; replicas follow each other only when they run the same version\n",
                auth::VERSION
            ),
        )
            .into_response();
    };
    if standby.len() > IDENTITY_MAX || leader.len() > IDENTITY_MAX {
        return (
            StatusCode::BAD_REQUEST,
            format!("standby, leader: at most {IDENTITY_MAX} bytes\n"),
        )
            .into_response();
    }
    if !r.leads() {
        tracing::info!(
            ?standby,
            ?leader,
            "a journal challenge for a leader, and this replica does not lead: not answered"
        );
        return (
            StatusCode::CONFLICT,
            "this replica does not lead: it answers no journal challenge\n",
        )
            .into_response();
    }
    if leader != r.inner.identity {
        tracing::warn!(?standby, ?leader, identity = %r.inner.identity, "a journal challenge for another holder than this replica (a forged Lease, or a relay): not answered");
        return (
            StatusCode::CONFLICT,
            "the holder named is not this replica: it answers no journal challenge for it\n",
        )
            .into_response();
    }
    match r.inner.nonces.issue(&leader, &standby, &q.nonce) {
        Ok(session) => axum::Json(ChallengeAnswer {
            version: auth::VERSION,
            proof: credentials.leader_proof(&session),
            nonce: session.leader_nonce,
        })
        .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "no random numbers for a nonce\n",
        )
            .into_response(),
    }
}

async fn ack(
    State(r): State<Replication>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<AckQuery>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if r.authorized(&method, &uri, &headers).is_none() {
        return (
            StatusCode::UNAUTHORIZED,
            "a valid journal token is required\n",
        )
            .into_response();
    }
    r.ack(&name, q.seq);
    StatusCode::NO_CONTENT.into_response()
}

async fn stream(
    State(r): State<Replication>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<StreamQuery>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (Some(session), Some(credentials)) = (
        r.authorized(&method, &uri, &headers),
        r.inner.credentials.as_ref(),
    ) else {
        return (
            StatusCode::UNAUTHORIZED,
            "a valid journal token is required\n",
        )
            .into_response();
    };
    let key = credentials.frame_key(&session, &name);
    let source = r
        .inner
        .sources
        .read()
        .ok()
        .and_then(|s| s.get(&name).cloned());
    let Some(source) = source else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("this replica does not lead, or has no journal {name:?}\n"),
        )
            .into_response();
    };
    let start = match source.follow_from(q.after, q.checksum) {
        Ok(s) => s,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let counted = r.standbys_tx(&name);
    counted.send_modify(|n| *n += 1);
    let connected = Connected { tx: counted };
    tokio::spawn(async move {
        produce(source, start, Sealer { key, position: 0 }, tx, name).await;
        drop(connected);
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    Response::new(axum::body::Body::from_stream(body))
}

/// Tags a stream's frames in order.
struct Sealer {
    key: FrameKey,
    position: u64,
}

impl Sealer {
    fn seal(&mut self, kind: u8, seq: u64, bytes: &[u8]) -> Bytes {
        let tag = self.key.tag(self.position, kind, seq, bytes);
        self.position += 1;
        encode(kind, seq, bytes, &tag)
    }
}

async fn produce(
    source: Arc<dyn Source>,
    start: FollowFrom,
    mut sealer: Sealer,
    tx: mpsc::Sender<Bytes>,
    name: String,
) {
    let mut next = match start {
        FollowFrom::Continue(n) => n,
        FollowFrom::Reset(snapshot) => {
            let (seq, bytes) = snapshot.unwrap_or_default();
            tracing::info!(journal = %name, seq, "a standby starts over from this journal's snapshot");
            if tx.send(sealer.seal(RESET, seq, &bytes)).await.is_err() {
                return;
            }
            seq + 1
        }
    };
    let mut durable = source.durable();
    loop {
        let last = *durable.borrow_and_update();
        while next <= last {
            let chunk = match source.stored_chunk(next, CHUNK) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(journal = %name, "cannot read the journal for a standby: {e}");
                    return;
                }
            };
            let mut sent = false;
            for (seq, bytes) in chunk.into_iter().take_while(|(s, _)| *s <= last) {
                if seq != next {
                    // Compacted away under the stream: the standby reconnects and resets.
                    return;
                }
                if tx.send(sealer.seal(RECORD, seq, &bytes)).await.is_err() {
                    return;
                }
                next = seq + 1;
                sent = true;
            }
            if !sent {
                return;
            }
        }
        if tx.send(sealer.seal(HEARTBEAT, last, &[])).await.is_err() {
            return;
        }
        tokio::select! {
            changed = durable.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(HEARTBEAT_EVERY) => {}
            () = tx.closed() => return,
        }
    }
}

/// What a standby's follower of one journal reports.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FollowStatus {
    /// The journal.
    pub journal: String,
    /// The leader followed now (its journal URL), if connected.
    pub leader: Option<String>,
    /// The last record this replica holds.
    pub seq: u64,
    /// The leader's last record, as last heard.
    pub leader_seq: u64,
    /// The last problem, if the follower is not connected.
    pub error: Option<String>,
}

/// The followers' statuses, shared with the standby's HTTP endpoints.
pub type Statuses = Arc<Mutex<BTreeMap<String, FollowStatus>>>;

/// The leader a standby follows: the Lease's holder and where it serves its journals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderAt {
    /// The holder's identity, as the Lease names it: the leader proves it is this one.
    pub identity: String,
    /// Its journal base URL (`http://host:port`).
    pub url: String,
}

/// One journal's follower settings.
pub struct FollowArgs {
    /// The journal's name (`modules`, `lambda`, `deployer`).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// This replica's identity (the leader's proof and the stream are bound to it).
    pub identity: String,
    /// The leader, as the Lease names it and as it changes.
    pub leader: watch::Receiver<Option<LeaderAt>>,
    /// The journal token (never sent: the leader proves it holds it, and each request
    /// proves the standby does).
    pub token: String,
    /// Send acknowledgements (the leader's ack mode).
    pub ack: bool,
    /// Where to report.
    pub statuses: Statuses,
    /// Set to `true` to stop; the journal is closed when the follower returns.
    pub stop: watch::Receiver<bool>,
}

fn report(statuses: &Statuses, name: &str, f: impl FnOnce(&mut FollowStatus)) {
    let mut s = statuses.lock().unwrap_or_else(|p| p.into_inner());
    let entry = s.entry(name.to_string()).or_insert_with(|| FollowStatus {
        journal: name.to_string(),
        ..Default::default()
    });
    f(entry);
}

type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<Bytes>,
>;

fn http_client() -> HttpClient {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(3)));
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(connector)
}

/// Why one connection to the leader ended.
#[derive(Debug, thiserror::Error)]
enum FollowError {
    #[error("{0}")]
    Http(String),
    #[error("the leader answered {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the leader's stream: {0}")]
    Frame(String),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("no frame from the leader for {0:?}")]
    Silent(Duration),
    #[error("{0}: nothing was sent to it")]
    NotProven(String),
    #[error(
        "frame {position} of the leader's stream ({frame}) does not authenticate (forged, replayed or out of order): refused, and nothing of what came with it was written to the journal"
    )]
    Unauthentic { position: u64, frame: String },
}

/// Follows one journal of the leader until stopped; the journal is closed when it returns.
pub async fn follow<E>(mut args: FollowArgs) -> anyhow::Result<()>
where
    E: Serialize + DeserializeOwned + Versioned + Send + Sync + 'static,
{
    let mut journal = Some(open::<E>(&args.dir)?);
    let client = http_client();
    let mut failures = 0u32;
    loop {
        if *args.stop.borrow() {
            break;
        }
        let leader = args.leader.borrow_and_update().clone();
        let Some(leader) = leader else {
            tokio::select! {
                _ = args.leader.changed() => {}
                _ = args.stop.changed() => {}
            }
            continue;
        };
        let (mut stop, mut moved) = (args.stop.clone(), args.leader.clone());
        let outcome = tokio::select! {
            r = connection::<E>(&client, &leader, &args, &mut journal) => Some(r),
            _ = stop.changed() => None,
            _ = moved.changed() => Some(Ok(())),
        };
        match outcome {
            None => break,
            Some(Ok(())) => failures = 0,
            Some(Err(e)) => {
                failures += 1;
                let text = e.to_string();
                let mut repeated = false;
                report(&args.statuses, &args.name, |s| {
                    repeated = s.error.as_deref() == Some(text.as_str());
                    s.leader = None;
                    s.error = Some(text.clone());
                });
                let base = &leader.url;
                if matches!(e, FollowError::Unauthentic { .. }) {
                    tracing::error!(journal = %args.name, leader = %base, holder = %leader.identity, "following the leader's journal: {text}");
                } else if repeated {
                    tracing::debug!(journal = %args.name, leader = %base, failures, "following the leader's journal: {text}");
                } else {
                    tracing::warn!(journal = %args.name, leader = %base, "following the leader's journal: {text}");
                }
                let delay = Duration::from_millis(100 * u64::from(failures.min(20)));
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = args.stop.changed() => {}
                }
            }
        }
    }
    if let Some(j) = journal.take() {
        let dir = args.dir.clone();
        tokio::task::spawn_blocking(move || j.close()).await.ok();
        tracing::info!(journal = %dir.display(), "stopped following");
    }
    Ok(())
}

fn open<E>(dir: &Path) -> anyhow::Result<Journal<E>>
where
    E: Serialize + DeserializeOwned + Versioned,
{
    Journal::<E>::open(dir)
        .map_err(|e| anyhow::anyhow!("cannot open the journal {}: {e}", dir.display()))
}

async fn connection<E>(
    client: &HttpClient,
    leader: &LeaderAt,
    args: &FollowArgs,
    journal: &mut Option<Journal<E>>,
) -> Result<(), FollowError>
where
    E: Serialize + DeserializeOwned + Versioned + Send + Sync + 'static,
{
    let base = leader.url.as_str();
    let j = journal
        .as_ref()
        .ok_or_else(|| FollowError::Frame("journal closed".into()))?;
    let after = j.last_seq();
    let checksum = j.checksum_at(after)?;
    let auth = authenticate(client, leader, args).await?;
    let key = auth.credentials.frame_key(&auth.session, &args.name);
    let mut position = 0u64;
    let mut path = format!("/replication/{}?after={after}", args.name);
    if let Some(c) = checksum {
        path.push_str(&format!("&checksum={c}"));
    }
    let url = format!("{base}{path}");
    let request = http::Request::get(&url)
        .header("authorization", auth.header("GET", &path))
        .body(http_body_util::Full::new(Bytes::new()))
        .map_err(|e| FollowError::Http(e.to_string()))?;
    let response = send(client, &url, request).await?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let text = tokio::time::timeout(SILENCE, body.collect())
            .await
            .ok()
            .and_then(|r| r.ok())
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
            .unwrap_or_default();
        return Err(FollowError::Refused {
            status: status.as_u16(),
            body: text,
        });
    }
    tracing::info!(journal = %args.name, leader = %base, after, "following the leader's journal");
    report(&args.statuses, &args.name, |s| {
        s.leader = Some(base.to_string());
        s.error = None;
        s.seq = after;
    });
    let mut buf = BytesMut::new();
    loop {
        let frame = tokio::time::timeout(SILENCE, body.frame())
            .await
            .map_err(|_| FollowError::Silent(SILENCE))?;
        let Some(frame) = frame else {
            return Err(FollowError::Frame("the leader ended the stream".into()));
        };
        let frame = frame.map_err(|e| FollowError::Http(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
        let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut leader_seq = None;
        while let Some(frame) = next_frame(&mut buf) {
            // Nothing of this read is written before each of its frames authenticated.
            if !frame.authentic(&key, position) {
                return Err(FollowError::Unauthentic {
                    position,
                    frame: frame.describe(),
                });
            }
            position += 1;
            let Frame {
                kind, seq, bytes, ..
            } = frame;
            match kind {
                RECORD => batch.push((seq, bytes.to_vec())),
                HEARTBEAT => leader_seq = Some(seq),
                RESET => {
                    if !batch.is_empty() {
                        return Err(FollowError::Frame("a reset after records".into()));
                    }
                    let snapshot = (!bytes.is_empty()).then(|| (seq, bytes.to_vec()));
                    reset::<E>(&args.dir, journal, snapshot).await?;
                }
                other => return Err(FollowError::Frame(format!("unknown frame kind {other}"))),
            }
        }
        let j = journal
            .as_ref()
            .ok_or_else(|| FollowError::Frame("journal closed".into()))?;
        let mut seq = j.last_seq();
        if !batch.is_empty() {
            seq = j.append_stored(batch).await?;
            if args.ack {
                send_ack(client, base, args, &auth, seq).await;
            }
        }
        report(&args.statuses, &args.name, |s| {
            s.seq = seq;
            if let Some(l) = leader_seq {
                s.leader_seq = l;
            }
        });
    }
}

/// Sends `request` (to `url`), waiting at most [`SILENCE`] for the answer's head.
async fn send(
    client: &HttpClient,
    url: &str,
    request: http::Request<http_body_util::Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, FollowError> {
    tokio::time::timeout(SILENCE, client.request(request))
        .await
        .map_err(|_| FollowError::Silent(SILENCE))?
        .map_err(|e| FollowError::Http(format!("{url}: {e}")))
}

/// A session with a leader that proved itself: how the standby's requests prove
/// themselves, and what keys the stream's frames.
struct Auth {
    credentials: Credentials,
    session: Session,
}

impl Auth {
    fn header(&self, method: &str, path_and_query: &str) -> String {
        self.credentials
            .authorization(&self.session.leader_nonce, method, path_and_query)
    }
}

/// `text` for a URL's query (everything but unreserved characters escaped).
fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Asks the replica at `leader.url` to prove it is the Lease's holder `leader.identity`
/// and holds the journal token, for this standby and a fresh nonce; nothing derived from
/// the token is sent to one that does not.
async fn authenticate(
    client: &HttpClient,
    leader: &LeaderAt,
    args: &FollowArgs,
) -> Result<Auth, FollowError> {
    let base = leader.url.as_str();
    let credentials = Credentials::new(&args.token);
    let ours =
        auth::nonce().map_err(|_| FollowError::Http("no random numbers for a nonce".into()))?;
    let url = format!(
        "{base}/replication/challenge?nonce={ours}&standby={}&leader={}",
        query_escape(&args.identity),
        query_escape(&leader.identity)
    );
    let request = http::Request::get(&url)
        .body(http_body_util::Full::new(Bytes::new()))
        .map_err(|e| FollowError::Http(e.to_string()))?;
    let response = send(client, &url, request).await?;
    let status = response.status();
    let body = tokio::time::timeout(SILENCE, response.into_body().collect())
        .await
        .map_err(|_| FollowError::Silent(SILENCE))?
        .map_err(|e| FollowError::Http(e.to_string()))?
        .to_bytes();
    let answer = (status == StatusCode::OK)
        .then(|| serde_json::from_slice::<ChallengeAnswer>(&body).ok())
        .flatten();
    if let Some(a) = &answer
        && auth::is_nonce(&a.nonce)
    {
        let session = Session {
            leader: leader.identity.clone(),
            standby: args.identity.clone(),
            standby_nonce: ours,
            leader_nonce: a.nonce.clone(),
        };
        if credentials.is_leader_proof(&session, &a.proof) {
            return Ok(Auth {
                credentials,
                session,
            });
        }
    }
    let why = match &answer {
        Some(a) if a.version < auth::VERSION => format!(
            " with a proof of journal protocol {}, as a bosun older than this one answers: replicas follow each other only when they run the same version",
            a.version.max(1)
        ),
        Some(_) => " with a proof that does not hold".to_string(),
        None => {
            let text = String::from_utf8_lossy(&body);
            let text = text.trim();
            let text: String = text.chars().take(200).collect();
            if text.is_empty() {
                String::new()
            } else {
                format!(": {text}")
            }
        }
    };
    Err(FollowError::NotProven(format!(
        "the replica at {base}, which the Lease names as the leader ({}), did not prove it holds the journal token and leads as that holder (it answered {status}{why})",
        leader.identity
    )))
}

async fn reset<E>(
    dir: &Path,
    journal: &mut Option<Journal<E>>,
    snapshot: Option<(u64, Vec<u8>)>,
) -> Result<(), FollowError>
where
    E: Serialize + DeserializeOwned + Versioned + Send + Sync + 'static,
{
    let seq = snapshot.as_ref().map_or(0, |(s, _)| *s);
    tracing::warn!(journal = %dir.display(), snapshot = seq, "this journal differs from the leader's or is behind its compaction: starting over from the leader's");
    if let Some(j) = journal.take() {
        tokio::task::spawn_blocking(move || j.close()).await.ok();
    }
    let d = dir.to_path_buf();
    let aside = tokio::task::spawn_blocking(move || Journal::<E>::replace(&d, snapshot))
        .await
        .map_err(|e| FollowError::Frame(e.to_string()))??;
    if let Some(aside) = aside {
        tracing::warn!(journal = %dir.display(), kept = %aside.display(), "the previous contents are kept for inspection");
    }
    *journal = Some(Journal::<E>::open(dir)?);
    Ok(())
}

async fn send_ack(client: &HttpClient, base: &str, args: &FollowArgs, auth: &Auth, seq: u64) {
    let path = format!("/replication/{}/ack?seq={seq}", args.name);
    let url = format!("{base}{path}");
    let Ok(request) = http::Request::post(&url)
        .header("authorization", auth.header("POST", &path))
        .body(http_body_util::Full::new(Bytes::new()))
    else {
        return;
    };
    match tokio::time::timeout(SILENCE, client.request(request)).await {
        Ok(Ok(r)) if r.status().is_success() => {}
        Ok(Ok(r)) => {
            tracing::warn!(journal = %args.name, "the leader refused an ack: {}", r.status())
        }
        Ok(Err(e)) => tracing::warn!(journal = %args.name, "cannot ack to the leader: {e}"),
        Err(_) => tracing::warn!(journal = %args.name, "acking to the leader timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    use axum::extract::RawQuery;

    #[test]
    fn frames_come_apart_however_the_bytes_arrive() {
        let key = Credentials::new("journal-secret").frame_key(
            &Session {
                leader: "alpha".into(),
                standby: "bravo".into(),
                standby_nonce: auth::nonce().expect("nonce"),
                leader_nonce: auth::nonce().expect("nonce"),
            },
            "modules",
        );
        let sent = vec![
            Frame::sealed(&key, 0, RESET, 7, b"snap"),
            Frame::sealed(&key, 1, RECORD, 8, b"record eight"),
            Frame::sealed(&key, 2, HEARTBEAT, 8, b""),
        ];
        // What the leader sends, one frame after the other.
        let mut sealer = Sealer {
            key: key.clone(),
            position: 0,
        };
        let wire: Vec<u8> = sent
            .iter()
            .flat_map(|f| sealer.seal(f.kind, f.seq, &f.bytes).to_vec())
            .collect();
        for split in 0..wire.len() {
            let mut buf = BytesMut::new();
            let mut seen = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                buf.extend_from_slice(part);
                while let Some(f) = next_frame(&mut buf) {
                    seen.push(f);
                }
            }
            assert_eq!(seen, sent);
        }
        for (position, f) in sent.iter().enumerate() {
            assert!(f.authentic(&key, position as u64));
            assert!(!f.authentic(&key, position as u64 + 1));
        }
    }

    // A journal stream between real replicas' ends on loopback.

    #[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Ev(u64);

    impl Versioned for Ev {
        const VERSION: u32 = 1;
        type Error = serde_json::Error;
        fn decode(_: u32, raw: serde_json::Value) -> Result<Self, serde_json::Error> {
            serde_json::from_value(raw)
        }
    }

    const TOKEN: &str = "journal-secret";
    const ALPHA: &str = "alpha.127-0-0-1.default.pod";
    const BRAVO: &str = "bravo.127-0-0-1.default.pod";
    const MALLORY: &str = "mallory.127-0-0-5.default.pod";

    /// Waits (polling, up to a deadline generous for a loaded machine) until `cond` holds.
    async fn until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn serve(app: Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    }

    fn stored(j: &Journal<Ev>) -> Vec<(u64, Vec<u8>)> {
        j.stored_from(1)
            .map(|r| r.expect("a valid record"))
            .collect()
    }

    /// The leader, alpha: a journal of `records` records, served while it leads.
    struct Leader {
        url: String,
        journal: Arc<Journal<Ev>>,
        _dir: tempfile::TempDir,
    }

    async fn leader(records: u64) -> Leader {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Arc::new(Journal::<Ev>::open(&dir.path().join("modules")).expect("open"));
        for i in 1..=records {
            journal.append(&Ev(i)).await.expect("append");
        }
        let r = Replication::new(Some(TOKEN), ALPHA);
        r.lead();
        r.publish("modules", journal.clone());
        Leader {
            url: serve(r.router()).await,
            journal,
            _dir: dir,
        }
    }

    /// A standby's follower of `modules`, in `dir`, following `at`.
    struct Follower {
        dir: PathBuf,
        statuses: Statuses,
        leader: watch::Sender<Option<LeaderAt>>,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    fn follower(dir: &Path, at: LeaderAt) -> Follower {
        let statuses = Statuses::default();
        let (leader, leader_rx) = watch::channel(Some(at));
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(follow::<Ev>(FollowArgs {
            name: "modules".into(),
            dir: dir.to_path_buf(),
            identity: BRAVO.into(),
            leader: leader_rx,
            token: TOKEN.into(),
            ack: false,
            statuses: statuses.clone(),
            stop: stop_rx,
        }));
        Follower {
            dir: dir.to_path_buf(),
            statuses,
            leader,
            stop,
            task,
        }
    }

    impl Follower {
        fn status(&self) -> FollowStatus {
            self.statuses
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get("modules")
                .cloned()
                .unwrap_or_default()
        }

        fn error(&self) -> String {
            self.status().error.unwrap_or_default()
        }

        /// Stops the follower (its journal closes) and reads what its journal holds.
        async fn stop(self) -> Vec<(u64, Vec<u8>)> {
            let _ = self.stop.send(true);
            self.task.await.expect("joined").expect("the follower ends");
            let j = Journal::<Ev>::open(&self.dir).expect("reopen");
            let records = stored(&j);
            j.close();
            records
        }

        fn replaced(&self) -> bool {
            let mut name = self.dir.as_os_str().to_owned();
            name.push(".replaced");
            PathBuf::from(name).exists()
        }
    }

    /// A standby journal holding the leader's first `n` records.
    async fn standby_journal(dir: &Path, l: &Leader, n: usize) -> Vec<(u64, Vec<u8>)> {
        let j = Journal::<Ev>::open(dir).expect("open");
        let records: Vec<_> = stored(&l.journal).into_iter().take(n).collect();
        j.append_stored(records.clone()).await.expect("copied");
        j.close();
        records
    }

    async fn fetch(url: &str) -> (StatusCode, Bytes) {
        let request = http::Request::get(url)
            .body(http_body_util::Full::new(Bytes::new()))
            .expect("request");
        let response = http_client().request(request).await.expect("answered");
        let status = response.status();
        let body = response.into_body().collect().await.expect("body");
        (status, body.to_bytes())
    }

    /// What a relay saw.
    #[derive(Default)]
    struct Relayed {
        /// The status of each challenge answer it relayed.
        challenges: Mutex<Vec<StatusCode>>,
        /// Stream requests it received.
        streams: AtomicUsize,
    }

    /// Mallory's listener, named by a forged Lease: it relays every challenge to `target`
    /// (naming `as_leader` as the holder instead, if set), hands the answer back, and
    /// answers a stream request with a reset, which would wipe a standby's journal.
    async fn relay(target: String, as_leader: Option<&'static str>) -> (String, Arc<Relayed>) {
        let seen = Arc::new(Relayed::default());
        let challenge_seen = seen.clone();
        let stream_seen = seen.clone();
        let app = Router::new()
            .route(
                "/replication/challenge",
                get(move |RawQuery(q): RawQuery| {
                    let (target, seen) = (target.clone(), challenge_seen.clone());
                    async move {
                        let mut q = q.unwrap_or_default();
                        if let Some(l) = as_leader {
                            q = q.replace(
                                &format!("leader={}", query_escape(MALLORY)),
                                &format!("leader={}", query_escape(l)),
                            );
                        }
                        let (status, body) =
                            fetch(&format!("{target}/replication/challenge?{q}")).await;
                        seen.challenges
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(status);
                        (status, body)
                    }
                }),
            )
            .route(
                "/replication/{name}",
                get(move || {
                    stream_seen.streams.fetch_add(1, Ordering::SeqCst);
                    let reset = Frame {
                        kind: RESET,
                        seq: 0,
                        bytes: Bytes::new(),
                        tag: [0; TAG_BYTES],
                    };
                    async move { reset.encode() }
                }),
            );
        (serve(app).await, seen)
    }

    /// Someone who may edit the Lease names a listener of theirs as the holder, and it
    /// relays the standby's challenge to a replica that holds the token: to the standby
    /// itself, to the real leader (which is not the holder named), or to the real leader
    /// as the holder. None of them is taken as the leader; nothing reaches the journal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relayed_challenge_proves_nothing() {
        let l = leader(3).await;
        let tmp = tempfile::tempdir().expect("tempdir");
        // The standby's own HA port: it holds the token and does not lead.
        let standby_url = serve(Replication::new(Some(TOKEN), BRAVO).router()).await;
        let cases = [
            (
                "the standby itself",
                standby_url.clone(),
                None,
                StatusCode::CONFLICT,
            ),
            (
                "the leader, not the holder named",
                l.url.clone(),
                None,
                StatusCode::CONFLICT,
            ),
            (
                "the leader, as itself",
                l.url.clone(),
                Some(ALPHA),
                StatusCode::OK,
            ),
        ];
        for (n, (case, target, as_leader, answered)) in cases.into_iter().enumerate() {
            let dir = tmp.path().join(format!("standby-{n}"));
            let before = standby_journal(&dir, &l, 3).await;
            let (mallory, seen) = relay(target, as_leader).await;
            let f = follower(
                &dir,
                LeaderAt {
                    identity: MALLORY.into(),
                    url: mallory,
                },
            );
            until(
                &format!("relayed to {case}: the standby's first attempt ends"),
                || {
                    !f.error().is_empty()
                        && !seen
                            .challenges
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .is_empty()
                },
            )
            .await;
            assert!(
                f.error()
                    .contains("did not prove it holds the journal token and leads as that holder")
                    && f.error().contains(MALLORY),
                "{case}: {}",
                f.error()
            );
            assert_eq!(f.status().leader, None, "{case}");
            let statuses = seen
                .challenges
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            assert!(
                statuses.iter().all(|s| *s == answered),
                "{case}: {statuses:?}"
            );
            assert!(!f.replaced(), "{case}: the journal was set aside");
            let after = f.stop().await;
            assert_eq!(
                seen.streams.load(Ordering::SeqCst),
                0,
                "{case}: the relay was asked for the stream"
            );
            assert_eq!(after, before, "{case}: the journal changed");
        }
        // A standby of an older bosun (no holder, no identity in its challenge) is not
        // answered either, nor is a challenge of a replica that does not lead.
        let nonce = auth::nonce().expect("nonce");
        let (status, _) = fetch(&format!("{}/replication/challenge?nonce={nonce}", l.url)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = fetch(&format!(
            "{standby_url}/replication/challenge?nonce={nonce}&standby={}&leader={}",
            query_escape(ALPHA),
            query_escape(BRAVO)
        ))
        .await;
        assert_eq!(status, StatusCode::CONFLICT);
    }

    /// What a man in the middle of a stream does with the leader's frames.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Tamper {
        /// Passes them on (and records them).
        Pass,
        /// Replaces the first record's contents (a well-formed record of other contents).
        ForgeRecord,
        /// Puts a reset before them.
        ForgeReset,
        /// Swaps the first two.
        Reorder,
        /// Sends the frames the first session it saw began with, up to its first
        /// heartbeat, instead.
        Replay,
    }

    struct Middle {
        url: String,
        tamper: Arc<Mutex<Tamper>>,
        sessions: Arc<Mutex<Vec<Vec<Frame>>>>,
    }

    /// Sits between a standby and the leader at `target`: challenges and requests pass
    /// unchanged, the stream's frames as `tamper` says.
    async fn middle(target: String) -> Middle {
        let tamper = Arc::new(Mutex::new(Tamper::Pass));
        let sessions: Arc<Mutex<Vec<Vec<Frame>>>> = Arc::default();
        let challenge_target = target.clone();
        let (t, recorded) = (tamper.clone(), sessions.clone());
        let app = Router::new()
            .route(
                "/replication/challenge",
                get(move |RawQuery(q): RawQuery| {
                    let target = challenge_target.clone();
                    async move {
                        fetch(&format!(
                            "{target}/replication/challenge?{}",
                            q.unwrap_or_default()
                        ))
                        .await
                    }
                }),
            )
            .route(
                "/replication/{name}",
                get(move |uri: Uri, headers: HeaderMap| {
                    let (target, t, recorded) = (target.clone(), t.clone(), recorded.clone());
                    async move {
                        let path = uri.path_and_query().map_or("", |p| p.as_str()).to_string();
                        let mut request = http::Request::get(format!("{target}{path}"));
                        if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
                            request = request.header("authorization", a.clone());
                        }
                        let request = request
                            .body(http_body_util::Full::new(Bytes::new()))
                            .expect("request");
                        let response = http_client().request(request).await.expect("answered");
                        let mode = *t.lock().unwrap_or_else(|p| p.into_inner());
                        let session = {
                            let mut s = recorded.lock().unwrap_or_else(|p| p.into_inner());
                            s.push(Vec::new());
                            s.len() - 1
                        };
                        let (tx, rx) = mpsc::channel::<Bytes>(64);
                        tokio::spawn(async move {
                            let mut upstream = response.into_body();
                            let mut buf = BytesMut::new();
                            let mut held = Vec::new();
                            while let Some(Ok(data)) = upstream.frame().await {
                                if let Ok(data) = data.into_data() {
                                    buf.extend_from_slice(&data);
                                }
                                while let Some(f) = next_frame(&mut buf) {
                                    recorded.lock().unwrap_or_else(|p| p.into_inner())[session]
                                        .push(f.clone());
                                    if mode == Tamper::Pass {
                                        if tx.send(f.encode()).await.is_err() {
                                            return;
                                        }
                                        continue;
                                    }
                                    let heartbeat = f.kind == HEARTBEAT;
                                    held.push(f);
                                    if !heartbeat {
                                        continue;
                                    }
                                    // Everything the leader had: tampered, in one piece.
                                    match mode {
                                        Tamper::ForgeRecord => {
                                            held[0].bytes =
                                                Journal::<Ev>::encode_record(held[0].seq, &Ev(666))
                                                    .into();
                                        }
                                        Tamper::ForgeReset => held.insert(
                                            0,
                                            Frame {
                                                kind: RESET,
                                                seq: 0,
                                                bytes: Bytes::new(),
                                                tag: [0; TAG_BYTES],
                                            },
                                        ),
                                        Tamper::Reorder => held.swap(0, 1),
                                        Tamper::Replay => {
                                            let first = recorded
                                                .lock()
                                                .unwrap_or_else(|p| p.into_inner())[0]
                                                .clone();
                                            let upto = first
                                                .iter()
                                                .position(|f| f.kind == HEARTBEAT)
                                                .map_or(first.len(), |i| i + 1);
                                            held = first[..upto].to_vec();
                                        }
                                        Tamper::Pass => {}
                                    }
                                    let wire: Vec<u8> =
                                        held.drain(..).flat_map(|f| f.encode().to_vec()).collect();
                                    if tx.send(Bytes::from(wire)).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        });
                        let body = futures::stream::unfold(rx, |mut rx| async move {
                            rx.recv()
                                .await
                                .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
                        });
                        Response::new(axum::body::Body::from_stream(body))
                    }
                }),
            );
        Middle {
            url: serve(app).await,
            tamper,
            sessions,
        }
    }

    /// A frame forged, put before the others, swapped with another, or replayed from an
    /// earlier session is refused and named, and nothing of it reaches the journal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forged_replayed_and_reordered_frames_are_refused() {
        let l = leader(6).await;
        let tmp = tempfile::tempdir().expect("tempdir");
        let m = middle(l.url.clone()).await;
        let alpha = || LeaderAt {
            identity: ALPHA.into(),
            url: m.url.clone(),
        };

        // First, a session passed on as it is: the standby's journal differs (it led for a
        // while), so the leader resets it and sends its records; the stream goes on live.
        let dir = tmp.path().join("standby");
        {
            let j = Journal::<Ev>::open(&dir).expect("open");
            j.append(&Ev(99)).await.expect("append");
            j.close();
        }
        let f = follower(&dir, alpha());
        until("the standby holds the leader's six records", || {
            f.status().seq == 6 && f.status().leader.is_some()
        })
        .await;
        assert!(f.replaced(), "the standby's own journal was set aside");
        for i in 7..=8 {
            l.journal.append(&Ev(i)).await.expect("append");
        }
        until("the standby holds records 7 and 8", || f.status().seq == 8).await;
        let first = m.sessions.lock().unwrap_or_else(|p| p.into_inner())[0].clone();
        assert_eq!(first[0].kind, RESET, "the first session began with a reset");

        // A later session gets the first one's frames (a reset that would roll the standby
        // back to record 6): refused at once.
        *m.tamper.lock().unwrap_or_else(|p| p.into_inner()) = Tamper::Replay;
        f.leader.send_replace(Some(alpha()));
        until(
            "the standby's next session ends, or its journal changes",
            || !f.error().is_empty() || f.status().seq != 8,
        )
        .await;
        assert!(
            f.error()
                .contains("frame 0 of the leader's stream (reset to snapshot 0)"),
            "{}",
            f.error()
        );
        let after = f.stop().await;
        assert_eq!(
            after,
            stored(&l.journal),
            "the standby's journal is untouched"
        );

        // A standby holding records 1–3 of the leader's 8: the frames of the rest are
        // tampered with.
        for (n, (tamper, named)) in [
            (
                Tamper::ForgeRecord,
                "frame 0 of the leader's stream (record 4)",
            ),
            (
                Tamper::ForgeReset,
                "frame 0 of the leader's stream (reset to snapshot 0)",
            ),
            (Tamper::Reorder, "frame 0 of the leader's stream (record 5)"),
        ]
        .into_iter()
        .enumerate()
        {
            let dir = tmp.path().join(format!("behind-{n}"));
            let before = standby_journal(&dir, &l, 3).await;
            *m.tamper.lock().unwrap_or_else(|p| p.into_inner()) = tamper;
            let f = follower(&dir, alpha());
            until(
                &format!("{tamper:?}: the standby's session ends, or its journal changes"),
                || !f.error().is_empty() || f.status().seq > 3,
            )
            .await;
            assert!(f.error().contains(named), "{tamper:?}: {}", f.error());
            assert!(!f.replaced(), "{tamper:?}: the journal was set aside");
            let after = f.stop().await;
            assert_eq!(after, before, "{tamper:?}: the journal changed");
        }
    }
}
