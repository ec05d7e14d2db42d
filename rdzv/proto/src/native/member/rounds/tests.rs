use super::*;
use crate::native::{JobEnd, RefusalCode, RoundCause};

fn welcome(round: u64, config: &[(&str, &str)]) -> Welcome {
    Welcome {
        job: "j".into(),
        round,
        cause: RoundCause::First,
        rank: 0,
        world: 2,
        local_rank: 0,
        local_world: 2,
        node_rank: 0,
        nodes: 1,
        peers: Default::default(),
        all_peers: true,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect::<Vec<_>>()
            .into(),
        heartbeat_interval_ms: 500,
        heartbeat_timeout_ms: 2000,
        restarts: 0,
    }
}

#[test]
fn rounds_values_and_the_end_as_the_server_pushes_them() {
    let mut s = Rounds::default();
    s.take(&ServerMsg::Welcome(welcome(1, &[("k", "1 first")])))
        .unwrap();
    assert_eq!(s.advance().map(|w| w.round), Some(1));
    assert!(!s.changed());
    assert_eq!(s.round_value("k").as_deref(), Some("first"));
    // A value for another round is not this round's; one for this round is.
    let config = |v: &str| ServerMsg::Config {
        job: "j".into(),
        key: "s".into(),
        value: v.as_bytes().to_vec().into(),
    };
    s.take(&config("2 later")).unwrap();
    assert_eq!(s.round_value("s"), None);
    s.take(&config("1 now")).unwrap();
    assert_eq!(s.round_value("s").as_deref(), Some("now"));
    s.take(&ServerMsg::Pending {
        job: "j".into(),
        round: 1,
        waiting: 3,
    })
    .unwrap();
    assert_eq!(s.waiting(), 3);
    // A stale round's end is ignored; the current one's is kept; a later welcome waits.
    s.take(&ServerMsg::RoundEnded {
        job: "j".into(),
        round: 0,
        cause: RoundCause::First,
    })
    .unwrap();
    assert!(!s.changed());
    s.take(&ServerMsg::Welcome(welcome(2, &[]))).unwrap();
    assert_eq!(s.ended(), Some("round 1 was superseded by round 2"));
    assert_eq!(s.advance().map(|w| w.round), Some(2));
    assert!(s.ended().is_none() && s.waiting() == 0);
    let end = s
        .take(&ServerMsg::JobEnded {
            job: "j".into(),
            end: JobEnd::Finished { by: "m0".into() },
        })
        .unwrap_err();
    assert!(
        matches!(&end, Stop::JobEnded { how, .. } if how == "finished"),
        "{end:?}"
    );
    assert_eq!(s.stop(), Some(&end));
}

#[test]
fn a_round_the_server_ended_stays_ended_until_the_next_welcome() {
    let mut s = Rounds::default();
    assert_eq!(s.advance().map(|w| w.round), None, "no welcome yet");
    s.take(&ServerMsg::Welcome(welcome(1, &[]))).unwrap();
    assert!(s.changed(), "a formed round waits to be taken");
    s.advance();
    s.take(&ServerMsg::RoundEnded {
        job: "j".into(),
        round: 1,
        cause: RoundCause::NewMembers { count: 1 },
    })
    .unwrap();
    let why = s.ended().expect("ended").to_owned();
    assert!(why.starts_with("round 1 ended: "), "{why}");
    // The superseding welcome keeps the first reason; taking it clears it.
    s.take(&ServerMsg::Welcome(welcome(2, &[]))).unwrap();
    assert_eq!(s.ended(), Some(why.as_str()));
    assert_eq!(s.advance().map(|w| w.round), Some(2));
    assert!(!s.changed());
    // A welcome for the round already taken (a resumed one) changes nothing.
    s.take(&ServerMsg::Welcome(welcome(2, &[]))).unwrap();
    assert!(!s.changed());
}

#[test]
fn a_removal_is_kept_as_the_stop() {
    let mut s = Rounds::default();
    s.take(&ServerMsg::Welcome(welcome(3, &[]))).unwrap();
    s.advance();
    let removed = ServerMsg::Removed {
        job: "j".into(),
        round: 3,
        why: "silent".into(),
    };
    let stop = s.take(&removed).unwrap_err();
    assert_eq!(
        stop,
        Stop::Removed {
            job: "j".into(),
            round: 3,
            why: "silent".into()
        }
    );
    assert_eq!(s.stop(), Some(&stop));
}

#[test]
fn refusals_are_told_and_kept_for_the_application_up_to_a_bound() {
    let mut s = Rounds::default();
    let refused = |n: usize| ServerMsg::Refused {
        code: RefusalCode::BadRequest,
        message: format!("no {n}"),
    };
    let told = s.take(&refused(0)).unwrap();
    assert_eq!(
        told.as_deref(),
        Some("dt-rdzv refused a request (BadRequest): no 0")
    );
    assert_eq!(s.take_refused(), [told.unwrap()]);
    assert!(s.take_refused().is_empty());
    for n in 0..KEPT_REFUSALS + 2 {
        s.take(&refused(n)).unwrap();
    }
    let kept = s.take_refused();
    assert_eq!(kept.len(), KEPT_REFUSALS);
    assert!(kept[0].ends_with("no 2"), "the oldest went: {}", kept[0]);
    assert!(!s.changed() && s.stop().is_none());
}
