//! Simulation tests of the member machine (the native client's session rules) against the
//! real rendezvous machine, over in-memory links with a virtual clock: joining, a server
//! restart and the resume of each member's place, a redirect to the job's owner, fail-over to
//! the next server after one went silent, the reconnect window running out, and a member's
//! own silence.

mod member_world;

use std::time::Duration;

use dt_rdzv_proto::native::member::{Input as MIn, Loss};
use dt_rdzv_proto::native::{ClientMsg, JobSpec, RoundCause, ServerMsg};

use dt_rdzv_proto::rendezvous::{MachineConfig, RendezvousMachine};
use dt_rdzv_proto::sans_io::Core;
use member_world::*;

#[test]
fn members_heartbeat_and_stay_in_their_round() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    w.advance(Duration::from_secs(30));
    for n in &w.nodes {
        assert!(n.ended.is_none());
        assert!(n.ends.is_empty(), "{:?}", n.ends);
        assert!(n.dials.is_empty());
    }
}

#[test]
fn an_ask_to_dump_reaches_the_other_members_session_not_its_application() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    let delivered = w.nodes[1].delivered.len();
    w.app_send(
        0,
        ClientMsg::Dump {
            round: 1,
            why: "all_reduce timed out".into(),
        },
    );
    w.advance(10 * MS);
    let rank0 = w.welcome(0).map(|x| x.rank).unwrap();
    assert_eq!(w.nodes[1].dumps, vec![(1, rank0)]);
    assert!(w.nodes[0].dumps.is_empty(), "not back to the asker");
    assert_eq!(
        w.nodes[1].delivered.len(),
        delivered,
        "not the application's business"
    );
}

#[test]
fn a_server_restart_is_resumed_with_every_member_in_its_place() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    let before: Vec<u32> = (0..2).map(|i| w.welcome(i).unwrap().rank).collect();
    let lost_at = w.now;
    w.stop(0, Loss::ServerGone);
    w.advance(Duration::from_secs(5));
    // Down: each attempt waits 2 s for a handshake, then 50 ms, 100 ms... before the next.
    let d = &w.nodes[0].dials;
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(d[0].0, lost_at, "the first attempt at once");
    assert_eq!(
        d[0].3,
        Duration::from_secs(2),
        "an attempt waits 2 s at most"
    );
    assert_eq!(d[1].0 - d[0].0, Duration::from_millis(2050));
    assert_eq!(d[2].0 - d[1].0, Duration::from_millis(2100));
    w.servers[0] = Server::Up(Box::new(machine()));
    w.advance(Duration::from_secs(3));
    for (i, &rank) in before.iter().enumerate() {
        let n = &w.nodes[i];
        assert!(n.ended.is_none(), "{:?}", n.ended);
        let j = n.rejoins.last().expect("rejoined");
        assert_eq!(j.resume.map(|r| (r.round, r.rank)), Some((1, rank)));
        let again = w.welcome(i).unwrap();
        assert_eq!((again.round, again.rank), (1, rank));
        assert!(
            matches!(again.cause, RoundCause::Resumed { .. }),
            "{:?}",
            again.cause
        );
        assert!(n.ends.is_empty(), "a restart ends no round: {:?}", n.ends);
    }
}

#[test]
fn a_redirect_sends_the_member_to_the_jobs_owner() {
    let mut w = World::new(vec![
        Server::Redirects("s1".into()),
        Server::Up(Box::new(machine())),
    ]);
    let m = w.member(0, Some(Duration::from_secs(60)));
    w.app_send(m, ClientMsg::Join(join(m, "job", &JobSpec::fixed(1))));
    w.advance(100 * MS);
    let n = &w.nodes[m];
    assert_eq!(n.dials.len(), 1);
    assert_eq!(n.dials[0].1.as_deref(), Some("s1"));
    assert_eq!(n.dials[0].3, Duration::from_secs(2));
    assert_eq!(n.link.map(|l| l.0), Some(1));
    assert!(
        !n.delivered
            .iter()
            .any(|x| matches!(x, ServerMsg::Redirect { .. })),
        "a redirect is not the application's business"
    );
    assert!(matches!(n.delivered[0], ServerMsg::Joined { .. }));
    assert_eq!(w.welcome(m).map(|x| x.round), Some(1));
}

#[test]
fn a_silent_server_is_left_for_the_next_of_the_list() {
    let mut w = formed(
        vec![
            Server::Up(Box::new(machine())),
            Server::Up(Box::new(machine())),
        ],
        Some(Duration::from_secs(60)),
    );
    w.stop(0, Loss::Silent);
    w.advance(Duration::from_secs(3));
    for i in 0..2 {
        let n = &w.nodes[i];
        assert_eq!(n.dials[0].2, 1, "the next server first");
        assert_eq!(n.link.map(|l| l.0), Some(1));
        assert!(n.ended.is_none());
        assert_eq!(w.welcome(i).map(|x| x.round), Some(1));
    }
}

#[test]
fn a_loss_past_the_reconnect_window_ends_the_session_naming_why() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(3)),
    );
    let lost_at = w.now;
    w.stop(0, Loss::ServerGone);
    w.advance(Duration::from_secs(10));
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert_eq!(
        why,
        "lost the connection to dt-rdzv (closed by peer: going away) and could not rejoin \
         within the reconnect window: no handshake"
    );
    // Every attempt within the window, each waiting at most what is left of it.
    for (at, _, _, d) in &n.dials {
        assert!(*at < lost_at + Duration::from_secs(3));
        assert!(*at + *d <= lost_at + Duration::from_secs(3));
    }
    assert!(
        n.ends.is_empty(),
        "the member's round is not the server's word"
    );
}

