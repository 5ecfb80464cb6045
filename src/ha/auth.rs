//! How a standby and the leader prove to each other that they hold the journal token,
//! without the token ever crossing the wire, and how every frame of the stream proves it
//! comes from that leader, in that session, at that place.
//!
//! ```text
//!  standby S ── GET /replication/challenge?nonce=Ns&standby=S&leader=H ────────► leader
//!            (H: the Lease's holder; a replica answers only while it leads, and only
//!             when H is its own identity)
//!            ◄── {"version": 2, "nonce": Nl, "proof": HMAC(token, leader H S Ns Nl)} ──
//!            (the standby checks the proof: a replica that cannot make it, such as an
//!             address a forged Lease names relaying to a replica that does not hold
//!             the Lease, gets nothing more)
//!          ── GET /replication/modules?after=…
//!             Authorization: Bosun-Journal nonce=Nl, proof=HMAC(token, standby Nl
//!             METHOD path?query) ─────────────────────────────────────────────►
//!          ◄── frames, each with HMAC(K, position kind seq len bytes), where
//!              K = HMAC(token, frames H S Ns Nl journal)
//! ```
//!
//! The leader remembers the sessions it opened (its nonce, the standby and the standby's
//! nonce) for [`NONCE_TTL`] (at most [`NONCES_KEPT`]), so a standby's acknowledgements
//! reuse its connection's nonce; each request's proof is bound to its method, path and
//! query. Each part of a signed message is prefixed with its length, so no choice of
//! identities makes two different messages sign alike.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// How long a leader's nonce may be used.
pub const NONCE_TTL: Duration = Duration::from_secs(600);
/// How many nonces a leader keeps (the oldest goes first).
pub const NONCES_KEPT: usize = 1024;
/// The scheme of the `Authorization` header.
pub const SCHEME: &str = "Bosun-Journal";
/// The version of this protocol, in the challenge's answer. A replica of an older bosun
/// answers without it (and with a proof this one does not take).
pub const VERSION: u32 = 2;
/// A frame's tag's length in bytes.
pub const TAG_BYTES: usize = 32;

/// A nonce's length in bytes (hex on the wire).
const NONCE_BYTES: usize = 16;

/// What a replica holding the token can prove with it.
#[derive(Clone)]
pub struct Credentials {
    key: hmac::Key,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// A fresh random nonce, as hex.
pub fn nonce() -> Result<String, ring::error::Unspecified> {
    let mut bytes = [0u8; NONCE_BYTES];
    SystemRandom::new().fill(&mut bytes)?;
    Ok(hex(&bytes))
}

/// Whether `text` has the form of a nonce (what a leader accepts from a standby).
pub fn is_nonce(text: &str) -> bool {
    text.len() == NONCE_BYTES * 2 && unhex(text).is_some()
}

/// `parts`, each prefixed with its length: no two lists of parts give the same bytes.
fn message(parts: &[&str]) -> Vec<u8> {
    let mut m = Vec::with_capacity(parts.iter().map(|p| 8 + p.len()).sum());
    for p in parts {
        m.extend_from_slice(&(p.len() as u64).to_le_bytes());
        m.extend_from_slice(p.as_bytes());
    }
    m
}

/// One session between a standby and the leader: who is on each end and the nonces each
/// chose. Everything the leader proves in it, and every frame it sends, is bound to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The leader's identity, as the Lease names its holder.
    pub leader: String,
    /// The standby's identity.
    pub standby: String,
    /// The standby's nonce (its challenge).
    pub standby_nonce: String,
    /// The leader's nonce (its answer).
    pub leader_nonce: String,
}

impl Credentials {
    /// The credentials of `token`.
    pub fn new(token: &str) -> Credentials {
        Credentials {
            key: hmac::Key::new(hmac::HMAC_SHA256, token.as_bytes()),
        }
    }

    fn sign(&self, parts: &[&str]) -> String {
        hex(hmac::sign(&self.key, &message(parts)).as_ref())
    }

    fn check(&self, parts: &[&str], proof: &str) -> bool {
        unhex(proof).is_some_and(|p| hmac::verify(&self.key, &message(parts), &p).is_ok())
    }

