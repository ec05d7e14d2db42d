//! Asks to dump that leave through a store. In a native round the rendezvous session carries
//! a timed-out rank's ask to the others (`RoundFence::ask_dump`); where ranks meet through a
//! store (torchrun, `env://`) nothing does, so the ask waits here until the front end's
//! publisher (Python's `_progress.Publisher`, once a second) posts it to the store, where the
//! other ranks' publishers see it and dump ([`super::on_peer_timeout`]), as torch's watchdogs
//! do through its `exception_dump` key. The latest ask wins; one is taken once.

use std::sync::Mutex;

use dt_rdzv_proto::native::MAX_DUMP_REASON_BYTES;

/// A rank's call timed out and it dumped: the others should too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpAsk {
    /// The global rank whose call timed out.
    pub rank: u32,
    /// Its error, cut to [`MAX_DUMP_REASON_BYTES`] at a character boundary.
    pub why: String,
}

/// Where asks wait: the latest one, taken once.
#[derive(Debug, Default)]
pub(crate) struct Outbox(Mutex<Option<DumpAsk>>);

impl Outbox {
    /// An empty outbox.
    pub(crate) const fn new() -> Outbox {
        Outbox(Mutex::new(None))
    }

    /// Leaves an ask (replacing one not yet taken).
    pub(crate) fn post(&self, rank: u32, why: &str) {
        let mut cut = why.len().min(MAX_DUMP_REASON_BYTES);
        while !why.is_char_boundary(cut) {
            cut -= 1;
        }
        let ask = DumpAsk {
            rank,
            why: why[..cut].to_owned(),
        };
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(ask);
    }

    /// The ask not yet taken, if any.
    pub(crate) fn take(&self) -> Option<DumpAsk> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// This process's outbox.
pub(crate) static OUTBOX: Outbox = Outbox::new();

/// The ask not yet posted to the store, if any (taken: the next call returns `None` until a
/// call times out again).
pub fn take_dump_ask() -> Option<DumpAsk> {
    OUTBOX.take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_ask_is_taken_once_and_cut_at_a_character_boundary() {
        let o = Outbox::new();
        assert_eq!(o.take(), None);
        o.post(1, "first");
        o.post(2, &"é".repeat(MAX_DUMP_REASON_BYTES));
        let ask = o.take().expect("an ask");
        assert_eq!(ask.rank, 2);
        assert!(ask.why.len() <= MAX_DUMP_REASON_BYTES && ask.why.chars().all(|c| c == 'é'));
        assert!(ask.why.len() > MAX_DUMP_REASON_BYTES - 2);
        assert_eq!(o.take(), None);
    }
}
