use proptest::prelude::*;

use super::*;
use crate::native::messages::*;

fn join(member: &str) -> ClientMsg {
    ClientMsg::Join(Join {
        job: "job-1".into(),
        token: "t".into(),
        member: member.into(),
        node: "host-a".into(),
        addrs: vec!["10.0.0.1:29500".into(), "[fe80::1]:29500".into()],
        host: vec![7; 32],
        role: Role::Main,
        spec: JobSpec::elastic(2, 8),
        resume: None,
    })
}

#[test]
fn round_trips_through_a_frame() {
    let msg = join("a:0");
    let bytes = encode_client(&msg);
    assert_eq!(&bytes[..4], b"DTRZ");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), VERSION);
    let (range, used) = split_frame(&bytes, DEFAULT_MAX_PAYLOAD).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(decode_client(&bytes[range]).unwrap(), msg);
}

#[test]
fn incomplete_frames_wait_and_pipelined_frames_split() {
    let a = encode_client(&join("a"));
    let b = encode_client(&ClientMsg::Heartbeat { seq: 7 });
    let mut r = FrameReader::new(DEFAULT_MAX_PAYLOAD);
    let all = [a.clone(), b].concat();
    for chunk in all.chunks(5) {
        r.push(chunk);
    }
    assert_eq!(
        decode_client(&r.next_payload().unwrap().unwrap()).unwrap(),
        join("a")
    );
    assert_eq!(
        decode_client(&r.next_payload().unwrap().unwrap()).unwrap(),
        ClientMsg::Heartbeat { seq: 7 }
    );
    assert_eq!(r.next_payload().unwrap(), None);
    let mut r = FrameReader::new(DEFAULT_MAX_PAYLOAD);
    r.push(&a[..a.len() - 1]);
    assert_eq!(r.next_payload().unwrap(), None);
    assert_eq!(r.buffered(), a.len() - 1);
}

#[test]
fn garbage_wrong_version_flags_and_oversize_are_errors() {
    assert!(matches!(
        decode_header(b"GET / HTTP/1.1\r\n", 1 << 20),
        Err(CodecError::BadMagic(m)) if &m == b"GET "
    ));
    assert!(matches!(
        decode_header(b"DX", 1 << 20),
        Err(CodecError::BadMagic(_))
    ));
    assert_eq!(decode_header(b"DT", 1 << 20), Ok(None));
    let mut f = encode_client(&ClientMsg::Leave);
    f[4] = 9;
    assert_eq!(
        decode_header(&f, 1 << 20),
        Err(CodecError::Version {
            got: 9,
            ours: VERSION
        })
    );
    let mut f = encode_client(&ClientMsg::Leave);
    f[6] = 1;
    assert_eq!(decode_header(&f, 1 << 20), Err(CodecError::Flags(1)));
    let f = encode_client(&join("x"));
    assert!(matches!(
        decode_header(&f, 8),
        Err(CodecError::TooLong { max: 8, .. })
    ));
    // A valid header around bytes that are no archive.
    let mut f = frame(&[0xff; 40]);
    assert!(matches!(
        decode_client(&f[HEADER_LEN..]),
        Err(CodecError::Invalid(_))
    ));
    f.truncate(HEADER_LEN);
    assert!(decode_client(&f[HEADER_LEN..]).is_err(), "empty payload");
}

#[test]
fn server_messages_round_trip() {
    let msgs = vec![
        ServerMsg::Refused {
            code: RefusalCode::BadToken,
            message: "no".into(),
        },
        ServerMsg::Redirect {
            job: "j".into(),
            endpoint: "10.0.0.2:29401".into(),
            why: "owned by server b".into(),
        },
        ServerMsg::JobEnded {
            job: "j".into(),
            end: JobEnd::JoinTimeout {
                round: 2,
                have: 3,
                min: 4,
                waited_ms: 600_000,
                missing: vec!["b:0".into()],
            },
        },
        ServerMsg::Welcome(Welcome {
            job: "j".into(),
            round: 3,
            cause: RoundCause::MemberLost {
                member: "c".into(),
                rank: 2,
                why: "silent".into(),
            },
            rank: 1,
            world: 2,
            local_rank: 0,
            local_world: 1,
            node_rank: 1,
            nodes: 2,
            peers: vec![Peer {
                rank: 0,
                member: "a".into(),
                node: "h".into(),
                addrs: vec!["1.2.3.4:5".into()],
                host: vec![1, 2, 3],
                observed_ip: "1.2.3.4".into(),
            }]
            .into(),
            all_peers: true,
            config: vec![("k".into(), vec![1, 2, 3])].into(),
            heartbeat_interval_ms: 500,
            heartbeat_timeout_ms: 2000,
            restarts: 1,
        }),
    ];
    for m in msgs {
        let f = encode_server(&m);
        assert_eq!(decode_server(&f[HEADER_LEN..]).unwrap(), m);
    }
}

