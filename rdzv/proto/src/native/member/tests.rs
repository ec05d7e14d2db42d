//! The member machine's rejoin rules, driven by hand: what a server that closes, resets or
//! refuses a rejoin's connection makes of the session.

use std::time::{Duration, Instant};

use super::*;
use crate::native::{JobSpec, RefusalCode, Role, RoundCause, ServerMsg, Welcome};

const WINDOW: Duration = Duration::from_secs(10);

fn join() -> Join {
    Join {
        job: "j".into(),
        token: "t".into(),
        member: "m0".into(),
        node: "n0".into(),
        addrs: vec!["n0:4000".into()],
        host: Vec::new(),
        role: Role::Worker,
        spec: JobSpec::fixed(2),
        resume: None,
    }
}

fn welcome() -> Welcome {
    Welcome {
        job: "j".into(),
        round: 1,
        cause: RoundCause::First,
        rank: 1,
        world: 2,
        local_rank: 0,
        local_world: 1,
        node_rank: 1,
        nodes: 2,
        peers: Default::default(),
        all_peers: true,
        config: Default::default(),
        heartbeat_interval_ms: 500,
        heartbeat_timeout_ms: 2000,
        restarts: 0,
    }
}

fn joined() -> ServerMsg {
    ServerMsg::Joined {
        job: "j".into(),
        round: 1,
        spare: false,
        heartbeat_interval_ms: 2000,
    }
}

fn drain(m: &mut Member) -> Vec<Output> {
    std::iter::from_fn(|| m.poll_output()).collect()
}

fn lost(m: &mut Member, now: Instant, loss: Loss, why: &str) -> Vec<Output> {
    let why = why.to_string();
    m.handle(now, Input::ConnectionLost { why, loss });
    drain(m)
}

/// A member of round 1 (rank 1 of 2) whose connection timed out at `t0` (its process starved),
/// reconnected and sent its join again, asking for its place: waiting for the answer.
fn rejoining(t0: Instant) -> Member {
    let mut m = Member::new(t0, 0, Some(WINDOW));
    m.handle(t0, Input::Outgoing(ClientMsg::Join(join())));
    m.handle(t0, Input::Sent);
    m.handle(t0, Input::Message(joined()));
    m.handle(t0, Input::Message(ServerMsg::Welcome(welcome())));
    drain(&mut m);
    assert_eq!(
        lost(&mut m, t0, Loss::Silent, "timed out"),
        [Output::Disconnect]
    );
    redial(&mut m, t0, 1);
    m
}

/// The next attempt, due at `at`: a dial, a connection, the join sent again (attempt `n`).
fn redial(m: &mut Member, at: Instant, n: u32) {
    assert_eq!(m.poll_timeout(), Some(at), "attempt {n} due");
    m.handle_timeout(at);
    let dial = drain(m);
    assert!(
        matches!(&dial[..], [Output::Dial { attempt, .. }] if *attempt == n),
        "{dial:?}"
    );
    m.handle(at, Input::Connected { server: 0 });
    let rejoin = drain(m);
    let [Output::Rejoin(j)] = &rejoin[..] else {
        panic!("{rejoin:?}")
    };
    assert_eq!(
        j.resume.map(|r| (r.round, r.rank, r.world)),
        Some((1, 1, 2))
    );
    m.handle(at, Input::RejoinSent);
    assert!(m.serving());
}

fn refused(code: RefusalCode, message: &str) -> Input {
    Input::Message(ServerMsg::Refused {
        code,
        message: message.into(),
    })
}

#[test]
fn a_rejoin_refused_while_the_server_holds_the_old_connection_is_tried_again_with_backoff() {
    let t0 = Instant::now();
    let mut m = rejoining(t0);
    let mut at = t0;
    let mut pause = FIRST_PAUSE;
    // As `dt-rdzv serve` answers while it still holds the old connection: a refusal, then
    // the end of the stream (its close follows).
    for n in 2..8 {
        m.handle(
            at,
            refused(RefusalCode::MemberTaken, "m0 is held (seen 1900 ms ago)"),
        );
        assert!(drain(&mut m).is_empty(), "not the application's business");
        let out = lost(&mut m, at, Loss::Stream, "server closed the stream");
        assert_eq!(out, [Output::Disconnect], "attempt {n}");
        assert!(!m.ended());
        at += pause;
        pause = (pause * 2).min(MAX_PAUSE);
        redial(&mut m, at, n);
    }
    // The server let go of the old connection: this rejoin is taken.
    m.handle(at, Input::Message(joined()));
    assert_eq!(drain(&mut m), [Output::Rejoined, Output::Deliver(joined())]);
    // The next loss starts afresh: at once, from attempt 1.
    assert_eq!(
        lost(&mut m, at, Loss::ServerGone, "reset"),
        [Output::Disconnect]
    );
    redial(&mut m, at, 1);
}

