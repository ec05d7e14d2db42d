//! [`Communicator::subset`]: a communicator of some of a communicator's ranks (Horovod's
//! process sets, `MPI_Comm_create_group`). Every rank of the parent calls it with the same
//! list; the members bind a data listener, the parent all-gathers each rank's list and
//! address (and rank 0's fresh link secret), and the members connect as from a welcome. No
//! store is involved.

use ring::rand::{SecureRandom, SystemRandom};

use super::Communicator;
use crate::bootstrap::welcome::{DataListener, RoundPeers};
use crate::error::CommError;

/// One rank's part of the exchange: the ranks it was given, where it listens (empty when not
/// a member) and a secret (rank 0's is used).
fn encode(ranks: &[usize], addr: &str, secret: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + ranks.len() * 8 + addr.len() + 32);
    out.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
    for r in ranks {
        out.extend_from_slice(&(*r as u64).to_le_bytes());
    }
    out.extend_from_slice(&(addr.len() as u32).to_le_bytes());
    out.extend_from_slice(addr.as_bytes());
    out.extend_from_slice(secret);
    out
}

type Part = (Vec<usize>, String, [u8; 32]);

fn decode(b: &[u8]) -> Option<Part> {
    let u32_at = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let n = u32_at(0)?;
    let mut at = 4;
    let mut ranks = Vec::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        ranks.push(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?) as usize);
        at += 8;
    }
    let len = u32_at(at)?;
    at += 4;
    let addr = String::from_utf8(b.get(at..at + len)?.to_vec()).ok()?;
    at += len;
    let secret: [u8; 32] = b.get(at..at + 32)?.try_into().ok()?;
    (at + 32 == b.len()).then_some((ranks, addr, secret))
}

impl Communicator {
    /// Collective over this communicator: a new communicator of `ranks` (ranks of this one;
    /// rank `i` of the new one is `ranks[i]`), named `name` in its links' handshakes and in
    /// errors. Every rank must call it with the same list; the ranks not in it take part and
    /// get `None`. Fails on every rank, naming the ranks, when the lists differ, and when
    /// `ranks` is empty, repeats a rank or names one outside this communicator.
    pub fn subset(&self, ranks: &[usize], name: &str) -> Result<Option<Communicator>, CommError> {
        let (me, world) = (self.rank(), self.world());
        let start = std::time::Instant::now();
        let fail = |detail: String| CommError::Setup {
            rank: me,
            elapsed: start.elapsed(),
            detail: format!("process set {name:?} {ranks:?}: {detail}"),
        };
        let mut seen = vec![false; world];
        for &r in ranks {
            if r >= world || std::mem::replace(&mut seen[r], true) {
                return Err(fail(format!(
                    "rank {r} is outside this communicator of {world} ranks or named twice"
                )));
            }
        }
        if ranks.is_empty() {
            return Err(fail("a process set has at least one rank".into()));
        }
        let listener = match ranks.iter().position(|r| *r == me) {
            Some(_) => Some(DataListener::bind_like(self.config())?),
            None => None,
        };
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| fail("no randomness for the link secret".into()))?;
        let addr = listener
            .as_ref()
            .map_or_else(String::new, |l| l.addr().to_string());
        let mine = encode(ranks, &addr, &secret);
        let mut sizes = vec![0i64; world];
        self.all_gather(&[mine.len() as i64], &mut sizes)?;
        let counts: Vec<usize> = sizes.iter().map(|s| *s as usize).collect();
        let mut all = vec![0u8; counts.iter().sum()];
        self.all_gather_v(&mine, &mut all, &counts)?;
        let mut parts = Vec::with_capacity(world);
        let mut at = 0;
        for (r, c) in counts.iter().enumerate() {
            let part = decode(&all[at..at + c])
                .ok_or_else(|| fail(format!("rank {r}'s process-set message is malformed")))?;
            if part.0 != ranks {
                return Err(fail(format!(
                    "rank {r} gave ranks {:?}: every rank must give the same list",
                    part.0
                )));
            }
            parts.push(part);
            at += c;
        }
        let group = self.next_subgroup(ranks);
        let Some(listener) = listener else {
            return Ok(None);
        };
        let mut addrs = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let a = parts[r]
                .1
                .parse()
                .map_err(|e| fail(format!("rank {r}'s data address {:?}: {e}", parts[r].1)))?;
            addrs.push(Some(a));
        }
        let peers = RoundPeers {
            job: name.to_owned(),
            round: 1,
            rank: ranks.iter().position(|r| *r == me).expect("a member"),
            world: ranks.len(),
            addrs,
            hosts: Vec::new(),
        };
        let comm = Communicator::from_welcome(listener, &peers, &parts[0].2)?;
        let _ = comm.inner.flight.set(group);
        Ok(Some(comm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_round_trips_and_a_truncated_one_is_refused() {
        let b = encode(&[2, 0, 5], "10.0.0.1:4000", &[7; 32]);
        assert_eq!(
            decode(&b),
            Some((vec![2, 0, 5], "10.0.0.1:4000".to_string(), [7; 32]))
        );
        assert_eq!(decode(&b[..b.len() - 1]), None);
        assert_eq!(decode(&[]), None);
    }
}
