//! What every step of a communicator's set-up carries: its rank, world, deadline and socket
//! settings, and the errors it fails with (a world-size mismatch names both ranks).

use std::time::{Duration, Instant};

use socket2::SockRef;

use super::handshake::Hello;
use crate::config::Config;
use crate::error::CommError;

/// One rank's set-up: who it is, its deadline and its socket settings.
pub(crate) struct Setup {
    pub rank: usize,
    pub world: usize,
    pub nsocks: usize,
    pub start: Instant,
    pub timeout: Duration,
    pub bufsize: Option<usize>,
}

impl Setup {
    pub(crate) fn new(rank: usize, world: usize, cfg: &Config) -> Setup {
        Setup {
            rank,
            world,
            nsocks: cfg.nsocks_perpeer.value,
            start: Instant::now(),
            timeout: cfg.setup_timeout.value,
            bufsize: cfg.socket_bufsize.value,
        }
    }
    pub(crate) fn err(&self, detail: impl Into<String>) -> CommError {
        CommError::Setup {
            rank: self.rank,
            elapsed: self.start.elapsed(),
            detail: detail.into(),
        }
    }
    /// Fails the set-up when this thread's interrupt check asks (`interrupt.rs`: Ctrl-C in
    /// Python while the ranks meet).
    pub(crate) fn interrupted(&self) -> Result<(), CommError> {
        match crate::interrupt::requested() {
            Some(why) => Err(self.err(format!("interrupted: {why}"))),
            None => Ok(()),
        }
    }
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.timeout
            .checked_sub(self.start.elapsed())
            .filter(|d| !d.is_zero())
    }
    /// Socket buffer sizes, set before connect/listen so the TCP window scale covers them.
    pub(crate) fn size_buffers(&self, s: SockRef<'_>) -> std::io::Result<()> {
        if let Some(b) = self.bufsize {
            s.set_send_buffer_size(b)?;
            s.set_recv_buffer_size(b)?;
        }
        Ok(())
    }
    pub(super) fn me(&self, stream: usize) -> Hello {
        Hello {
            rank: self.rank,
            world: self.world,
            stream,
            nsocks: self.nsocks,
        }
    }
}

/// Two proven members disagree on the world size (or, `their_nsocks` when known, the sockets
/// per peer).
pub(crate) fn mismatch(
    su: &Setup,
    peer: usize,
    their_world: usize,
    their_nsocks: Option<usize>,
) -> CommError {
    su.err(mismatch_detail(su, peer, their_world, their_nsocks))
}

/// What [`mismatch`] says.
pub(crate) fn mismatch_detail(
    su: &Setup,
    peer: usize,
    their_world: usize,
    their_nsocks: Option<usize>,
) -> String {
    let (theirs, mine) = match their_nsocks {
        Some(n) => (
            format!(" ({n} socket(s)/peer)"),
            format!(" ({} socket(s)/peer)", su.nsocks),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        "rank {peer} has world size {their_world}{theirs} but rank {} has world size {}{mine}: \
         every rank must be started with the same world size and DTCOMM_NSOCKS_PERPEER",
        su.rank, su.world
    )
}