#[test]
fn a_rejoin_whose_connection_drops_before_an_answer_is_tried_again() {
    let t0 = Instant::now();
    for loss in [Loss::Stream, Loss::Closed, Loss::ServerGone, Loss::Silent] {
        let mut m = rejoining(t0);
        let out = lost(&mut m, t0, loss, "connection lost");
        assert_eq!(out, [Output::Disconnect], "{loss:?}");
        redial(&mut m, t0 + FIRST_PAUSE, 2);
    }
}

#[test]
fn a_rejoin_refused_for_good_ends_the_session_with_the_servers_reason() {
    let t0 = Instant::now();
    for (code, message) in [
        (RefusalCode::BadToken, "bad token for job \"j\""),
        (RefusalCode::JobEnded, "job \"j\" ended: stopped by ops"),
        (RefusalCode::SpecMismatch, "the spec differs"),
    ] {
        let mut m = rejoining(t0);
        m.handle(t0, refused(code, message));
        let out = drain(&mut m);
        assert!(matches!(&out[..], [Output::Deliver(_)]), "{out:?}");
        let out = lost(&mut m, t0, Loss::Stream, "server closed the stream");
        let [Output::EndAll(end), Output::Ended(why)] = &out[..] else {
            panic!("{out:?}")
        };
        let expected = format!(
            "dt-rdzv refused this member's rejoin ({code:?}): {message} (the connection: \
             server closed the stream)"
        );
        assert_eq!(why, &expected);
        assert!(
            end.removed && end.round == 1 && end.why.contains(message),
            "{end:?}"
        );
        assert!(m.ended() && m.poll_timeout().is_none());
    }
}

#[test]
fn rejoins_refused_until_the_window_is_spent_end_the_session() {
    let t0 = Instant::now();
    let mut m = rejoining(t0);
    let mut at = t0;
    let mut n = 1;
    let why = loop {
        m.handle(at, refused(RefusalCode::MemberTaken, "m0 is held"));
        let out = lost(&mut m, at, Loss::Stream, "server closed the stream");
        match &out[..] {
            [Output::Disconnect] => {}
            [Output::Ended(why)] => break why.clone(),
            other => panic!("{other:?}"),
        }
        at = m.poll_timeout().expect("another attempt");
        n += 1;
        redial(&mut m, at, n);
    };
    assert!(
        at < t0 + WINDOW && at + MAX_PAUSE >= t0 + WINDOW,
        "{:?}",
        at - t0
    );
    assert!(
        why.starts_with("lost the connection to dt-rdzv and could not rejoin within the reconnect window: dt-rdzv refused the rejoin for now (MemberTaken): m0 is held"),
        "{why}"
    );
    assert!(m.ended());
}

#[test]
fn a_removal_told_before_the_close_is_the_sessions_end() {
    let t0 = Instant::now();
    let mut m = Member::new(t0, 0, Some(WINDOW));
    m.handle(t0, Input::Outgoing(ClientMsg::Join(join())));
    m.handle(t0, Input::Message(joined()));
    m.handle(t0, Input::Message(ServerMsg::Welcome(welcome())));
    drain(&mut m);
    m.handle(
        t0,
        Input::Message(ServerMsg::Removed {
            job: "j".into(),
            round: 1,
            why: "silent for 2.1 s".into(),
        }),
    );
    drain(&mut m);
    let out = lost(&mut m, t0, Loss::Stream, "server closed the stream");
    assert_eq!(
        out,
        [Output::Ended(
            "dt-rdzv removed this member from job \"j\" (round 1): silent for 2.1 s (the \
             connection: server closed the stream)"
                .into()
        )]
    );
}
