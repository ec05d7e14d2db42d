//! The door's memory budget (issue 42, third round): every byte a client can make the engine
//! hold counts against the store quota, and the bound on waiting keys is server-wide.

use super::*;
use crate::tcpstore::{NOT_READY, READY};

fn quota(max_store_bytes: u64) -> H {
    H::with(EngineConfig {
        max_store_bytes: Some(max_store_bytes),
        ..EngineConfig::default()
    })
}

fn store_quota_refusal(actions: &[Action], id: ConnId) -> Option<(&'static str, u64)> {
    match closed(actions, id)? {
        CloseReason::QuotaExceeded {
            op,
            scope: "store",
            limit,
            ..
        } => Some((op, limit)),
        _ => None,
    }
}

#[test]
fn add_and_barrier_are_refused_past_the_store_quota() {
    let mut h = quota(4 << 10);
    // Each ADD or BARRIER on a new key stores a counter: 1 KiB keys fill a 4 KiB quota.
    let key = |i: usize| {
        let mut key = format!("/c/{i}/").into_bytes();
        key.resize(1024, b'x');
        key
    };
    h.conn(1);
    let mut refused = None;
    for i in 0..16 {
        let a = h.req(
            1,
            Request::Add {
                key: key(i),
                delta: 1,
            },
        );
        if let Some(r) = store_quota_refusal(&a, 1) {
            refused = Some((i, r));
            break;
        }
        assert_eq!(sends_to(&a, 1), 1i64.to_le_bytes(), "ADD {i} answered");
    }
    let (i, (op, limit)) = refused.expect("ADD refused before 16 KiB are stored");
    assert_eq!((op, limit), ("ADD", 4 << 10));
    assert!(i >= 2, "a few fit ({i})");
    assert!(h.e.held_bytes() <= 4 << 10, "{}", h.e.held_bytes());
    let stored = h.e.num_keys();
    h.conn(2);
    let mut refused = None;
    for i in 16..32 {
        let a = h.req(
            2,
            Request::Barrier {
                key: key(i),
                world_size: 2,
            },
        );
        if let Some(r) = closed(&a, 2) {
            refused = Some(r);
            break;
        }
    }
    let reason = refused.expect("BARRIER refused past the quota");
    assert!(
        matches!(
            reason,
            CloseReason::QuotaExceeded {
                op: "BARRIER",
                scope: "store",
                ..
            }
        ),
        "{reason:?}"
    );
    assert!(h.e.held_bytes() <= 4 << 10, "{}", h.e.held_bytes());
    assert!(h.e.num_keys() <= stored + 1);
}

#[test]
fn waiting_keys_are_bounded_server_wide_and_barrier_counts_too() {
    let mut h = H::new();
    // Each WAIT of 4,000 keys of 8 KB is within one request's limits; two connections of
    // one batch each fit, and the 64 MiB bound is shared, so a third batch on a third
    // connection is refused (each connection alone would be fine).
    let batch = |b: usize| -> Vec<Vec<u8>> {
        (0..4_000)
            .map(|i| {
                let mut key = format!("/w{b}/{i}/").into_bytes();
                key.resize(8 << 10, b'x');
                key
            })
            .collect()
    };
    let mut refused = None;
    for b in 0..6 {
        let id = 10 + b as ConnId;
        h.conn(id);
        let a = h.req(id, Request::Wait { keys: batch(b) });
        if let Some(r) = closed(&a, id) {
            refused = Some((b, r));
            break;
        }
    }
    let (b, reason) = refused.expect("refused before 6 connections wait for 197 MB");
    assert_eq!(b, 2, "two batches of 32.8 MB fit, the third does not");
    assert!(
        matches!(reason, CloseReason::TooManyWaits { op: "WAIT", limit, .. } if limit == MAX_WAITING_BYTES),
        "{reason:?}"
    );
    // A BARRIER's wait counts against the same bound.
    h.conn(2);
    let mut big = b"/barrier/".to_vec();
    big.resize(8 << 10, b'b');
    let mut refused = None;
    for i in 0..2_000 {
        let mut key = big.clone();
        key.extend_from_slice(format!("{i}").as_bytes());
        let id = 100 + i as ConnId;
        h.conn(id);
        let a = h.req(id, Request::Barrier { key, world_size: 2 });
        if let Some(r) = closed(&a, id) {
            refused = Some(r);
            break;
        }
    }
    let reason = refused.expect("BARRIER waits refused past the bound");
    assert!(
        matches!(reason, CloseReason::TooManyWaits { op: "BARRIER", .. }),
        "{reason:?}"
    );
    // Closing the waiters frees the bound: a bystander waits and is woken as usual.
    for id in 10..12 {
        h.disconnect(id);
    }
    assert!(
        h.ask(
            2,
            Request::Wait {
                keys: vec![k("/a")]
            }
        )
        .is_empty()
    );
    h.conn(3);
    let a = h.req(
        3,
        Request::Set {
            key: k("/a"),
            value: k("1"),
        },
    );
    assert_eq!(sends_to(&a, 2), [0], "woken");
}

