//! Engine tests: reply bytes from `reference/tcpstore-protocol.md` §5, wake-up rules, bad
//! input, and the namespace lifecycle on a virtual clock.

use std::time::{Duration, Instant};

use super::*;
use crate::tcpstore::reply::{Reply, decode_reply};
use crate::tcpstore::{Request, VALIDATE_MAGIC};

struct H {
    e: Engine,
    now: Instant,
}

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

impl H {
    fn new() -> Self {
        Self::with(EngineConfig::default())
    }
    fn with(config: EngineConfig) -> Self {
        Self {
            e: Engine::new(config),
            now: Instant::now(),
        }
    }
    /// Connects and validates.
    fn conn(&mut self, id: ConnId) {
        self.connect(id);
        self.send(
            id,
            Request::Validate {
                magic: VALIDATE_MAGIC,
            },
        );
        assert!(self.drain().is_empty());
    }
    fn connect(&mut self, id: ConnId) {
        self.e.handle(self.now, Input::Connected { conn: id });
    }
    fn disconnect(&mut self, id: ConnId) {
        self.e.handle(self.now, Input::Closed { conn: id });
    }
    /// Sends a request without taking what it caused.
    fn send(&mut self, id: ConnId, request: Request) {
        self.e
            .handle(self.now, Input::Request { conn: id, request });
    }
    fn drain(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.e.poll_action()).collect()
    }
    /// Sends a request; returns every action it caused.
    fn req(&mut self, id: ConnId, r: Request) -> Vec<Action> {
        self.send(id, r);
        self.drain()
    }
    /// Sends a request; returns the bytes sent back to `id`, concatenated.
    fn ask(&mut self, id: ConnId, r: Request) -> Vec<u8> {
        self.req(id, r)
            .into_iter()
            .filter_map(|a| match a {
                Action::Send { conn, bytes, .. } if conn == id => Some(bytes.concat()),
                _ => None,
            })
            .flatten()
            .collect()
    }
    fn reply(&mut self, id: ConnId, r: Request) -> Reply {
        let shape = r.reply_shape();
        let bytes = self.ask(id, r);
        let (reply, used) = decode_reply(shape, &bytes)
            .unwrap()
            .expect("complete reply");
        assert_eq!(used, bytes.len(), "extra reply bytes");
        reply
    }
}

