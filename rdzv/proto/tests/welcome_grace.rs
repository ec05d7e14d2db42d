//! A member welcomed into its first round has the round's heartbeat timeout plus one waiting
//! interval (2 + 2 s) until a message of it arrives after the welcome: it beats at the waiting
//! rate (every 2 s) until the welcome reaches it, so the round's 2 s timeout from the welcome
//! on lost members whose next beat was due right at 2 s (8,192 real members on one machine
//! were lost 2 s after forming). Once heard from, the round's timeout applies.

mod sim;

use std::time::Duration;

use dt_rdzv_proto::native::{ClientMsg, JobSpec};
use dt_rdzv_proto::rendezvous::Event;
use sim::{Sim, check_round};

const S: Duration = Duration::from_secs(1);

fn lost(sim: &Sim) -> Vec<(String, String)> {
    sim.events
        .iter()
        .filter_map(|e| match e {
            Event::MemberLost { member, why, .. } => Some((member.clone(), why.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_newly_welcomed_member_has_one_waiting_interval_more_until_it_is_heard() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    let ws = sim.welcomes(0..3);
    assert_eq!(check_round(&ws, 3), 1);
    // Members 0 and 1 beat at the round's rate; member 2's welcome is slow to reach it: it
    // says nothing for 3 s (past the round's 2 s timeout, within 2 + 2 s).
    sim.advance_with_heartbeats(3 * S, &[0, 1]);
    assert!(
        lost(&sim).is_empty(),
        "lost before it could switch: {:?}",
        lost(&sim)
    );
    // Heard from: the round's timeout applies from now on.
    sim.send(2, ClientMsg::Heartbeat { seq: 1 });
    sim.advance_with_heartbeats(3 * S, &[0, 1]);
    let l = lost(&sim);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0].0, "m00002");
    assert!(l[0].1.contains("heartbeat timeout 2.0 s)"), "{l:?}");
}

#[test]
fn a_member_silent_since_its_welcome_is_lost_after_the_grace() {
    let mut sim = Sim::new();
    let spec = JobSpec::fixed(3);
    for c in 0..3 {
        sim.join(c, "j", &spec, 1);
    }
    let _ = sim.welcomes(0..3);
    sim.advance_with_heartbeats(3 * S, &[0, 1]);
    assert!(lost(&sim).is_empty(), "{:?}", lost(&sim));
    sim.advance_with_heartbeats(2 * S, &[0, 1]);
    let l = lost(&sim);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0].0, "m00002");
    assert!(
        l[0].1
            .contains("heartbeat timeout 4.0 s, silent since its first welcome"),
        "{l:?}"
    );
}
