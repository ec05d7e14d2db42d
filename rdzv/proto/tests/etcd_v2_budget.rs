//! The etcd v2 door's memory budget (issue 42, third round): reads of missing keys leave no
//! trace, the run bookkeeping counts against the byte budget, and answers being sent are
//! bounded server-wide.

use std::time::Instant;

use dt_rdzv_proto::etcd_v2::request::{GetOpts, PutOpts, V2Request};
use dt_rdzv_proto::etcd_v2::{
    Answer, ErrorCode, Input, Limits, Output, StoreConfig, V2Error, V2Store, WallClock,
};

fn store(limits: Limits) -> V2Store {
    let config = StoreConfig {
        limits,
        idle_ttl: None,
    };
    V2Store::new(config, WallClock::new(Instant::now(), 0))
}

fn ask(s: &mut V2Store, conn: u64, key: &str, request: V2Request) -> Result<Answer, V2Error> {
    s.handle(
        Instant::now(),
        Input::Request {
            conn,
            key: key.into(),
            request,
        },
    );
    let mut answer = None;
    while let Some(o) = s.poll_output() {
        if let Output::Answer { answer: a, .. } = o {
            answer = Some(a);
        }
    }
    answer.expect("an answer")
}

fn read() -> V2Request {
    V2Request::Get(GetOpts::default())
}

fn watch() -> V2Request {
    V2Request::Get(GetOpts {
        wait: true,
        ..GetOpts::default()
    })
}

fn put(value: &str) -> V2Request {
    V2Request::Put(PutOpts {
        value: Some(value.into()),
        ..PutOpts::default()
    })
}

#[test]
fn reads_of_missing_run_keys_leave_no_trace() {
    let mut s = store(Limits::default());
    let held = s.held_bytes();
    // 5,000 reads of missing state keys of 1 KB run ids on one kept-alive connection.
    for i in 0..5_000 {
        let key = format!("/torch/elastic/rendezvous/{i}{}", "x".repeat(1_000));
        let e = ask(&mut s, 1, &key, read()).unwrap_err();
        assert_eq!(e.code, ErrorCode::KeyNotFound);
    }
    assert_eq!(s.tracked_runs(), 0);
    assert_eq!(s.held_bytes(), held);
    // A run with a key is tracked by the connections that use it, and charged.
    let key = "/torch/elastic/rendezvous/job";
    ask(&mut s, 1, key, put("state")).unwrap();
    ask(&mut s, 2, key, read()).unwrap();
    assert_eq!(s.tracked_runs(), 1);
    assert!(s.held_bytes() > s.bytes(), "the bookkeeping is counted");
}

#[test]
fn run_bookkeeping_counts_against_the_byte_budget() {
    let mut s = store(Limits {
        max_bytes: 64 << 10,
        ..Limits::default()
    });
    // Watches of missing keys in distinct runs are answered (pending), so they mark their
    // runs live: each costs ~2 KB of bookkeeping here. Past the budget they are still
    // answered, and leave no trace.
    for i in 0..100 {
        let key = format!("/torch/elastic/rendezvous/{i}{}", "w".repeat(1_000));
        assert!(ask(&mut s, 1, &key, watch()).is_ok());
        assert!(s.held_bytes() <= 64 << 10, "{}", s.held_bytes());
    }
    let tracked = s.tracked_runs();
    assert!((20..40).contains(&tracked), "{tracked}");
    // A write now finds the budget spent by the bookkeeping, and says so.
    let e = ask(&mut s, 2, "/k", put(&"v".repeat(4 << 10))).unwrap_err();
    assert_eq!(e.code, ErrorCode::RaftInternal);
    assert!(e.cause.contains("memory budget is 65536"), "{}", e.cause);
    // The connection's close frees its part (the runs idle until their TTL).
    s.handle(Instant::now(), Input::Closed { conn: 1 });
    assert!(s.held_bytes() < 40 << 10, "{}", s.held_bytes());
}

#[test]
fn answers_being_sent_are_bounded_server_wide() {
    let mut s = store(Limits {
        max_answer_bytes: 10_000,
        ..Limits::default()
    });
    for i in 0..4 {
        ask(&mut s, 1, &format!("/d/k{i}"), put(&"x".repeat(1_500))).unwrap();
    }
    assert!(ask(&mut s, 1, "/d", read()).is_ok());
    let size = s.take_answer_bytes();
    assert!(size > 6_000, "{size}");
    assert_eq!(s.take_answer_bytes(), 0);
    // Two such answers still being sent to other clients: a third is refused, naming the
    // server-wide bound; once they are sent it reads again.
    s.set_answers_in_flight(2 * size);
    let e = ask(&mut s, 2, "/d", read()).unwrap_err();
    assert_eq!(e.code, ErrorCode::RaftInternal);
    assert!(
        e.cause.contains("server-wide limit is 10000"),
        "{}",
        e.cause
    );
    s.set_answers_in_flight(0);
    assert!(ask(&mut s, 2, "/d", read()).is_ok());
}

#[test]
fn the_servers_budget_binds_writes_and_reads_beside_the_other_doors() {
    let mut s = store(Limits::default());
    let value = "v".repeat(100_000);
    // The other doors hold 850 KB of a 1 MB budget: one 100 KB value fits, a second does not.
    s.set_server_budget(Some(1_000_000), 850_000);
    ask(&mut s, 1, "/a/1", put(&value)).unwrap();
    let e = ask(&mut s, 1, "/a/2", put(&value)).unwrap_err();
    assert_eq!(e.code, ErrorCode::RaftInternal);
    assert!(e.cause.contains("--max-memory-bytes"), "{}", e.cause);
    assert!(e.cause.contains("other doors 850000"), "{}", e.cause);
    // A read whose answer would pass it is refused too; with room again, it is answered.
    s.set_server_budget(Some(1_000_000), 999_000);
    let e = ask(&mut s, 1, "/a/1", read()).unwrap_err();
    assert!(e.cause.contains("--max-memory-bytes"), "{}", e.cause);
    s.set_server_budget(None, 0);
    ask(&mut s, 1, "/a/1", read()).unwrap();
    ask(&mut s, 1, "/a/2", put(&value)).unwrap();
}