fn sends_to(actions: &[Action], id: ConnId) -> Vec<u8> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send { conn, bytes, .. } if *conn == id => Some(bytes.concat()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn closed(actions: &[Action], id: ConnId) -> Option<CloseReason> {
    actions.iter().find_map(|a| match a {
        Action::Close { conn, reason } if *conn == id => Some(reason.clone()),
        _ => None,
    })
}

#[test]
fn reference_script_replies() {
    let mut h = H::new();
    h.conn(1);
    assert_eq!(h.ask(1, Request::Ping { nonce: 9263 }), [0x2f, 0x24, 0, 0]);
    assert!(
        h.ask(
            1,
            Request::Set {
                key: k("/k"),
                value: k("v")
            }
        )
        .is_empty()
    );
    assert_eq!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/k")]
            }
        ),
        [0]
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/k") }),
        Reply::Bytes(k("v"))
    );
    assert_eq!(
        h.ask(
            1,
            Request::Add {
                key: k("/c"),
                delta: 5
            }
        ),
        5i64.to_le_bytes()
    );
    assert_eq!(
        h.ask(
            1,
            Request::Add {
                key: k("/c"),
                delta: -2
            }
        ),
        3i64.to_le_bytes()
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/c") }),
        Reply::Bytes(k("3"))
    );
    assert_eq!(
        h.ask(
            1,
            Request::Check {
                keys: vec![k("/k"), k("/c")]
            }
        ),
        [0]
    );
    assert_eq!(
        h.ask(
            1,
            Request::Check {
                keys: vec![k("/k"), k("/zz")]
            }
        ),
        [1]
    );
    let cas = |key: &str, e: &str, d: &str| Request::CompareSet {
        key: k(key),
        expected: k(e),
        desired: k(d),
    };
    assert_eq!(h.reply(1, cas("/m1", "", "new")), Reply::Bytes(k("new")));
    assert_eq!(h.reply(1, cas("/m2", "x", "new")), Reply::Bytes(k("x")));
    assert_eq!(
        h.reply(1, cas("/m1", "new", "newer")),
        Reply::Bytes(k("newer"))
    );
    assert_eq!(
        h.reply(1, cas("/m1", "bogus", "zzz")),
        Reply::Bytes(k("newer"))
    );
    assert_eq!(h.reply(1, Request::GetNumKeys), Reply::I64(3));
    assert_eq!(
        h.reply(1, Request::DeleteKey { key: k("/k") }),
        Reply::I64(1)
    );
    assert_eq!(
        h.reply(1, Request::DeleteKey { key: k("/k") }),
        Reply::I64(0)
    );
    assert!(
        h.ask(
            1,
            Request::Append {
                key: k("/a"),
                value: k("x")
            }
        )
        .is_empty()
    );
    assert!(
        h.ask(
            1,
            Request::Append {
                key: k("/a"),
                value: k("y")
            }
        )
        .is_empty()
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/a") }),
        Reply::Bytes(k("xy"))
    );
    let ms = Request::MultiSet {
        pairs: vec![(k("/p"), k("1")), (k("/q"), k("22"))],
    };
    assert!(h.ask(1, ms).is_empty());
    assert_eq!(
        h.reply(
            1,
            Request::MultiGet {
                keys: vec![k("/p"), k("/q"), k("/none")]
            }
        ),
        Reply::ManyBytes(vec![k("1"), k("22"), vec![]])
    );
    let Reply::KeyList(mut keys) = h.reply(1, Request::ListKeys) else {
        panic!()
    };
    keys.sort();
    assert_eq!(keys, vec![k("/a"), k("/c"), k("/m1"), k("/p"), k("/q")]);
    assert!(
        h.ask(
            1,
            Request::QueuePush {
                key: k("/qq"),
                value: k("item1")
            }
        )
        .is_empty()
    );
    assert_eq!(
        h.reply(1, Request::QueueLen { key: k("/qq") }),
        Reply::I64(1)
    );
    assert_eq!(
        h.reply(1, Request::GetNumKeys),
        Reply::I64(5),
        "queues are not KV keys"
    );
    assert_eq!(
        h.ask(
            1,
            Request::Check {
                keys: vec![k("/qq")]
            }
        ),
        [0],
        "a non-empty queue is present"
    );
    assert_eq!(
        h.ask(1, Request::QueuePop { key: k("/qq") }),
        [&1i64.to_le_bytes()[..], &5u64.to_le_bytes(), b"item1"].concat()
    );
    assert_eq!(
        h.ask(1, Request::QueuePop { key: k("/qq") }),
        0i64.to_le_bytes()
    );
    assert_eq!(
        h.reply(1, Request::QueueLen { key: k("/qq") }),
        Reply::I64(0)
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/missing") }),
        Reply::Bytes(vec![])
    );
    assert_eq!(
        h.ask(
            1,
            Request::Barrier {
                key: k("/bar"),
                world_size: 1
            }
        ),
        [0]
    );
    // WAIT on a missing key parks; CANCEL_WAIT answers 01.
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/never")]
            }
        )
        .is_empty()
    );
    assert_eq!(h.ask(1, Request::CancelWait), [1]);
    // the connection stays usable and the cancelled wait is gone
    assert!(
        h.req(
            2,
            Request::Set {
                key: k("/never"),
                value: k("")
            }
        )
        .is_empty()
    );
    assert_eq!(h.ask(1, Request::Ping { nonce: 7 }), 7u32.to_le_bytes());
    // a bare CANCEL_WAIT still answers 01
    assert_eq!(h.ask(1, Request::CancelWait), [1]);
}

#[test]
fn wait_released_by_set_and_add_from_other_connections() {
    let mut h = H::new();
    (1..=3).for_each(|c| h.conn(c));
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/a"), k("/b")]
            }
        )
        .is_empty()
    );
    let a = h.req(
        2,
        Request::Set {
            key: k("/a"),
            value: k("1"),
        },
    );
    assert!(sends_to(&a, 1).is_empty(), "one key is still missing");
    let a = h.req(
        3,
        Request::Add {
            key: k("/b"),
            delta: 1,
        },
    );
    assert_eq!(sends_to(&a, 1), [0]);
    assert_eq!(sends_to(&a, 3), 1i64.to_le_bytes());
}

#[test]
fn every_writer_wakes_waiters() {
    let writers: Vec<Request> = vec![
        Request::Set {
            key: k("/w"),
            value: k("v"),
        },
        Request::Append {
            key: k("/w"),
            value: k("v"),
        },
        Request::MultiSet {
            pairs: vec![(k("/w"), k("v"))],
        },
        Request::CompareSet {
            key: k("/w"),
            expected: vec![],
            desired: k("v"),
        },
        Request::Add {
            key: k("/w"),
            delta: 1,
        },
        Request::QueuePush {
            key: k("/w"),
            value: k("v"),
        },
    ];
    for w in writers {
        let mut h = H::new();
        h.conn(1);
        h.conn(2);
        assert!(
            h.ask(
                1,
                Request::Wait {
                    keys: vec![k("/w")]
                }
            )
            .is_empty()
        );
        let a = h.req(2, w.clone());
        assert_eq!(sends_to(&a, 1), [0], "{w:?} did not wake");
    }
}