#[test]
fn without_a_reconnect_window_a_loss_ends_the_session_at_once() {
    let mut w = formed(vec![Server::Up(Box::new(machine()))], None);
    w.stop(0, Loss::ServerGone);
    assert_eq!(
        w.nodes[0].ended.as_deref(),
        Some("closed by peer: going away")
    );
    assert!(w.nodes[0].dials.is_empty());
}

#[test]
fn a_member_the_server_declared_lost_hears_why_and_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    w.nodes[0].m.set_silent(true);
    w.advance(Duration::from_secs(5));
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert!(why.contains("heartbeat timeout"), "{why}");
    assert!(n.dials.is_empty(), "no rejoin");
    let end = n.ends.iter().find(|e| e.removed).expect("removed");
    assert!(
        end.why
            .starts_with("dt-rdzv removed this member from job \"job\": "),
        "{end:?}"
    );
    // Its peer heard the round end and stays.
    assert!(w.nodes[1].ended.is_none());
    assert!(w.nodes[1].ends.iter().any(|e| e.round == 1 && !e.removed));
}

#[test]
fn a_member_stopped_past_its_heartbeat_timeout_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    // Its process is stopped for 3 s (no timer runs), then sees its connection timed out.
    w.now += Duration::from_secs(3);
    let why = "timed out".to_string();
    w.feed(
        0,
        MIn::ConnectionLost {
            why,
            loss: Loss::Silent,
        },
    );
    removed_for_its_silence(&w, "timed out");
}

/// Node 0 ended as removed from round 1 for its 3 s of silence, the connection's loss named,
/// and did not rejoin.
fn removed_for_its_silence(w: &World, loss: &str) {
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert!(
        why.starts_with("this member sent nothing for 3.")
            && why.ends_with(&format!("(the connection: {loss})")),
        "{why}"
    );
    assert!(n.dials.is_empty(), "no rejoin");
    assert!(
        n.ends.iter().any(|e| e.removed && e.round == 1),
        "{:?}",
        n.ends
    );
}

#[test]
fn a_member_stopped_past_its_timeout_that_heartbeats_on_waking_still_does_not_rejoin() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    // Stopped for 3 s; on waking its heartbeat timer runs first (a heartbeat is written), and
    // only then does it read that the server reset its connection.
    w.now += Duration::from_secs(3);
    let now = w.now;
    w.nodes[0].m.handle_timeout(now);
    w.drain_member(0);
    w.now += Duration::from_millis(1);
    let why = "reset by peer".to_string();
    w.feed(
        0,
        MIn::ConnectionLost {
            why,
            loss: Loss::ServerGone,
        },
    );
    removed_for_its_silence(&w, "reset by peer");
}

#[test]
fn a_member_whose_connection_timed_out_on_its_side_only_rejoins_once_the_server_lets_go() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    // Node 0's connection times out on its side (its process starved just short of the
    // heartbeat timeout); the server still holds it, and refuses the rejoin (`MemberTaken`)
    // and closes its connection until its heartbeat timeout lets go of the old one.
    let lost_at = w.now;
    w.nodes[0].link = None;
    let why = "timed out".to_string();
    w.feed(
        0,
        MIn::ConnectionLost {
            why,
            loss: Loss::Silent,
        },
    );
    w.pump();
    w.advance(Duration::from_secs(5));
    let n = &w.nodes[0];
    assert!(n.ended.is_none(), "{:?}", n.ended);
    assert!(
        n.rejoins.len() > 2,
        "refused, then tried again: {:?}",
        n.dials
    );
    // Each refused attempt after a longer pause, up to 1 s.
    let gaps: Vec<Duration> = n.dials.windows(2).map(|d| d[1].0 - d[0].0).collect();
    assert_eq!(gaps[0], 50 * MS, "{gaps:?}");
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    // The server lets go at its timeout for a member silent since its first welcome (4 s);
    // the attempt after that is taken.
    let last = n.dials.last().unwrap().0 - lost_at;
    assert!(
        last > Duration::from_secs(4) && last <= Duration::from_secs(5),
        "{last:?} {gaps:?}"
    );
    assert!(
        !n.delivered
            .iter()
            .any(|m| matches!(m, ServerMsg::Refused { .. })),
        "the refusals are the session's business"
    );
    // Let in as the server dropped the old connection: both go on in the next round.
    for i in 0..2 {
        assert!(w.nodes[i].ended.is_none());
        assert_eq!(w.welcome(i).map(|x| x.round), Some(2), "node {i}");
    }
}

#[test]
fn a_rejoin_the_server_refuses_for_good_ends_the_session_with_its_reason() {
    let mut w = formed(
        vec![Server::Up(Box::new(machine()))],
        Some(Duration::from_secs(60)),
    );
    w.stop(0, Loss::ServerGone);
    // It comes back with another token.
    w.servers[0] = Server::Up(Box::new(RendezvousMachine::new(MachineConfig {
        token: Some("another".into()),
        ..MachineConfig::default()
    })));
    w.advance(Duration::from_secs(1));
    let n = &w.nodes[0];
    let why = n.ended.as_deref().expect("ended");
    assert!(
        why.starts_with("dt-rdzv refused this member's rejoin (BadToken): ")
            && why.ends_with("(the connection: server closed the stream)"),
        "{why}"
    );
    assert_eq!(n.dials.len(), 1, "not tried again");
    assert!(n.ends.iter().any(|e| e.removed), "{:?}", n.ends);
}