#[test]
fn reads_of_missing_keys_leave_no_trace() {
    let mut h = H::new();
    h.conn(1);
    let held = h.e.held_bytes();
    // 1,000 CHECKs of 100 keys in distinct namespaces that hold nothing.
    for b in 0..1_000 {
        let keys = (0..100).map(|i| k(&format!("/ns{b}x{i}/k"))).collect();
        assert_eq!(h.ask(1, Request::Check { keys }), [NOT_READY]);
        h.ask(
            1,
            Request::Get {
                key: k(&format!("/g{b}/k")),
            },
        );
    }
    assert_eq!(h.e.held_bytes(), held, "nothing kept while open");
    assert!(h.e.namespaces.tracked().is_empty());
    h.disconnect(1);
    assert_eq!(h.e.held_bytes(), 0, "nothing kept after close");
    // A namespace that holds keys is marked live by a read, and idles after the close; one
    // whose keys are all deleted is forgotten at the close.
    h.conn(2);
    h.req(
        2,
        Request::Set {
            key: k("/keep/k"),
            value: k("v"),
        },
    );
    h.req(
        2,
        Request::Set {
            key: k("/gone/k"),
            value: k("v"),
        },
    );
    h.req(2, Request::DeleteKey { key: k("/gone/k") });
    h.conn(3);
    h.ask(
        3,
        Request::Check {
            keys: vec![k("/keep/k")],
        },
    );
    h.disconnect(2);
    h.disconnect(3);
    assert_eq!(h.e.namespaces.tracked(), [k("keep")]);
    assert_eq!(
        h.e.held_bytes(),
        (7 + 1) + (4 + 128),
        "/keep/k=v and its idle namespace"
    );
}

#[test]
fn touches_of_many_namespaces_count_against_the_quota() {
    // 200 namespaces of one small key each; a reader touching them all would hold ~70 bytes
    // a namespace more, which a quota of what they store plus 8 KiB does not have: it is
    // answered, and the touches past the quota are not kept.
    let mut h = quota(64 << 10);
    h.conn(1);
    for i in 0..200 {
        h.req(
            1,
            Request::Set {
                key: k(&format!("/n{i:03}/k")),
                value: k("v"),
            },
        );
    }
    h.disconnect(1);
    let idle = h.e.held_bytes();
    h.e.config.max_store_bytes = Some(idle + (8 << 10));
    h.conn(2);
    let keys = (0..200).map(|i| k(&format!("/n{i:03}/k"))).collect();
    assert_eq!(h.ask(2, Request::Check { keys }), [READY]);
    assert!(h.e.held_bytes() <= idle + (8 << 10));
    assert!(
        h.e.held_bytes() > idle + (4 << 10),
        "touches up to the quota are kept"
    );
    assert!(h.e.stats().touches_over_quota > 0);
}

