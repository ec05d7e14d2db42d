//! The data-plane handshake, sans IO: the bytes each side sends and the checks on what it
//! receives. A connection proves that both ends hold the secret of one *context* (a native
//! job's round, or a store prefix and generation) with HMAC-SHA256 over a transcript that
//! carries a fresh nonce from each side, so a replayed hello proves nothing.
//!
//! ```text
//! connector -> acceptor  HELLO     "DTH2" version context[32] rank world stream nsocks nonce_c[16]
//! acceptor  -> connector CHALLENGE "DTC2" rank world nonce_a[16] mac_a[32]
//! connector -> acceptor  PROOF     mac_c[32]
//! acceptor  -> connector ACK       "DTCA"
//! mac_a = HMAC(secret, "dtcomm hello v2 acceptor\0"  || HELLO || CHALLENGE[..28])
//! mac_c = HMAC(secret, "dtcomm hello v2 connector\0" || HELLO || CHALLENGE[..28])
//! ```
//!
//! Integers are little-endian `u32`. Rank and world of both sides are covered by the MACs, so
//! once a side has verified the other's MAC it may trust them (and fail on a world mismatch).

use ring::{digest, hmac, rand::SecureRandom};

/// Bytes of a hello.
pub(crate) const HELLO_LEN: usize = 4 + 4 + 32 + 4 * 4 + 16;
/// Bytes of a challenge.
pub(crate) const CHALLENGE_LEN: usize = 4 + 4 + 4 + 16 + 32;
/// Bytes of a proof.
pub(crate) const PROOF_LEN: usize = 32;
/// The acceptor's last word: the stream is taken.
pub(crate) const ACK: &[u8; 4] = b"DTCA";

const HELLO_MAGIC: &[u8; 4] = b"DTH2";
const CHALLENGE_MAGIC: &[u8; 4] = b"DTC2";
const VERSION: u32 = 2;
const ACCEPTOR: &[u8] = b"dtcomm hello v2 acceptor\0";
const CONNECTOR: &[u8] = b"dtcomm hello v2 connector\0";

/// What both ends of every link share: a secret and the context it is for.
#[derive(Clone)]
pub struct Auth {
    key: hmac::Key,
    context: [u8; 32],
    /// The context in words, for logs and errors.
    pub(crate) label: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth({})", self.label)
    }
}

impl Auth {
    /// The proof key `secret` for links of `label` (a job and round, a store prefix and
    /// generation): two ends with different labels never accept each other.
    pub fn new(secret: &[u8], label: impl Into<String>) -> Auth {
        let label = label.into();
        let mut context = [0u8; 32];
        context.copy_from_slice(digest::digest(&digest::SHA256, label.as_bytes()).as_ref());
        Auth {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            context,
            label,
        }
    }

    fn mac(&self, role: &[u8], hello: &[u8], challenge_head: &[u8]) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(role);
        ctx.update(hello);
        ctx.update(challenge_head);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    fn verify(&self, role: &[u8], hello: &[u8], challenge_head: &[u8], tag: &[u8]) -> bool {
        let msg = [role, hello, challenge_head].concat();
        hmac::verify(&self.key, &msg, tag).is_ok()
    }
}

/// 16 random bytes (a nonce).
pub(crate) fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut n)
        .expect("the system random source works");
    n
}

/// 32 random bytes (a secret).
pub(crate) fn secret() -> [u8; 32] {
    let mut n = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut n)
        .expect("the system random source works");
    n
}

/// One side's view of itself: rank, world, and which stream this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub rank: usize,
    pub world: usize,
    pub stream: usize,
    pub nsocks: usize,
}

fn u32_at(b: &[u8], i: usize) -> usize {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize
}

/// The connector's first message.
pub(crate) fn hello(auth: &Auth, me: Hello, nonce_c: [u8; 16]) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    b[..4].copy_from_slice(HELLO_MAGIC);
    b[4..8].copy_from_slice(&VERSION.to_le_bytes());
    b[8..40].copy_from_slice(&auth.context);
    for (i, v) in [me.rank, me.world, me.stream, me.nsocks]
        .into_iter()
        .enumerate()
    {
        b[40 + 4 * i..44 + 4 * i].copy_from_slice(&(v as u32).to_le_bytes());
    }
    b[56..72].copy_from_slice(&nonce_c);
    b
}

/// Why an acceptor drops a connection without failing (not a member of this context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Drop {
    /// Not a dtcomm hello (bad magic or version).
    NotDtcomm,
    /// A dtcomm hello for another job, round, store prefix or generation.
    OtherContext,
    /// The proof did not verify (a wrong secret, or a replayed hello).
    BadProof,
}

