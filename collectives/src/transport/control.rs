//! The control plane's messages and their bytes, without I/O: what a rank tells every peer
//! beside the data (a goodbye, a stall report, an abort), encoded by [`Control::encode`] and
//! taken back from a byte buffer by [`decode`] as it fills. TCP writes these bytes on each
//! peer's control socket; the in-memory twin passes the same bytes between its ranks.
//!
//! ```text
//! goodbye  'G'
//! stall    'S' op:u8 seq:u64 n:u32 waiting_for:[u32; n]
//! abort    'A' origin:u32 lost:u32 (u32::MAX: none) len:u32 reason:[u8; len] (UTF-8, lossy)
//! ```
//!
//! Integers are little-endian. What a peer announces is bounded before anything is buffered for
//! it ([`MAX_RANKS`], [`MAX_REASON`]).

const GOODBYE: u8 = b'G';
const ABORT: u8 = b'A';
const STALL: u8 = b'S';
/// Most ranks a stall report may name.
pub(crate) const MAX_RANKS: usize = 1 << 20;
/// Longest abort reason a peer may announce.
pub(crate) const MAX_REASON: usize = 64 << 10;
/// Longest abort reason this rank sends (longer ones are cut).
const SENT_REASON: usize = 4000;

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Control {
    /// The sender closes its communicator on purpose.
    Goodbye,
    /// The sender has waited half the deadline of call `(op, seq)` for `waiting_for`.
    Stall {
        /// The call's op code.
        op: u8,
        /// The call's sequence number.
        seq: u64,
        /// The ranks it waits for.
        waiting_for: Vec<usize>,
    },
    /// Rank `origin` failed; `lost` is the rank whose loss caused it, if one did.
    Abort {
        /// The rank that failed first.
        origin: usize,
        /// The rank it lost, if that was the cause.
        lost: Option<usize>,
        /// Why, for the error every rank reports.
        reason: String,
    },
}

/// Bytes that are no control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ControlError {
    /// A count over the limit (`what` names the field).
    Oversized {
        /// "stall report" or "abort reason".
        what: &'static str,
        /// The count announced.
        n: usize,
    },
    /// An unknown message tag.
    Garbage(u8),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Oversized { what, n } => write!(
                f,
                "control socket announced a {what} of {n} entries, over the limit"
            ),
            ControlError::Garbage(b) => write!(f, "garbage on control socket (byte {b:#x})"),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Control {
    /// The message's bytes (an abort's reason cut to 4000 bytes).
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Control::Goodbye => vec![GOODBYE],
            Control::Stall {
                op,
                seq,
                waiting_for,
            } => {
                let mut m = Vec::with_capacity(14 + 4 * waiting_for.len());
                m.extend_from_slice(&[STALL, *op]);
                m.extend_from_slice(&seq.to_le_bytes());
                m.extend_from_slice(&(waiting_for.len() as u32).to_le_bytes());
                for w in waiting_for {
                    m.extend_from_slice(&(*w as u32).to_le_bytes());
                }
                m
            }
            Control::Abort {
                origin,
                lost,
                reason,
            } => {
                let r = reason.as_bytes();
                let r = &r[..r.len().min(SENT_REASON)];
                let mut m = Vec::with_capacity(13 + r.len());
                m.push(ABORT);
                m.extend_from_slice(&(*origin as u32).to_le_bytes());
                m.extend_from_slice(&lost.map_or(u32::MAX, |l| l as u32).to_le_bytes());
                m.extend_from_slice(&(r.len() as u32).to_le_bytes());
                m.extend_from_slice(r);
                m
            }
        }
    }
}