#[test]
fn list_keys_is_refused_when_its_answer_would_pass_the_quota() {
    let mut h = quota(1 << 20);
    h.conn(1);
    // 100 keys of 1 KiB: 100 KiB stored; the answer is as big again.
    for i in 0..100 {
        let mut key = format!("/l/{i}/").into_bytes();
        key.resize(1024, b'x');
        h.req(
            1,
            Request::Set {
                key,
                value: Vec::new(),
            },
        );
    }
    let size = 8 + 100 * (8 + 1024);
    match h.reply(1, Request::ListKeys) {
        Reply::KeyList(keys) => assert_eq!(keys.len(), 100),
        other => panic!("{other:?}"),
    }
    // The driver holds 850 KiB of other connections' unread answers and partial frames.
    h.e.set_external_bytes(850 << 10);
    let a = h.req(1, Request::ListKeys);
    match closed(&a, 1) {
        Some(CloseReason::AnswerOverBudget {
            op: "LIST_KEYS",
            bytes,
            limit,
            room,
            budget,
        }) => {
            assert_eq!((bytes, limit), (size, 1 << 20));
            assert!(budget.contains("store quota"), "{budget}");
            assert!(room < size, "{room}");
        }
        other => panic!("{other:?}"),
    }
    assert!(sends_to(&a, 1).is_empty(), "no answer built");
}

#[test]
fn replies_say_which_bytes_are_their_own() {
    let mut h = H::new();
    h.conn(1);
    h.req(
        1,
        Request::Set {
            key: k("/o/k"),
            value: vec![b'v'; 1000],
        },
    );
    h.req(
        1,
        Request::QueuePush {
            key: k("/o/q"),
            value: vec![b'q'; 500],
        },
    );
    let owned = |a: Vec<Action>| -> Vec<usize> {
        a.into_iter()
            .filter_map(|a| match a {
                Action::Send { owned, .. } => Some(owned),
                _ => None,
            })
            .collect()
    };
    // A GET shares the stored value; a popped value left the store and is the reply's own.
    assert_eq!(owned(h.req(1, Request::Get { key: k("/o/k") })), [8]);
    assert_eq!(
        owned(h.req(1, Request::QueuePop { key: k("/o/q") })),
        [16 + 500]
    );
    assert_eq!(owned(h.req(1, Request::ListKeys)), [8 + 8 + 4]);
}

#[test]
fn the_servers_budget_binds_when_the_other_doors_hold_most_of_it() {
    // A 1 MiB store quota, in a server whose 1.5 MiB budget the other doors hold 1 MiB of.
    let mut h = quota(1 << 20);
    h.conn(1);
    let set = |h: &mut H, i: usize| {
        h.req(
            1,
            Request::Set {
                key: format!("/s/{i}").into_bytes(),
                value: vec![0; 100 << 10],
            },
        )
    };
    h.e.set_server_budget(Some(3 << 19), 1 << 20);
    let mut refused = None;
    for i in 0..12 {
        let a = set(&mut h, i);
        if let Some(r) = closed(&a, 1) {
            refused = Some((i, r));
            break;
        }
    }
    let (i, reason) = refused.expect("refused within the server's half MiB");
    assert!(i <= 5, "{i} writes of 100 KiB fit in half a MiB");
    match reason {
        CloseReason::QuotaExceeded { scope, limit, .. } => {
            assert_eq!(
                (scope, limit),
                ("server memory (--max-memory-bytes)", 3 << 19)
            );
            let text = reason.to_string();
            assert!(text.contains("--max-memory-bytes"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(h.e.held_bytes() <= 1 << 19, "{}", h.e.held_bytes());
    // The other doors let go: the store quota binds again, and names itself.
    h.conn(2);
    h.e.set_server_budget(Some(3 << 19), 0);
    let mut refused = None;
    for i in 20..40 {
        let a = h.req(
            2,
            Request::Set {
                key: format!("/s/{i}").into_bytes(),
                value: vec![0; 100 << 10],
            },
        );
        if let Some(r) = store_quota_refusal(&a, 2) {
            refused = Some(r);
            break;
        }
    }
    assert_eq!(refused.map(|r| r.1), Some(1 << 20));
    // LIST_KEYS names the server's budget when it is what leaves no room.
    h.conn(3);
    h.e.set_server_budget(Some(3 << 19), (3 << 19) - h.e.held_bytes());
    match closed(&h.req(3, Request::ListKeys), 3) {
        Some(CloseReason::AnswerOverBudget { budget, limit, .. }) => {
            assert!(budget.contains("--max-memory-bytes"), "{budget}");
            assert_eq!(limit, 3 << 19);
        }
        other => panic!("{other:?}"),
    }
}