impl std::fmt::Display for Drop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Drop::NotDtcomm => "not a dtcomm hello",
            Drop::OtherContext => "a hello for another job/round or store generation",
            Drop::BadProof => "a hello whose proof of membership did not verify",
        })
    }
}

/// Acceptor: reads a hello (unproven yet) and answers with a challenge.
pub(crate) fn challenge(
    auth: &Auth,
    hello: &[u8; HELLO_LEN],
    me: Hello,
    nonce_a: [u8; 16],
) -> Result<(Hello, [u8; CHALLENGE_LEN]), Drop> {
    if &hello[..4] != HELLO_MAGIC || u32_at(hello, 4) != VERSION as usize {
        return Err(Drop::NotDtcomm);
    }
    if hello[8..40] != auth.context {
        return Err(Drop::OtherContext);
    }
    let them = Hello {
        rank: u32_at(hello, 40),
        world: u32_at(hello, 44),
        stream: u32_at(hello, 48),
        nsocks: u32_at(hello, 52),
    };
    let mut c = [0u8; CHALLENGE_LEN];
    c[..4].copy_from_slice(CHALLENGE_MAGIC);
    c[4..8].copy_from_slice(&(me.rank as u32).to_le_bytes());
    c[8..12].copy_from_slice(&(me.world as u32).to_le_bytes());
    c[12..28].copy_from_slice(&nonce_a);
    let mac = auth.mac(ACCEPTOR, hello, &c[..28]);
    c[28..].copy_from_slice(&mac);
    Ok((them, c))
}

/// Connector: checks the acceptor's challenge; returns the acceptor's (rank, world), now
/// proven, and the proof to send.
pub(crate) fn prove(
    auth: &Auth,
    hello: &[u8; HELLO_LEN],
    challenge: &[u8; CHALLENGE_LEN],
) -> Result<((usize, usize), [u8; PROOF_LEN]), Drop> {
    if &challenge[..4] != CHALLENGE_MAGIC {
        return Err(Drop::NotDtcomm);
    }
    if !auth.verify(ACCEPTOR, hello, &challenge[..28], &challenge[28..]) {
        return Err(Drop::BadProof);
    }
    let them = (u32_at(challenge, 4), u32_at(challenge, 8));
    Ok((them, auth.mac(CONNECTOR, hello, &challenge[..28])))
}

/// Acceptor: checks the connector's proof.
pub(crate) fn check(
    auth: &Auth,
    hello: &[u8; HELLO_LEN],
    challenge: &[u8; CHALLENGE_LEN],
    proof: &[u8; PROOF_LEN],
) -> Result<(), Drop> {
    if auth.verify(CONNECTOR, hello, &challenge[..28], proof) {
        Ok(())
    } else {
        Err(Drop::BadProof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(rank: usize) -> Hello {
        Hello {
            rank,
            world: 2,
            stream: 0,
            nsocks: 1,
        }
    }

    #[test]
    fn members_prove_themselves_to_each_other() {
        let a = Auth::new(b"s", "job j round 1");
        let h = hello(&a, me(1), nonce());
        let (them, c) = challenge(&a, &h, me(0), nonce()).unwrap();
        assert_eq!(them, me(1));
        let ((r, w), p) = prove(&a, &h, &c).unwrap();
        assert_eq!((r, w), (0, 2));
        assert_eq!(check(&a, &h, &c, &p), Ok(()));
    }

    #[test]
    fn strangers_replays_and_other_rounds_are_dropped() {
        let a = Auth::new(b"s", "job j round 1");
        let h = hello(&a, me(1), nonce());
        assert_eq!(
            challenge(&a, &[0u8; HELLO_LEN], me(0), nonce()).unwrap_err(),
            Drop::NotDtcomm
        );
        let other = Auth::new(b"s", "job j round 2");
        assert_eq!(
            challenge(&other, &h, me(0), nonce()).unwrap_err(),
            Drop::OtherContext
        );
        // A wrong secret with the right context: the acceptor's proof fails for the connector
        // and the connector's for the acceptor.
        let wrong = Auth::new(b"t", "job j round 1");
        let (_, c) = challenge(&a, &h, me(0), nonce()).unwrap();
        assert_eq!(prove(&wrong, &h, &c).unwrap_err(), Drop::BadProof);
        let (_, p_wrong) = prove(&a, &h, &c).map(|(_, p)| ((), p)).unwrap();
        let (_, c2) = challenge(&a, &h, me(0), nonce()).unwrap();
        // Replay: a proof recorded for one challenge does not answer a fresh one.
        assert_eq!(check(&a, &h, &c2, &p_wrong).unwrap_err(), Drop::BadProof);
    }
}