#[test]
fn delete_and_failed_compare_set_wake_nobody() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/w")]
            }
        )
        .is_empty()
    );
    let a = h.req(
        2,
        Request::CompareSet {
            key: k("/w"),
            expected: k("x"),
            desired: k("y"),
        },
    );
    assert!(
        sends_to(&a, 1).is_empty(),
        "no spurious wake-up (upstream bug not copied)"
    );
    assert_eq!(sends_to(&a, 2), [&1u64.to_le_bytes()[..], b"x"].concat());
    let a = h.req(2, Request::DeleteKey { key: k("/w") });
    assert!(sends_to(&a, 1).is_empty());
    assert_eq!(h.reply(2, Request::GetNumKeys), Reply::I64(0));
}

#[test]
fn duplicate_key_in_one_wait_is_woken_once() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/d"), k("/d")]
            }
        )
        .is_empty()
    );
    let a = h.req(
        2,
        Request::Set {
            key: k("/d"),
            value: k(""),
        },
    );
    assert_eq!(sends_to(&a, 1), [0]);
    let a = h.req(
        2,
        Request::Set {
            key: k("/d"),
            value: k(""),
        },
    );
    assert!(sends_to(&a, 1).is_empty());
}

#[test]
fn cancel_after_release_sends_00_then_01() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/x")]
            }
        )
        .is_empty()
    );
    // the release and the cancel race; the driver sees both through one FIFO, in order
    h.send(
        2,
        Request::Set {
            key: k("/x"),
            value: k(""),
        },
    );
    h.send(1, Request::CancelWait);
    assert_eq!(sends_to(&h.drain(), 1), [0, 1]);
}

#[test]
fn two_client_barrier_and_counter_is_decimal() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    h.conn(3);
    assert!(
        h.ask(
            3,
            Request::Wait {
                keys: vec![k("/bar")]
            }
        )
        .is_empty()
    );
    assert!(
        h.ask(
            1,
            Request::Barrier {
                key: k("/bar"),
                world_size: 2
            }
        )
        .is_empty()
    );
    let a = h.req(
        2,
        Request::Barrier {
            key: k("/bar"),
            world_size: 2,
        },
    );
    assert_eq!(sends_to(&a, 1), [0]);
    assert_eq!(sends_to(&a, 2), [0]);
    assert_eq!(
        sends_to(&a, 3),
        [0],
        "barrier completion wakes WAITs on the key"
    );
    assert_eq!(
        h.reply(1, Request::Get { key: k("/bar") }),
        Reply::Bytes(k("2"))
    );
}

#[test]
fn queue_push_wakes_only_the_first_waiter() {
    let mut h = H::new();
    (1..=3).for_each(|c| h.conn(c));
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/q")]
            }
        )
        .is_empty()
    );
    assert!(
        h.ask(
            2,
            Request::Wait {
                keys: vec![k("/q")]
            }
        )
        .is_empty()
    );
    let a = h.req(
        3,
        Request::QueuePush {
            key: k("/q"),
            value: k("1"),
        },
    );
    assert_eq!(sends_to(&a, 1), [0]);
    assert!(sends_to(&a, 2).is_empty());
    let a = h.req(
        3,
        Request::QueuePush {
            key: k("/q"),
            value: k("2"),
        },
    );
    assert_eq!(sends_to(&a, 2), [0]);
}

#[test]
fn bad_add_closes_only_that_connection_and_keeps_the_value() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    h.req(
        1,
        Request::Set {
            key: k("/s"),
            value: k("xyz"),
        },
    );
    assert!(
        h.ask(
            2,
            Request::Wait {
                keys: vec![k("/other")]
            }
        )
        .is_empty()
    );
    let a = h.req(
        1,
        Request::Add {
            key: k("/s"),
            delta: 1,
        },
    );
    assert!(matches!(
        closed(&a, 1),
        Some(CloseReason::Counter { op: "ADD", .. })
    ));
    assert_eq!(h.reply(2, Request::CancelWait), Reply::Byte(1));
    assert_eq!(
        h.reply(2, Request::Get { key: k("/s") }),
        Reply::Bytes(k("xyz"))
    );
    // the closed connection is forgotten: later requests on it do nothing
    assert!(h.req(1, Request::Ping { nonce: 1 }).is_empty());
    let a = h.req(
        2,
        Request::Barrier {
            key: k("/s"),
            world_size: 2,
        },
    );
    assert!(matches!(
        closed(&a, 2),
        Some(CloseReason::Counter { op: "BARRIER", .. })
    ));
}

