//! How a standby and the leader prove to each other that they hold the journal token,
//! without the token ever crossing the wire.
//!
//! ```text
//!  standby ── GET /replication/challenge?nonce=Ns ──────────────────────────► leader
//!          ◄── {"proof": HMAC(token, "leader" Ns), "nonce": Nl} ──────────────
//!          (the standby checks the proof: a replica that cannot make it, such as an
//!           address a forged Lease names, gets nothing more)
//!          ── GET /replication/modules?after=…
//!             Authorization: Bosun-Journal nonce=Nl, proof=HMAC(token, "standby" Nl
//!             METHOD path?query) ─────────────────────────────────────────────►
//! ```
//!
//! The leader remembers the nonces it handed out for [`NONCE_TTL`] (at most
//! [`NONCES_KEPT`]), so a standby's acknowledgements reuse its connection's nonce; each
//! proof is bound to the request's method, path and query. A leader also takes the
//! `Bearer` token older standbys send.

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

impl Credentials {
    /// The credentials of `token`.
    pub fn new(token: &str) -> Credentials {
        Credentials {
            key: hmac::Key::new(hmac::HMAC_SHA256, token.as_bytes()),
        }
    }

    fn sign(&self, parts: &[&str]) -> String {
        hex(hmac::sign(&self.key, parts.join("\n").as_bytes()).as_ref())
    }

    fn check(&self, parts: &[&str], proof: &str) -> bool {
        unhex(proof)
            .is_some_and(|p| hmac::verify(&self.key, parts.join("\n").as_bytes(), &p).is_ok())
    }

    /// The leader's answer to a standby's nonce.
    pub fn leader_proof(&self, standby_nonce: &str) -> String {
        self.sign(&["bosun-journal-leader", standby_nonce])
    }

    /// Whether a replica's answer to our nonce proves it holds the token.
    pub fn is_leader_proof(&self, standby_nonce: &str, proof: &str) -> bool {
        self.check(&["bosun-journal-leader", standby_nonce], proof)
    }

    /// The `Authorization` header of a standby's request (`path_and_query` as sent).
    pub fn authorization(&self, leader_nonce: &str, method: &str, path_and_query: &str) -> String {
        let proof = self.sign(&[
            "bosun-journal-standby",
            leader_nonce,
            method,
            path_and_query,
        ]);
        format!("{SCHEME} nonce={leader_nonce}, proof={proof}")
    }

    /// Whether an `Authorization` header proves its sender holds the token for this request,
    /// with a nonce `nonces` handed out.
    pub fn is_authorized(
        &self,
        header: &str,
        method: &str,
        path_and_query: &str,
        nonces: &Nonces,
    ) -> bool {
        let Some(params) = header.strip_prefix(SCHEME).map(str::trim_start) else {
            return false;
        };
        let mut nonce = None;
        let mut proof = None;
        for part in params.split(',') {
            match part.trim().split_once('=') {
                Some(("nonce", v)) => nonce = Some(v),
                Some(("proof", v)) => proof = Some(v),
                _ => return false,
            }
        }
        let (Some(nonce), Some(proof)) = (nonce, proof) else {
            return false;
        };
        nonces.is_live(nonce)
            && self.check(
                &["bosun-journal-standby", nonce, method, path_and_query],
                proof,
            )
    }
}

/// The nonces a leader handed out, while they may be used.
#[derive(Default)]
pub struct Nonces {
    issued: Mutex<VecDeque<(String, Instant)>>,
}

impl Nonces {
    /// Hands out a fresh nonce.
    pub fn issue(&self) -> Result<String, ring::error::Unspecified> {
        let n = nonce()?;
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        while issued
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > NONCE_TTL)
            || issued.len() >= NONCES_KEPT
        {
            issued.pop_front();
        }
        issued.push_back((n.clone(), now));
        Ok(n)
    }

    fn is_live(&self, nonce: &str) -> bool {
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued
            .iter()
            .any(|(n, at)| n == nonce && at.elapsed() <= NONCE_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_s_holder_makes_the_proofs_and_they_are_bound_to_the_request() {
        let ours = Credentials::new("journal-secret");
        let theirs = Credentials::new("a guess");
        let ns = nonce().expect("nonce");
        assert!(is_nonce(&ns));
        assert!(ours.is_leader_proof(&ns, &ours.leader_proof(&ns)));
        assert!(!ours.is_leader_proof(&ns, &theirs.leader_proof(&ns)));
        assert!(!ours.is_leader_proof(&ns, "zz"));

        let nonces = Nonces::default();
        let nl = nonces.issue().expect("nonce");
        let path = "/replication/modules?after=3";
        let header = ours.authorization(&nl, "GET", path);
        assert!(!header.contains("journal-secret"));
        assert!(ours.is_authorized(&header, "GET", path, &nonces));
        // Another request, another journal, a guessed token, a nonce never issued.
        assert!(!ours.is_authorized(&header, "POST", path, &nonces));
        assert!(!ours.is_authorized(&header, "GET", "/replication/lambda?after=3", &nonces));
        let guessed = theirs.authorization(&nl, "GET", path);
        assert!(!ours.is_authorized(&guessed, "GET", path, &nonces));
        let unissued = ours.authorization(&nonce().expect("nonce"), "GET", path);
        assert!(!ours.is_authorized(&unissued, "GET", path, &nonces));
        assert!(!ours.is_authorized("Bearer journal-secret", "GET", path, &nonces));
    }

    #[test]
    fn a_leader_keeps_a_bounded_number_of_nonces() {
        let nonces = Nonces::default();
        let first = nonces.issue().expect("nonce");
        for _ in 0..NONCES_KEPT {
            nonces.issue().expect("nonce");
        }
        assert!(!nonces.is_live(&first), "the oldest went first");
        assert_eq!(
            nonces.issued.lock().map(|i| i.len()).unwrap_or(0),
            NONCES_KEPT
        );
    }
}
