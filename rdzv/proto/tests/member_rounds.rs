//! The member machine's account of its rounds ([`Rounds`]), against the real rendezvous
//! machine on a virtual clock: a welcome waits until the application takes it, a published
//! value is its round's, a late joiner is counted and then supersedes the round, the server's
//! end of a round, the member's removal and the job's end are kept, refusals are told, and a
//! server restart leaves the round as it was.

mod member_world;

use std::time::Duration;

use dt_rdzv_proto::native::member::{Loss, Rounds, Stop};
use dt_rdzv_proto::native::{ClientMsg, JobSpec};

use member_world::*;

fn rounds(w: &World, i: usize) -> &Rounds {
    w.nodes[i].m.rounds()
}

/// Both members of `formed` take round 1; returns the index of its rank 0.
fn take_round_1(w: &mut World) -> usize {
    for i in 0..2 {
        let r = w.nodes[i].m.rounds_mut();
        assert!(r.changed() && r.welcome().is_none(), "{r:?}");
        assert_eq!(r.ended(), Some("round 0 was superseded by round 1"));
        assert_eq!(r.advance().map(|x| x.round), Some(1));
        assert!(!r.changed() && r.ended().is_none());
    }
    (0..2)
        .find(|&i| rounds(w, i).welcome().unwrap().rank == 0)
        .unwrap()
}

fn up() -> Vec<Server> {
    vec![Server::Up(Box::new(machine()))]
}

#[test]
fn a_welcome_waits_for_the_application_and_a_published_value_is_its_rounds() {
    let mut w = formed(up(), Some(Duration::from_secs(60)));
    let rank0 = take_round_1(&mut w);
    let other = 1 - rank0;
    w.app_send(
        rank0,
        ClientMsg::Publish {
            key: "store".into(),
            value: b"2 later".to_vec(),
        },
    );
    assert_eq!(rounds(&w, other).round_value("store"), None, "round 2's");
    w.app_send(
        rank0,
        ClientMsg::Publish {
            key: "store".into(),
            value: b"1 10.0.0.1:29500".to_vec(),
        },
    );
    for i in 0..2 {
        assert_eq!(
            rounds(&w, i).round_value("store").as_deref(),
            Some("10.0.0.1:29500")
        );
    }
    // Only rank 0 publishes: the other's refusal is kept for its application, once.
    w.app_send(
        other,
        ClientMsg::Publish {
            key: "store".into(),
            value: b"1 elsewhere".to_vec(),
        },
    );
    let refused = w.nodes[other].m.rounds_mut().take_refused();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with("dt-rdzv refused a request (NotMain): "),
        "{refused:?}"
    );
    assert!(w.nodes[other].m.rounds_mut().take_refused().is_empty());
    assert_eq!(
        rounds(&w, other).round_value("store").as_deref(),
        Some("10.0.0.1:29500")
    );
}

#[test]
fn a_late_joiner_is_counted_then_its_round_supersedes_the_current_one() {
    let mut w = World::new(up());
    let spec = JobSpec {
        last_call_ms: 0,
        ..JobSpec::elastic(2, 3)
    };
    for i in 0..2 {
        w.member(0, None);
        w.app_send(i, ClientMsg::Join(join(i, "job", &spec)));
    }
    w.advance(100 * MS);
    take_round_1(&mut w);
    w.member(0, None);
    w.app_send(2, ClientMsg::Join(join(2, "job", &spec)));
    for i in 0..2 {
        let r = rounds(&w, i);
        assert_eq!(r.waiting(), 1, "the late joiner is counted: {r:?}");
        assert!(!r.changed(), "and the round goes on");
    }
    w.advance(Duration::from_secs(5));
    for i in 0..2 {
        let r = w.nodes[i].m.rounds_mut();
        assert_eq!(r.ended(), Some("round 1 ended: 1 new members"));
        assert_eq!(r.welcome().map(|x| x.round), Some(1), "until it is taken");
        let next = r.advance().expect("round 2");
        assert_eq!((next.round, next.world), (2, 3));
        assert!(r.ended().is_none() && r.waiting() == 0 && !r.changed());
    }
    // The late joiner had no round to end: its first is a superseding one.
    let r = w.nodes[2].m.rounds_mut();
    assert_eq!(r.ended(), Some("round 0 was superseded by round 2"));
    assert_eq!(r.advance().map(|x| (x.round, x.rank)), Some((2, 2)));
}

#[test]
fn the_servers_end_of_a_round_and_the_jobs_end_are_kept() {
    let mut w = World::new(up());
    let spec = JobSpec {
        last_call_ms: 0,
        ..JobSpec::elastic(1, 2)
    };
    for i in 0..2 {
        w.member(0, None);
        w.app_send(i, ClientMsg::Join(join(i, "job", &spec)));
    }
    w.advance(100 * MS);
    for i in 0..2 {
        w.nodes[i].m.rounds_mut().advance();
    }
    let round = rounds(&w, 0).welcome().unwrap().round;
    // Member 1 leaves: member 0's round is over, and its next waits to be taken.
    w.app_send(1, ClientMsg::Leave);
    w.drop_link(1);
    w.advance(100 * MS);
    let r = w.nodes[0].m.rounds_mut();
    let why = r.ended().expect("ended").to_owned();
    assert!(why.starts_with(&format!("round {round} ended: ")), "{why}");
    assert!(r.stop().is_none());
    assert_eq!(
        r.advance().map(|x| (x.round, x.world)),
        Some((round + 1, 1))
    );
    // Then it finishes the job: the end is kept, with how it ended.
    w.app_send(0, ClientMsg::Finish);
    let stop = rounds(&w, 0).stop().cloned();
    assert!(
        matches!(&stop, Some(Stop::JobEnded { job, how, .. }) if job == "job" && how == "finished"),
        "{stop:?}"
    );
}

#[test]
fn a_member_the_server_removed_keeps_its_removal_and_its_peer_the_rounds_end() {
    let mut w = formed(up(), Some(Duration::from_secs(60)));
    take_round_1(&mut w);
    w.nodes[0].m.set_silent(true);
    w.advance(Duration::from_secs(5));
    let stop = rounds(&w, 0).stop().cloned();
    assert!(
        matches!(&stop, Some(Stop::Removed { job, round: 1, .. }) if job == "job"),
        "{stop:?}"
    );
    let r = rounds(&w, 1);
    assert!(r.stop().is_none());
    let why = r.ended().expect("its round ended");
    assert!(why.starts_with("round 1 ended: "), "{why}");
}

#[test]
fn a_server_restart_leaves_the_round_as_it_was() {
    let mut w = formed(up(), Some(Duration::from_secs(60)));
    take_round_1(&mut w);
    w.stop(0, Loss::ServerGone);
    w.advance(Duration::from_secs(1));
    w.servers[0] = Server::Up(Box::new(machine()));
    w.advance(Duration::from_secs(3));
    for i in 0..2 {
        let n = &w.nodes[i];
        assert!(!n.rejoins.is_empty(), "member {i} rejoined");
        let r = n.m.rounds();
        assert!(!r.changed(), "the resumed round is the same one: {r:?}");
        assert_eq!(r.welcome().map(|x| x.round), Some(1));
        assert!(r.stop().is_none());
    }
}