#[test]
fn handshake_rules() {
    let mut h = H::new();
    h.connect(1);
    let a = h.req(1, Request::Ping { nonce: 1 });
    assert_eq!(closed(&a, 1), Some(CloseReason::NotValidated("PING")));
    h.connect(2);
    let a = h.req(2, Request::Validate { magic: 0xdead_beef });
    assert_eq!(closed(&a, 2), Some(CloseReason::BadMagic(0xdead_beef)));
    h.conn(3);
    let a = h.req(
        3,
        Request::Validate {
            magic: VALIDATE_MAGIC,
        },
    );
    assert_eq!(closed(&a, 3), Some(CloseReason::RepeatedValidate));
    assert_eq!(h.e.num_connections(), 0);
}

#[test]
fn disconnect_drops_waiters() {
    let mut h = H::new();
    h.conn(1);
    h.conn(2);
    assert!(
        h.ask(
            1,
            Request::Wait {
                keys: vec![k("/x")]
            }
        )
        .is_empty()
    );
    h.disconnect(1);
    let a = h.req(
        2,
        Request::Set {
            key: k("/x"),
            value: k(""),
        },
    );
    assert!(a.is_empty(), "{a:?}");
    assert!(h.e.waits.is_empty());
}

#[test]
fn thousand_waiters_are_all_released_once() {
    let mut h = H::new();
    for c in 0..1000 {
        h.conn(c);
        let n = h.ask(
            c,
            Request::Add {
                key: k("/arrived"),
                delta: 1,
            },
        );
        assert_eq!(n, (c as i64 + 1).to_le_bytes());
        assert!(
            h.ask(
                c,
                Request::Wait {
                    keys: vec![k("/go")]
                }
            )
            .is_empty()
        );
    }
    h.conn(5000);
    let a = h.req(
        5000,
        Request::Set {
            key: k("/go"),
            value: k("1"),
        },
    );
    assert_eq!(a.len(), 1000);
    for c in 0..1000 {
        assert_eq!(sends_to(&a, c), [0]);
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_op() -> impl Strategy<Value = (ConnId, Request)> {
        let key = prop_oneof![
            Just(k("/a")),
            Just(k("/b")),
            Just(k("/torch.rendezvous.j")),
            Just(k("init/"))
        ];
        let val = prop_oneof![Just(vec![]), Just(k("1")), Just(k("x"))];
        let req = prop_oneof![
            (key.clone(), val.clone()).prop_map(|(key, value)| Request::Set { key, value }),
            (key.clone(), val.clone(), val.clone()).prop_map(|(key, expected, desired)| {
                Request::CompareSet {
                    key,
                    expected,
                    desired,
                }
            }),
            (key.clone(), -3i64..3).prop_map(|(key, delta)| Request::Add { key, delta }),
            proptest::collection::vec(key.clone(), 0..3).prop_map(|keys| Request::Wait { keys }),
            Just(Request::CancelWait),
            key.clone().prop_map(|key| Request::DeleteKey { key }),
            (key.clone(), val.clone()).prop_map(|(key, value)| Request::QueuePush { key, value }),
            key.clone().prop_map(|key| Request::QueuePop { key }),
            (key.clone(), 0i64..4)
                .prop_map(|(key, world_size)| Request::Barrier { key, world_size }),
        ];
        (0u64..3, req)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Any interleaving of requests from three clients: nothing panics, a connection that
        /// is still open can always cancel, and once every client cancelled or left no waiter
        /// is left behind.
        #[test]
        fn waiters_never_leak(ops in proptest::collection::vec(arb_op(), 0..40), leave in any::<bool>()) {
            let mut h = H::new();
            (0..3).for_each(|c| h.conn(c));
            for (c, r) in ops {
                h.send(c, r);
                h.drain();
            }
            for c in 0..3 {
                if leave {
                    h.disconnect(c);
                } else {
                    h.send(c, Request::CancelWait);
                }
            }
            h.drain();
            prop_assert!(h.e.waits.is_empty(), "{:?}", h.e.waits);
        }
    }
}

mod budget;
mod limits;
mod namespaces;
