//! Journal following between replicas: the leader serves its journals as streams of stored
//! records; each standby appends them to its own journal, durably and byte for byte, so
//! that whichever replica leads next starts from (nearly) everything the last one wrote.
//!
//! ```text
//!  standby ── GET /replication/challenge?nonce=Ns ──► leader (proves it holds the token)
//!  standby ── GET /replication/<journal>?after=N&checksum=C (a proof, auth.rs) ──► leader
//!          ◄── frames: Reset(snapshot) · Record(seq, bytes)… · Heartbeat(leader's last)
//!          ── POST /replication/<journal>/ack?seq=N ──► (ack mode: appends wait for it)
//! ```
//!
//! A frame is `kind: u8`, `seq: u64 LE`, `len: u32 LE`, then `len` bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

use super::auth::{self, Credentials, Nonces};

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

fn frame(kind: u8, seq: u64, bytes: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(FRAME_HEADER + bytes.len());
    b.extend_from_slice(&[kind]);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    b.extend_from_slice(bytes);
    b.freeze()
}

/// Takes one whole frame off the front of `buf`, if there is one.
fn next_frame(buf: &mut BytesMut) -> Option<(u8, u64, Bytes)> {
    if buf.len() < FRAME_HEADER {
        return None;
    }
    let kind = buf[0];
    let seq = u64::from_le_bytes(buf[1..9].try_into().ok()?);
    let len = u32::from_le_bytes(buf[9..13].try_into().ok()?) as usize;
    if buf.len() < FRAME_HEADER + len {
        return None;
    }
    buf.advance(FRAME_HEADER);
    Some((kind, seq, buf.split_to(len).freeze()))
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
    token: Option<String>,
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
    /// Serves journals to standbys presenting `token`.
    pub fn new(token: Option<String>) -> Replication {
        Replication {
            inner: Arc::new(Inner {
                credentials: token.as_deref().map(Credentials::new),
                token,
                ..Default::default()
            }),
        }
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

    /// Whether a request proves it comes from a holder of the token: a proof over this
    /// request (auth.rs), or the `Bearer` token an older standby sends.
    fn authorized(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
        let (Some(token), Some(credentials)) = (&self.inner.token, &self.inner.credentials) else {
            return false;
        };
        let Some(header) = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        if let Some(given) = header.strip_prefix("Bearer ") {
            return constant_time_eq(given.as_bytes(), token.as_bytes());
        }
        let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
        credentials.is_authorized(header, method.as_str(), path, &self.inner.nonces)
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
}

/// What a leader answers a standby's nonce with.
#[derive(Serialize, serde::Deserialize)]
struct ChallengeAnswer {
    /// Proves this replica holds the token.
    proof: String,
    /// The standby's requests prove themselves over this one.
    nonce: String,
}

/// Proves to a standby that this replica holds the token, and hands it a nonce.
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
    match r.inner.nonces.issue() {
        Ok(nonce) => axum::Json(ChallengeAnswer {
            proof: credentials.leader_proof(&q.nonce),
            nonce,
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
    if !r.authorized(&method, &uri, &headers) {
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
    if !r.authorized(&method, &uri, &headers) {
        return (
            StatusCode::UNAUTHORIZED,
            "a valid journal token is required\n",
        )
            .into_response();
    }
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
        produce(source, start, tx, name).await;
        drop(connected);
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    Response::new(axum::body::Body::from_stream(body))
}

async fn produce(
    source: Arc<dyn Source>,
    start: FollowFrom,
    tx: mpsc::Sender<Bytes>,
    name: String,
) {
    let mut next = match start {
        FollowFrom::Continue(n) => n,
        FollowFrom::Reset(snapshot) => {
            let (seq, bytes) = snapshot.unwrap_or_default();
            tracing::info!(journal = %name, seq, "a standby starts over from this journal's snapshot");
            if tx.send(frame(RESET, seq, &bytes)).await.is_err() {
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
                if tx.send(frame(RECORD, seq, &bytes)).await.is_err() {
                    return;
                }
                next = seq + 1;
                sent = true;
            }
            if !sent {
                return;
            }
        }
        if tx.send(frame(HEARTBEAT, last, &[])).await.is_err() {
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

/// One journal's follower settings.
pub struct FollowArgs {
    /// The journal's name (`modules`, `lambda`, `deployer`).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The leader's journal base URL (`http://host:port`), as it changes.
    pub leader: watch::Receiver<Option<String>>,
    /// The journal token (never sent: the leader proves it holds it, and each request
    /// proves the standby does).
    pub token: String,
    /// The leader is reached through the headless Service (`BOSUN_HA_SERVICE`): a leader
    /// of an older bosun, which cannot answer the challenge, gets the `Bearer` token.
    pub legacy_bearer: bool,
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
        let Some(base) = leader else {
            tokio::select! {
                _ = args.leader.changed() => {}
                _ = args.stop.changed() => {}
            }
            continue;
        };
        let (mut stop, mut moved) = (args.stop.clone(), args.leader.clone());
        let outcome = tokio::select! {
            r = connection::<E>(&client, &base, &args, &mut journal) => Some(r),
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
                if repeated {
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
    base: &str,
    args: &FollowArgs,
    journal: &mut Option<Journal<E>>,
) -> Result<(), FollowError>
where
    E: Serialize + DeserializeOwned + Versioned + Send + Sync + 'static,
{
    let j = journal
        .as_ref()
        .ok_or_else(|| FollowError::Frame("journal closed".into()))?;
    let after = j.last_seq();
    let checksum = j.checksum_at(after)?;
    let auth = authenticate(client, base, args).await?;
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
        while let Some((kind, seq, bytes)) = next_frame(&mut buf) {
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

/// How a standby's requests to a leader prove themselves.
enum Auth {
    /// Over the nonce the leader handed out.
    Proof {
        credentials: Credentials,
        nonce: String,
    },
    /// The token itself, to an older leader reached through the headless Service.
    Bearer(String),
}

impl Auth {
    fn header(&self, method: &str, path_and_query: &str) -> String {
        match self {
            Auth::Proof { credentials, nonce } => {
                credentials.authorization(nonce, method, path_and_query)
            }
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
}

/// Asks the replica at `base` to prove it holds the journal token; nothing derived from
/// the token is sent to one that does not.
async fn authenticate(
    client: &HttpClient,
    base: &str,
    args: &FollowArgs,
) -> Result<Auth, FollowError> {
    let credentials = Credentials::new(&args.token);
    let ours =
        auth::nonce().map_err(|_| FollowError::Http("no random numbers for a nonce".into()))?;
    let url = format!("{base}/replication/challenge?nonce={ours}");
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
    if status == StatusCode::NOT_FOUND && args.legacy_bearer {
        tracing::warn!(journal = %args.name, leader = %base, "the leader does not answer the journal challenge (a bosun before it had one): sending it the token, as it is reached through the headless Service");
        return Ok(Auth::Bearer(args.token.clone()));
    }
    let answer = (status == StatusCode::OK)
        .then(|| serde_json::from_slice::<ChallengeAnswer>(&body).ok())
        .flatten();
    match answer {
        Some(a) if credentials.is_leader_proof(&ours, &a.proof) && auth::is_nonce(&a.nonce) => {
            Ok(Auth::Proof {
                credentials,
                nonce: a.nonce,
            })
        }
        _ => Err(FollowError::NotProven(format!(
            "the replica at {base}, which the Lease names as the leader, did not prove it holds the journal token (it answered {status})"
        ))),
    }
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

    #[test]
    fn frames_come_apart_however_the_bytes_arrive() {
        let mut wire = Vec::new();
        wire.extend_from_slice(&frame(RESET, 7, b"snap"));
        wire.extend_from_slice(&frame(RECORD, 8, b"record eight"));
        wire.extend_from_slice(&frame(HEARTBEAT, 8, b""));
        for split in 0..wire.len() {
            let mut buf = BytesMut::new();
            let mut seen = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                buf.extend_from_slice(part);
                while let Some((k, s, b)) = next_frame(&mut buf) {
                    seen.push((k, s, b.to_vec()));
                }
            }
            assert_eq!(
                seen,
                vec![
                    (RESET, 7, b"snap".to_vec()),
                    (RECORD, 8, b"record eight".to_vec()),
                    (HEARTBEAT, 8, Vec::new()),
                ]
            );
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