fn arb_client() -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        (
            ".{0,40}",
            ".{0,20}",
            ".{0,40}",
            proptest::collection::vec(".{0,30}", 0..4),
            1u32..5000,
            any::<bool>()
        )
            .prop_map(
                |(job, token, member, addrs, n, main)| ClientMsg::Join(Join {
                    job,
                    token,
                    member,
                    node: "n".into(),
                    addrs,
                    host: Vec::new(),
                    role: if main { Role::Main } else { Role::Worker },
                    spec: JobSpec::elastic(1, n),
                    resume: None,
                })
            ),
        any::<u64>().prop_map(|seq| ClientMsg::Heartbeat { seq }),
        (".{0,20}", proptest::collection::vec(any::<u8>(), 0..200))
            .prop_map(|(key, value)| ClientMsg::Publish { key, value }),
        proptest::collection::vec(any::<u32>(), 0..50)
            .prop_map(|ranks| ClientMsg::Lookup { ranks }),
        (".{0,20}", proptest::option::of(".{0,20}"))
            .prop_map(|(token, job)| ClientMsg::Status { token, job }),
        Just(ClientMsg::Leave),
        Just(ClientMsg::Finish),
        Just(ClientMsg::NextRound),
    ]
}

proptest! {
    #[test]
    fn any_client_message_round_trips(msg in arb_client()) {
        let f = encode_client(&msg);
        let mut r = FrameReader::new(DEFAULT_MAX_PAYLOAD);
        r.push(&f);
        let p = r.next_payload().unwrap().unwrap();
        prop_assert_eq!(decode_client(&p).unwrap(), msg);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut r = FrameReader::new(4096);
        r.push(&bytes);
        if let Ok(Some(p)) = r.next_payload() {
            let _ = decode_client(&p);
        }
        let _ = decode_client(&bytes);
        let _ = decode_server(&bytes);
    }

    #[test]
    fn a_flipped_bit_never_panics_and_one_in_the_header_is_refused(msg in arb_client(), at in any::<usize>(), bit in 0u8..8) {
        let mut f = encode_client(&msg);
        let i = at % f.len();
        f[i] ^= 1 << bit;
        let split = split_frame(&f, DEFAULT_MAX_PAYLOAD);
        if i < 8 {
            // Magic, version and flags: the frame is refused outright.
            prop_assert!(split.is_err(), "flip at byte {} accepted: {:?}", i, split);
        } else if i < HEADER_LEN {
            // The length: the frame is cut elsewhere, so it is never the original payload.
            if let Ok(Some((range, _))) = &split {
                prop_assert_ne!(range.len(), f.len() - HEADER_LEN);
            }
        } else if let Ok(Some((range, _))) = split {
            // The payload: an error or some message, never a panic.
            let _ = decode_client(&f[range]);
        } else {
            prop_assert!(false, "a payload flip must not change the framing: {:?}", split);
        }
    }
}

/// A welcome's shared lists (`Arc`, `Unshare`) are archived exactly as the plain lists they
/// were: the wire format did not change, so older members and servers still read them.
#[test]
fn shared_lists_encode_as_plain_lists() {
    use std::sync::Arc;

    #[derive(rkyv::Archive, rkyv::Serialize)]
    struct Plain {
        config: Vec<(String, Vec<u8>)>,
        value: Vec<u8>,
    }
    #[derive(rkyv::Archive, rkyv::Serialize)]
    struct Shared {
        #[rkyv(with = rkyv::with::Unshare)]
        config: Arc<Vec<(String, Vec<u8>)>>,
        #[rkyv(with = rkyv::with::Unshare)]
        value: Arc<Vec<u8>>,
    }
    let config = vec![("k".to_string(), vec![7u8; 300]), ("l".into(), vec![])];
    let value = vec![1u8, 2, 3];
    let plain = rkyv::to_bytes::<rkyv::rancor::Error>(&Plain {
        config: config.clone(),
        value: value.clone(),
    })
    .unwrap();
    let shared = rkyv::to_bytes::<rkyv::rancor::Error>(&Shared {
        config: Arc::new(config),
        value: Arc::new(value),
    })
    .unwrap();
    assert_eq!(plain.as_slice(), shared.as_slice());
}
