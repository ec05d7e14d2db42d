//! The namespace lifecycle on a virtual clock: a new torchelastic run after the old one is
//! gone starts clean, idle namespaces expire after the TTL (or never), an explicit purge.

use super::*;

fn state_key() -> Vec<u8> {
    k("/torch.rendezvous.job")
}

fn agent_start(h: &mut H, id: ConnId) -> Reply {
    h.conn(id);
    h.reply(
        id,
        Request::CompareSet {
            key: state_key(),
            expected: vec![],
            desired: k("Y2FuaW1hZGFt"),
        },
    )
}

#[test]
fn new_torchelastic_run_after_the_old_one_is_gone_starts_clean() {
    let mut h = H::new();
    assert_eq!(agent_start(&mut h, 1), Reply::Bytes(k("Y2FuaW1hZGFt")));
    assert_eq!(agent_start(&mut h, 2), Reply::Bytes(k("Y2FuaW1hZGFt")));
    let cas = Request::CompareSet {
        key: state_key(),
        expected: k("Y2FuaW1hZGFt"),
        desired: k("closed-state"),
    };
    assert_eq!(h.reply(1, cas), Reply::Bytes(k("closed-state")));
    h.req(
        1,
        Request::Set {
            key: k("/torch.rendezvous.job.0/MASTER_ADDR"),
            value: k("a"),
        },
    );
    h.req(
        1,
        Request::Set {
            key: k("/other"),
            value: k("kept"),
        },
    );
    // a third agent while the run is alive sees the live state
    assert_eq!(agent_start(&mut h, 3), Reply::Bytes(k("closed-state")));
    for c in 1..=3 {
        h.disconnect(c);
    }
    // the next run with the same id starts from nothing
    h.connect(4);
    h.send(
        4,
        Request::Validate {
            magic: VALIDATE_MAGIC,
        },
    );
    let a = h.req(
        4,
        Request::CompareSet {
            key: state_key(),
            expected: vec![],
            desired: k("Y2FuaW1hZGFt"),
        },
    );
    assert!(
        a.iter().any(|x| matches!(
            x,
            Action::Purged {
                reason: PurgeReason::NewTorchelasticRun,
                removed: 2,
                ..
            }
        )),
        "{a:?}"
    );
    assert_eq!(
        sends_to(&a, 4),
        [&12u64.to_le_bytes()[..], b"Y2FuaW1hZGFt"].concat()
    );
    assert_eq!(
        h.reply(
            4,
            Request::Get {
                key: k("/torch.rendezvous.job.0/MASTER_ADDR")
            }
        ),
        Reply::Bytes(vec![])
    );
    assert_eq!(
        h.reply(4, Request::Get { key: k("/other") }),
        Reply::Bytes(k("kept"))
    );
}

#[test]
fn idle_namespaces_expire_after_the_ttl() {
    let ttl = Duration::from_secs(60);
    let mut h = H::with(EngineConfig {
        namespace_ttl: Some(ttl),
        ..EngineConfig::default()
    });
    h.conn(1);
    h.req(
        1,
        Request::Set {
            key: k("/default_pg/0//cpu//0/1"),
            value: k("addr"),
        },
    );
    h.req(
        1,
        Request::QueuePush {
            key: k("/default_pg/q"),
            value: k("x"),
        },
    );
    h.req(
        1,
        Request::Set {
            key: k("/jobB/x"),
            value: k("1"),
        },
    );
    assert_eq!(
        h.e.poll_timeout(),
        None,
        "nothing is idle while a connection is open"
    );
    h.disconnect(1);
    assert_eq!(h.e.poll_timeout(), Some(h.now + ttl));
    // jobB is touched again before the TTL: it lives on
    h.now += Duration::from_secs(30);
    h.conn(2);
    h.reply(2, Request::Get { key: k("/jobB/x") });
    h.now += Duration::from_secs(31);
    h.e.handle_timeout(h.now);
    let a = h.drain();
    assert!(a.iter().any(|x| matches!(x, Action::Purged { namespace, removed: 2, reason: PurgeReason::Idle } if namespace == "default_pg")), "{a:?}");
    assert_eq!(
        h.reply(2, Request::Get { key: k("/jobB/x") }),
        Reply::Bytes(k("1"))
    );
    assert_eq!(
        h.reply(
            2,
            Request::QueueLen {
                key: k("/default_pg/q")
            }
        ),
        Reply::I64(0)
    );
    assert_eq!(h.reply(2, Request::GetNumKeys), Reply::I64(1));
}

#[test]
fn ttl_none_keeps_everything() {
    let mut h = H::with(EngineConfig {
        namespace_ttl: None,
        ..EngineConfig::default()
    });
    h.conn(1);
    h.req(
        1,
        Request::Set {
            key: k("/a"),
            value: k("1"),
        },
    );
    h.disconnect(1);
    assert_eq!(h.e.poll_timeout(), None);
    h.e.handle_timeout(h.now + Duration::from_secs(1_000_000));
    assert_eq!(h.e.num_keys(), 1);
}

#[test]
fn explicit_purge() {
    let mut h = H::new();
    h.conn(1);
    h.req(
        1,
        Request::Set {
            key: k("/j/a"),
            value: k("1"),
        },
    );
    h.req(
        1,
        Request::Set {
            key: k("/j/b"),
            value: k("1"),
        },
    );
    h.req(
        1,
        Request::Set {
            key: k("/k"),
            value: k("1"),
        },
    );
    assert_eq!(h.e.purge_namespace(b"j"), 2);
    assert_eq!(h.e.num_keys(), 1);
}