    fn session_parts<'a>(label: &'a str, s: &'a Session) -> [&'a str; 5] {
        [
            label,
            &s.leader,
            &s.standby,
            &s.standby_nonce,
            &s.leader_nonce,
        ]
    }

    /// The leader's answer to a standby's challenge: it holds the token, it is the holder
    /// `session.leader`, and it answers this standby's nonce.
    pub fn leader_proof(&self, session: &Session) -> String {
        self.sign(&Self::session_parts("bosun-journal-2 leader", session))
    }

    /// Whether a replica's answer to our challenge proves it holds the token, for this
    /// session (the holder we asked for, ourselves, our nonce and the one it chose).
    pub fn is_leader_proof(&self, session: &Session, proof: &str) -> bool {
        self.check(
            &Self::session_parts("bosun-journal-2 leader", session),
            proof,
        )
    }

    /// The key that tags the frames of `journal`'s stream in `session`.
    pub fn frame_key(&self, session: &Session, journal: &str) -> FrameKey {
        let [label, leader, standby, ns, nl] =
            Self::session_parts("bosun-journal-2 frames", session);
        let derived = hmac::sign(
            &self.key,
            &message(&[label, leader, standby, ns, nl, journal]),
        );
        FrameKey {
            key: hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()),
        }
    }

    /// The `Authorization` header of a standby's request (`path_and_query` as sent).
    pub fn authorization(&self, leader_nonce: &str, method: &str, path_and_query: &str) -> String {
        let proof = self.sign(&[
            "bosun-journal-2 standby",
            leader_nonce,
            method,
            path_and_query,
        ]);
        format!("{SCHEME} nonce={leader_nonce}, proof={proof}")
    }

    /// The session of a request whose `Authorization` header proves its sender holds the
    /// token, for this request, with a nonce `sessions` handed out; `None` otherwise.
    pub fn authorized(
        &self,
        header: &str,
        method: &str,
        path_and_query: &str,
        sessions: &Nonces,
    ) -> Option<Session> {
        let params = header.strip_prefix(SCHEME).map(str::trim_start)?;
        let mut nonce = None;
        let mut proof = None;
        for part in params.split(',') {
            match part.trim().split_once('=') {
                Some(("nonce", v)) => nonce = Some(v),
                Some(("proof", v)) => proof = Some(v),
                _ => return None,
            }
        }
        let (nonce, proof) = (nonce?, proof?);
        let session = sessions.live(nonce)?;
        self.check(
            &["bosun-journal-2 standby", nonce, method, path_and_query],
            proof,
        )
        .then_some(session)
    }
}

/// Tags the frames of one journal's stream in one session: a frame's tag covers its
/// position in the stream, its kind, its sequence number and its bytes.
#[derive(Clone)]
pub struct FrameKey {
    key: hmac::Key,
}

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

fn frame_message(position: u64, kind: u8, seq: u64, bytes: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(8 + 1 + 8 + 8 + bytes.len());
    m.extend_from_slice(&position.to_le_bytes());
    m.push(kind);
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    m.extend_from_slice(bytes);
    m
}

impl FrameKey {
    /// The tag of the frame at `position` (0 for the stream's first).
    pub fn tag(&self, position: u64, kind: u8, seq: u64, bytes: &[u8]) -> [u8; TAG_BYTES] {
        let mut tag = [0u8; TAG_BYTES];
        let signed = hmac::sign(&self.key, &frame_message(position, kind, seq, bytes));
        tag.copy_from_slice(signed.as_ref());
        tag
    }

    /// Whether `tag` is the tag of this frame at `position` (in constant time).
    pub fn verify(&self, position: u64, kind: u8, seq: u64, bytes: &[u8], tag: &[u8]) -> bool {
        hmac::verify(&self.key, &frame_message(position, kind, seq, bytes), tag).is_ok()
    }
}

/// The sessions a leader opened (by its nonce), while they may be used.
#[derive(Default)]
pub struct Nonces {
    issued: Mutex<VecDeque<(Session, Instant)>>,
}