/// The first message in `buf` and the bytes it took, `Ok(None)` while `buf` holds only part
/// of one (read more and call again), or why `buf` holds no control message.
pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Control, usize)>, ControlError> {
    let Some(&tag) = buf.first() else {
        return Ok(None);
    };
    match tag {
        GOODBYE => Ok(Some((Control::Goodbye, 1))),
        STALL => {
            if buf.len() < 14 {
                return Ok(None);
            }
            let n = u32_at(buf, 10) as usize;
            if n > MAX_RANKS {
                return Err(ControlError::Oversized {
                    what: "stall report",
                    n,
                });
            }
            let len = 14 + 4 * n;
            if buf.len() < len {
                return Ok(None);
            }
            let msg = Control::Stall {
                op: buf[1],
                seq: u64::from_le_bytes(buf[2..10].try_into().expect("8 bytes")),
                waiting_for: (0..n).map(|i| u32_at(buf, 14 + 4 * i) as usize).collect(),
            };
            Ok(Some((msg, len)))
        }
        ABORT => {
            if buf.len() < 13 {
                return Ok(None);
            }
            let n = u32_at(buf, 9) as usize;
            if n > MAX_REASON {
                return Err(ControlError::Oversized {
                    what: "abort reason",
                    n,
                });
            }
            if buf.len() < 13 + n {
                return Ok(None);
            }
            let lost = u32_at(buf, 5);
            let msg = Control::Abort {
                origin: u32_at(buf, 1) as usize,
                lost: (lost != u32::MAX).then_some(lost as usize),
                reason: String::from_utf8_lossy(&buf[13..13 + n]).into_owned(),
            };
            Ok(Some((msg, 13 + n)))
        }
        other => Err(ControlError::Garbage(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Control> {
        vec![
            Control::Goodbye,
            Control::Stall {
                op: 3,
                seq: u64::MAX - 1,
                waiting_for: vec![0, 7, 4095],
            },
            Control::Stall {
                op: 0,
                seq: 0,
                waiting_for: vec![],
            },
            Control::Abort {
                origin: 5,
                lost: Some(2),
                reason: "rank 5: rank 2 was lost during all_reduce(seq 9)".into(),
            },
            Control::Abort {
                origin: 0,
                lost: None,
                reason: String::new(),
            },
        ]
    }

    #[test]
    fn every_message_decodes_to_itself_and_a_prefix_asks_for_more() {
        for m in samples() {
            let b = m.encode();
            assert_eq!(decode(&b), Ok(Some((m.clone(), b.len()))));
            for cut in 0..b.len() {
                assert_eq!(decode(&b[..cut]), Ok(None), "{m:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn messages_back_to_back_decode_in_order() {
        let all: Vec<u8> = samples().iter().flat_map(Control::encode).collect();
        let (mut at, mut got) = (0, Vec::new());
        while let Some((m, n)) = decode(&all[at..]).unwrap() {
            got.push(m);
            at += n;
        }
        assert_eq!((got, at), (samples(), all.len()));
    }

    #[test]
    fn oversized_counts_and_unknown_tags_are_refused_before_buffering() {
        let mut stall = vec![STALL, 0];
        stall.extend_from_slice(&0u64.to_le_bytes());
        stall.extend_from_slice(&(MAX_RANKS as u32 + 1).to_le_bytes());
        assert!(matches!(
            decode(&stall),
            Err(ControlError::Oversized {
                what: "stall report",
                ..
            })
        ));
        let mut abort = vec![ABORT];
        abort.extend_from_slice(&[0; 8]);
        abort.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&abort),
            Err(ControlError::Oversized {
                what: "abort reason",
                ..
            })
        ));
        assert_eq!(decode(b"X"), Err(ControlError::Garbage(b'X')));
        assert_eq!(
            ControlError::Garbage(b'X').to_string(),
            "garbage on control socket (byte 0x58)"
        );
    }

    #[test]
    fn long_reasons_are_cut_when_sent() {
        let m = Control::Abort {
            origin: 1,
            lost: None,
            reason: "x".repeat(10_000),
        };
        let Some((Control::Abort { reason, .. }, _)) = decode(&m.encode()).unwrap() else {
            panic!("an abort");
        };
        assert_eq!(reason.len(), SENT_REASON);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_never_take_more_than_they_have() {
        // A small deterministic generator (xorshift): every length 0..64, many seeds, biased
        // towards the three tags so the length fields get exercised.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(first) = b.first_mut() {
                *first = [GOODBYE, STALL, ABORT, *first][(next() % 4) as usize];
            }
            if let Ok(Some((m, n))) = decode(&b) {
                assert!(n <= b.len());
                assert_eq!(decode(&m.encode()).unwrap().unwrap().0, m);
            }
        }
    }
}
