//! The value and quota limits: appends past the value limit, appends to a value a reply still
//! holds, quotas that refuse writes past them with usage following every write, and answers
//! that depend on the engine's inputs only.

use super::*;

#[test]
fn append_past_the_value_limit_closes_and_keeps_the_value() {
    let mut h = H::with(EngineConfig {
        max_value_bytes: 10,
        ..EngineConfig::default()
    });
    h.conn(1);
    h.conn(2);
    let append = |v: &str| Request::Append {
        key: k("/a"),
        value: k(v),
    };
    assert!(h.req(1, append("0123456")).is_empty());
    // Exactly at the limit is allowed (torch's limit is inclusive).
    assert!(h.req(1, append("789")).is_empty());
    let actions = h.req(1, append("x"));
    assert_eq!(
        closed(&actions, 1),
        Some(CloseReason::ValueTooLarge {
            key: "/a".into(),
            size: 11,
            limit: 10
        })
    );
    assert_eq!(
        h.reply(2, Request::Get { key: k("/a") }),
        Reply::Bytes(k("0123456789"))
    );
}

#[test]
fn append_to_a_value_a_reply_still_holds_leaves_the_reply_alone() {
    let mut h = H::new();
    h.conn(1);
    h.req(
        1,
        Request::Set {
            key: k("/a"),
            value: k("ab"),
        },
    );
    h.send(1, Request::Get { key: k("/a") });
    let held = h.drain();
    h.req(
        1,
        Request::Append {
            key: k("/a"),
            value: k("cd"),
        },
    );
    assert_eq!(
        sends_to(&held, 1),
        [&2u64.to_le_bytes()[..], b"ab"].concat()
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/a") }),
        Reply::Bytes(k("abcd"))
    );
}

/// What the usage should be, recomputed from the maps.
fn recount(e: &Engine) -> u64 {
    let kv: usize = e.kv.iter().map(|(k, v)| k.len() + v.len()).sum();
    let q: usize = e
        .queues
        .iter()
        .map(|(k, q)| q.iter().map(|v| k.len() + v.len()).sum::<usize>())
        .sum();
    (kv + q) as u64
}

#[test]
fn quotas_refuse_writes_that_would_pass_them_and_usage_follows_every_write() {
    // The store quota counts the namespace bookkeeping too: a connection that wrote in a
    // one-letter namespace holds (1 + 64) + (1 + 128) bytes of it while open, 1 + 128 after.
    let mut h = H::with(EngineConfig {
        max_namespace_bytes: Some(100),
        max_store_bytes: Some(600),
        ..EngineConfig::default()
    });
    h.conn(1);
    let set = |k: &str, n: usize| Request::Set {
        key: k.as_bytes().to_vec(),
        value: vec![b'x'; n],
    };
    // "/a/k" is 4 bytes: 4 + 90 fits the namespace's 100, overwriting it too.
    assert!(h.req(1, set("/a/k", 90)).is_empty());
    assert!(h.req(1, set("/a/k", 96)).is_empty());
    assert_eq!(h.e.stored_bytes(), 100);
    assert_eq!(h.e.held_bytes(), 100 + 194);
    let actions = h.req(1, set("/a/j", 1));
    assert_eq!(
        closed(&actions, 1),
        Some(CloseReason::QuotaExceeded {
            op: "SET",
            key: "/a/j".into(),
            scope: "namespace",
            limit: 100
        })
    );
    assert_eq!(
        h.e.held_bytes(),
        100 + 129,
        "the closed connection's touch is gone"
    );
    h.conn(2);
    // Another namespace has its own 100, but the store's 600 is shared: 229 + 50 + 194 fit,
    // a queue in a third namespace (4 + 194 more) does not.
    assert!(h.req(2, set("/b/k", 46)).is_empty());
    let actions = h.req(
        2,
        Request::QueuePush {
            key: k("/c/q"),
            value: k("v"),
        },
    );
    assert!(matches!(
        closed(&actions, 2),
        Some(CloseReason::QuotaExceeded {
            scope: "store",
            limit: 600,
            ..
        })
    ));
    // Deleting frees room; every kind of write keeps the count exact (the rest checks the
    // count, not the quota).
    h.e.config.max_store_bytes = None;
    h.conn(3);
    assert_eq!(
        h.reply(3, Request::DeleteKey { key: k("/a/k") }),
        Reply::I64(1)
    );
    h.req(
        3,
        Request::Append {
            key: k("/a/k"),
            value: k("12"),
        },
    );
    h.req(
        3,
        Request::Append {
            key: k("/a/k"),
            value: k("34"),
        },
    );
    h.req(
        3,
        Request::QueuePush {
            key: k("/q/q"),
            value: k("abc"),
        },
    );
    h.req(
        3,
        Request::QueuePush {
            key: k("/q/q"),
            value: k("de"),
        },
    );
    h.req(3, Request::QueuePop { key: k("/q/q") });
    h.req(
        3,
        Request::Add {
            key: k("/n/c"),
            delta: 12345,
        },
    );
    h.req(
        3,
        Request::CompareSet {
            key: k("/n/c"),
            expected: k("12345"),
            desired: k("7"),
        },
    );
    h.req(
        3,
        Request::MultiSet {
            pairs: vec![(k("/m/1"), k("one")), (k("/m/1"), k("uno"))],
        },
    );
    assert_eq!(h.e.stored_bytes(), recount(&h.e));
    assert_eq!(h.e.purge_namespace(b"m"), 1);
    assert_eq!(h.e.stored_bytes(), recount(&h.e));
}

#[test]
fn what_the_engine_answers_depends_on_its_inputs_only() {
    // LIST_KEYS in key order, and purges of several namespaces in namespace order, whatever
    // order the keys were written in.
    let mut h = H::with(EngineConfig {
        namespace_ttl: Some(Duration::from_secs(1)),
        ..EngineConfig::default()
    });
    h.conn(1);
    for key in ["/z/1", "/b/1", "/m/1", "/a/1"] {
        h.ask(
            1,
            Request::Set {
                key: k(key),
                value: k("v"),
            },
        );
    }
    assert_eq!(
        h.reply(1, Request::ListKeys),
        Reply::KeyList(vec![k("/a/1"), k("/b/1"), k("/m/1"), k("/z/1")])
    );
    h.disconnect(1);
    h.e.handle_timeout(h.now + Duration::from_secs(1));
    let purged: Vec<String> = h
        .drain()
        .into_iter()
        .filter_map(|a| match a {
            Action::Purged { namespace, .. } => Some(namespace),
            _ => None,
        })
        .collect();
    assert_eq!(purged, ["a", "b", "m", "z"]);
}
