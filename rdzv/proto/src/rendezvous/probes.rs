//! Reports from the data plane and the liveness probes they start.
//!
//! A member whose link to a peer broke reports it ([`ClientMsg::Report`]). A report is
//! evidence, never a verdict: the server sends the named member a [`ServerMsg::Probe`], and
//! only if no [`ClientMsg::Alive`] with the probe's nonce comes back within
//! `MachineConfig::probe_timeout` is the member declared lost (the round ends at once, far
//! sooner than the heartbeat timeout). A member that answers stays; so one confused or
//! malicious rank cannot evict healthy ones.
//!
//! Bounds: one probe per suspect at a time (more reports about it are counted into the pending
//! one), and none for `heartbeat_timeout` after a suspect answered (the heartbeat watches it
//! meanwhile); a report about another round, or about a member already gone, is ignored; a
//! member that reports itself, or names a rank outside its round, is refused.
//!
//! [`ClientMsg::Report`]: crate::native::ClientMsg::Report
//! [`ClientMsg::Alive`]: crate::native::ClientMsg::Alive
//! [`ServerMsg::Probe`]: crate::native::ServerMsg::Probe

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::ConnId;

/// Longest evidence text kept from a report, in bytes.
pub const MAX_EVIDENCE_BYTES: usize = 512;

/// What became of a report (for the log, metrics and the status page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportVerdict {
    /// A probe went to the suspect.
    Probing,
    /// A probe of the suspect was already pending: counted into it.
    Merged,
    /// The suspect answered a probe recently; the heartbeat watches it.
    Cooldown,
    /// About another round, or a member already gone: nothing to do.
    Stale,
    /// The suspect answered the probe: it stays.
    Dismissed,
    /// The suspect did not answer in time: it was declared lost.
    Confirmed,
}

impl ReportVerdict {
    /// A short lowercase name.
    pub const fn label(self) -> &'static str {
        match self {
            ReportVerdict::Probing => "probing",
            ReportVerdict::Merged => "merged",
            ReportVerdict::Cooldown => "cooldown",
            ReportVerdict::Stale => "stale",
            ReportVerdict::Dismissed => "dismissed",
            ReportVerdict::Confirmed => "confirmed",
        }
    }
}

/// One pending probe.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) nonce: u64,
    pub(crate) job: String,
    /// The suspect.
    pub(crate) member: String,
    pub(crate) rank: u32,
    pub(crate) round: u64,
    /// The first reporter, and what it saw.
    pub(crate) by: String,
    pub(crate) evidence: String,
    pub(crate) due: Instant,
    /// Reports counted into this probe.
    pub(crate) reports: u32,
}

/// Every pending probe, by the suspect's connection.
#[derive(Debug, Default)]
pub(crate) struct Probes {
    pending: BTreeMap<ConnId, Probe>,
    due: BTreeSet<(Instant, ConnId)>,
    /// Suspects that answered: no new probe before this time.
    quiet_until: BTreeMap<ConnId, Instant>,
    next_nonce: u64,
}

/// What [`Probes::start`] decided.
pub(crate) enum Start {
    /// Send this nonce to the suspect.
    Send(u64),
    /// No probe now.
    Not(ReportVerdict),
}

impl Probes {
    /// A report about the member on `conn`: start a probe, or say why not.
    pub(crate) fn start(
        &mut self,
        now: Instant,
        conn: ConnId,
        make: impl FnOnce(u64) -> Probe,
    ) -> Start {
        if let Some(p) = self.pending.get_mut(&conn) {
            p.reports = p.reports.saturating_add(1);
            return Start::Not(ReportVerdict::Merged);
        }
        match self.quiet_until.get(&conn) {
            Some(&t) if t > now => return Start::Not(ReportVerdict::Cooldown),
            Some(_) => {
                self.quiet_until.remove(&conn);
            }
            None => {}
        }
        self.next_nonce = self.next_nonce.wrapping_add(1);
        // Not guessable from outside the member's connection, not zero.
        let nonce = self.next_nonce ^ (conn.rotate_left(32)) ^ 0x9e37_79b9_7f4a_7c15;
        let p = make(nonce);
        self.due.insert((p.due, conn));
        self.pending.insert(conn, p);
        Start::Send(nonce)
    }

    /// The member on `conn` answered with `nonce`: its probe, if that was the one pending.
    /// No new probe of it before `quiet_until`.
    pub(crate) fn answered(
        &mut self,
        conn: ConnId,
        nonce: u64,
        quiet_until: Instant,
    ) -> Option<Probe> {
        if self.pending.get(&conn).is_none_or(|p| p.nonce != nonce) {
            return None;
        }
        let p = self.pending.remove(&conn)?;
        self.due.remove(&(p.due, conn));
        self.quiet_until.insert(conn, quiet_until);
        Some(p)
    }

    /// Probes whose time ran out by `now`, removed.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<(ConnId, Probe)> {
        let mut out = Vec::new();
        while let Some(&(t, conn)) = self.due.first() {
            if t > now {
                break;
            }
            self.due.pop_first();
            if let Some(p) = self.pending.remove(&conn) {
                out.push((conn, p));
            }
        }
        out
    }

    /// The connection is gone: forget its probe and its quiet time.
    pub(crate) fn forget(&mut self, conn: ConnId) {
        if let Some(p) = self.pending.remove(&conn) {
            self.due.remove(&(p.due, conn));
        }
        self.quiet_until.remove(&conn);
    }

    /// When the next probe runs out.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.due.first().map(|(t, _)| *t)
    }

    /// Pending probes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn probe(nonce: u64, now: Instant) -> Probe {
        Probe {
            nonce,
            job: "j".into(),
            member: "m".into(),
            rank: 1,
            round: 1,
            by: "r".into(),
            evidence: "reset".into(),
            due: now + Duration::from_millis(300),
            reports: 1,
        }
    }

    #[test]
    fn one_probe_per_suspect_then_quiet() {
        let now = Instant::now();
        let mut p = Probes::default();
        let Start::Send(n) = p.start(now, 7, |n| probe(n, now)) else {
            panic!()
        };
        assert!(matches!(
            p.start(now, 7, |n| probe(n, now)),
            Start::Not(ReportVerdict::Merged)
        ));
        assert!(
            p.answered(7, n ^ 1, now).is_none(),
            "a wrong nonce answers nothing"
        );
        let done = p.answered(7, n, now + Duration::from_secs(2)).unwrap();
        assert_eq!(done.reports, 2);
        assert!(matches!(
            p.start(now, 7, |n| probe(n, now)),
            Start::Not(ReportVerdict::Cooldown)
        ));
        let later = now + Duration::from_secs(3);
        assert!(matches!(
            p.start(later, 7, |n| probe(n, later)),
            Start::Send(_)
        ));
        assert!(p.expired(later).is_empty());
        assert_eq!(p.expired(later + Duration::from_secs(1)).len(), 1);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("ééé".into(), 3), "é…");
        assert_eq!(truncate("abc".into(), 3), "abc");
    }
}