impl Nonces {
    /// Opens a session with the standby `standby`, which asked with `standby_nonce`, for
    /// the holder `leader`: a fresh nonce of the leader's.
    pub fn issue(
        &self,
        leader: &str,
        standby: &str,
        standby_nonce: &str,
    ) -> Result<Session, ring::error::Unspecified> {
        let session = Session {
            leader: leader.to_string(),
            standby: standby.to_string(),
            standby_nonce: standby_nonce.to_string(),
            leader_nonce: nonce()?,
        };
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        while issued
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > NONCE_TTL)
            || issued.len() >= NONCES_KEPT
        {
            issued.pop_front();
        }
        issued.push_back((session.clone(), now));
        Ok(session)
    }

    fn live(&self, nonce: &str) -> Option<Session> {
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued
            .iter()
            .find(|(s, at)| s.leader_nonce == nonce && at.elapsed() <= NONCE_TTL)
            .map(|(s, _)| s.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(leader: &str, standby: &str) -> Session {
        Session {
            leader: leader.into(),
            standby: standby.into(),
            standby_nonce: nonce().expect("nonce"),
            leader_nonce: nonce().expect("nonce"),
        }
    }

    #[test]
    fn only_the_token_s_holder_makes_the_proofs_and_they_are_bound_to_the_session() {
        let ours = Credentials::new("journal-secret");
        let theirs = Credentials::new("a guess");
        let s = session("alpha.10-0-0-1.ns.pod", "bravo.10-0-0-2.ns.pod");
        assert!(is_nonce(&s.standby_nonce));
        assert!(ours.is_leader_proof(&s, &ours.leader_proof(&s)));
        assert!(!ours.is_leader_proof(&s, &theirs.leader_proof(&s)));
        assert!(!ours.is_leader_proof(&s, "zz"));
        // A proof made for another holder, another standby or another nonce proves nothing.
        let proof = ours.leader_proof(&s);
        for other in [
            Session {
                leader: "mallory.10-0-0-5.ns.pod".into(),
                ..s.clone()
            },
            Session {
                standby: "charlie.10-0-0-3.ns.pod".into(),
                ..s.clone()
            },
            Session {
                standby_nonce: nonce().expect("nonce"),
                ..s.clone()
            },
            Session {
                leader_nonce: nonce().expect("nonce"),
                ..s.clone()
            },
        ] {
            assert!(!ours.is_leader_proof(&other, &proof), "{other:?}");
        }
        // Lengths prefix the parts: moving a boundary changes the message.
        let shifted = Session {
            leader: "alpha.10-0-0-1.ns.po".into(),
            standby: "dbravo.10-0-0-2.ns.pod".into(),
            ..s.clone()
        };
        assert!(!ours.is_leader_proof(&shifted, &proof));
    }

    #[test]
    fn a_standby_s_requests_prove_themselves_for_one_request_in_one_session() {
        let ours = Credentials::new("journal-secret");
        let theirs = Credentials::new("a guess");
        let nonces = Nonces::default();
        let s = nonces
            .issue("alpha", "bravo", &nonce().expect("nonce"))
            .expect("session");
        let path = "/replication/modules?after=3";
        let header = ours.authorization(&s.leader_nonce, "GET", path);
        assert!(!header.contains("journal-secret"));
        assert_eq!(
            ours.authorized(&header, "GET", path, &nonces).as_ref(),
            Some(&s)
        );
        // Another request, another journal, a guessed token, a nonce never issued.
        assert!(ours.authorized(&header, "POST", path, &nonces).is_none());
        assert!(
            ours.authorized(&header, "GET", "/replication/lambda?after=3", &nonces)
                .is_none()
        );
        let guessed = theirs.authorization(&s.leader_nonce, "GET", path);
        assert!(ours.authorized(&guessed, "GET", path, &nonces).is_none());
        let unissued = ours.authorization(&nonce().expect("nonce"), "GET", path);
        assert!(ours.authorized(&unissued, "GET", path, &nonces).is_none());
        assert!(
            ours.authorized("Bearer journal-secret", "GET", path, &nonces)
                .is_none()
        );
    }

    #[test]
    fn a_frame_s_tag_binds_its_session_journal_position_and_contents() {
        let ours = Credentials::new("journal-secret");
        let s = session("alpha", "bravo");
        let key = ours.frame_key(&s, "modules");
        let tag = key.tag(3, 1, 8, b"record eight");
        assert!(key.verify(3, 1, 8, b"record eight", &tag));
        assert!(
            !key.verify(4, 1, 8, b"record eight", &tag),
            "another position"
        );
        assert!(!key.verify(3, 2, 8, b"record eight", &tag), "another kind");
        assert!(!key.verify(3, 1, 9, b"record eight", &tag), "another seq");
        assert!(!key.verify(3, 1, 8, b"record nine", &tag), "other bytes");
        assert!(!key.verify(3, 1, 8, b"record eight", &tag[..16]));
        let other_journal = ours.frame_key(&s, "lambda");
        assert!(!other_journal.verify(3, 1, 8, b"record eight", &tag));
        let other_session = ours.frame_key(&session("alpha", "bravo"), "modules");
        assert!(!other_session.verify(3, 1, 8, b"record eight", &tag));
        let guessed = Credentials::new("a guess").frame_key(&s, "modules");
        assert!(!guessed.verify(3, 1, 8, b"record eight", &tag));
    }

    #[test]
    fn a_leader_keeps_a_bounded_number_of_nonces() {
        let nonces = Nonces::default();
        let ns = nonce().expect("nonce");
        let first = nonces.issue("a", "b", &ns).expect("nonce");
        for _ in 0..NONCES_KEPT {
            nonces.issue("a", "b", &ns).expect("nonce");
        }
        assert!(
            nonces.live(&first.leader_nonce).is_none(),
            "the oldest went first"
        );
        assert_eq!(
            nonces.issued.lock().map(|i| i.len()).unwrap_or(0),
            NONCES_KEPT
        );
    }
}
