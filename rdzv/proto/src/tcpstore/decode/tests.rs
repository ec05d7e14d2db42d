//! Decoder tests: the byte traces of `reference/tcpstore-protocol.md` §5, split and coalesced
//! frames, limits, and a bounded property test.

use super::*;
use proptest::prelude::*;

/// Parses hex with spaces, and `…` style gaps written out in full by the caller.
fn hex(s: &str) -> Vec<u8> {
    let clean: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..clean.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&clean[i..i + 2], 16).unwrap())
        .collect()
}

fn one(bytes: &[u8]) -> Request {
    match decode(bytes, &Limits::default()).unwrap() {
        Decoded::Complete(r, used) => {
            assert_eq!(used, bytes.len(), "trailing bytes");
            r
        }
        other => panic!("incomplete: {other:?}"),
    }
}

#[test]
fn handshake_trace_is_two_requests_in_one_read() {
    let bytes = hex("00 cef7853c 0d 2f240000");
    let l = Limits::default();
    let Decoded::Complete(r, n) = decode(&bytes, &l).unwrap() else {
        panic!()
    };
    assert_eq!(r, Request::Validate { magic: 0x3C85F7CE });
    assert_eq!(n, 5);
    let Decoded::Complete(r, n2) = decode(&bytes[n..], &l).unwrap() else {
        panic!()
    };
    assert_eq!(r, Request::Ping { nonce: 9263 });
    assert_eq!(n + n2, bytes.len());
}

#[test]
fn reference_traces_decode() {
    let k = b"/k".to_vec();
    assert_eq!(
        one(&hex("01 0200000000000000 2f6b 0100000000000000 76")),
        Request::Set {
            key: k.clone(),
            value: b"v".to_vec()
        }
    );
    assert_eq!(
        one(&hex("06 0100000000000000 0200000000000000 2f6b")),
        Request::Wait {
            keys: vec![k.clone()]
        }
    );
    assert_eq!(
        one(&hex("03 0200000000000000 2f6b")),
        Request::Get { key: k.clone() }
    );
    assert_eq!(
        one(&hex("04 0200000000000000 2f63 feffffffffffffff")),
        Request::Add {
            key: b"/c".to_vec(),
            delta: -2
        }
    );
    assert_eq!(
        one(&hex(
            "02 0300000000000000 2f6d32 0100000000000000 78 0300000000000000 6e6577"
        )),
        Request::CompareSet {
            key: b"/m2".to_vec(),
            expected: b"x".to_vec(),
            desired: b"new".to_vec()
        }
    );
    assert_eq!(
        one(&hex(
            "0b 0200000000000000 0200000000000000 2f70 0100000000000000 31 0200000000000000 2f71 0200000000000000 3232"
        )),
        Request::MultiSet {
            pairs: vec![
                (b"/p".to_vec(), b"1".to_vec()),
                (b"/q".to_vec(), b"22".to_vec())
            ]
        }
    );
    assert_eq!(one(&hex("07")), Request::GetNumKeys);
    assert_eq!(one(&hex("11")), Request::ListKeys);
    assert_eq!(one(&hex("0c")), Request::CancelWait);
    assert_eq!(
        one(&hex("12 0400000000000000 2f626172 0100000000000000")),
        Request::Barrier {
            key: b"/bar".to_vec(),
            world_size: 1
        }
    );
    assert_eq!(
        one(&hex("0f 0300000000000000 2f7171")),
        Request::QueuePop {
            key: b"/qq".to_vec()
        }
    );
    assert_eq!(
        one(&hex("04 0500000000000000 696e69742f 0100000000000000")),
        Request::Add {
            key: b"init/".to_vec(),
            delta: 1
        }
    );
}

#[test]
fn every_byte_split_is_incomplete_until_the_end() {
    let req = Request::CompareSet {
        key: b"/torch.rendezvous.x".to_vec(),
        expected: b"".to_vec(),
        desired: b"Y2FuaW1hZGFt".to_vec(),
    };
    let bytes = req.encode();
    for cut in 0..bytes.len() {
        match decode(&bytes[..cut], &Limits::default()).unwrap() {
            Decoded::Incomplete { need } => assert!(need > cut && need <= bytes.len()),
            other => panic!("cut {cut}: {other:?}"),
        }
    }
    assert_eq!(one(&bytes), req);
}

#[test]
fn unknown_opcode_is_rejected() {
    assert_eq!(
        decode(&[0x63], &Limits::default()),
        Err(DecodeError::UnknownOpcode(0x63))
    );
    assert_eq!(
        decode(&[19], &Limits::default()),
        Err(DecodeError::UnknownOpcode(19))
    );
}

#[test]
fn limits_are_checked_on_the_length_prefix() {
    let l = Limits::default();
    // key of 9000 bytes: rejected with only the prefix buffered
    let mut b = vec![QueryType::Set as u8];
    b.extend_from_slice(&9000u64.to_le_bytes());
    assert!(matches!(
        decode(&b, &l),
        Err(DecodeError::KeyTooLong { len: 9000, .. })
    ));
    // key of exactly 8192 is fine
    let mut b = vec![QueryType::Get as u8];
    b.extend_from_slice(&8192u64.to_le_bytes());
    assert_eq!(decode(&b, &l), Ok(Decoded::Incomplete { need: 9 + 8192 }));
    // value of 8 MiB + 1 rejected, 8 MiB accepted
    for (len, ok) in [(8u64 << 20, true), ((8 << 20) + 1, false)] {
        let mut b = vec![QueryType::Set as u8];
        b.extend_from_slice(&1u64.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&len.to_le_bytes());
        let r = decode(&b, &l);
        assert_eq!(r.is_ok(), ok, "{len}: {r:?}");
    }
    // count above 131072, and a negative MULTI_SET count
    let mut b = vec![QueryType::Wait as u8];
    b.extend_from_slice(&131_073u64.to_le_bytes());
    assert!(matches!(
        decode(&b, &l),
        Err(DecodeError::TooManyKeys { .. })
    ));
    let mut b = vec![QueryType::MultiSet as u8];
    b.extend_from_slice(&(-1i64).to_le_bytes());
    assert!(matches!(
        decode(&b, &l),
        Err(DecodeError::TooManyKeys { count: -1, .. })
    ));
    // a frame past the frame cap
    let tight = Limits {
        max_frame_bytes: 64,
        ..l
    };
    let req = Request::MultiSet {
        pairs: (0..10).map(|i| (vec![b'k'; 4], vec![i; 8])).collect(),
    };
    assert!(matches!(
        decode(&req.encode(), &tight),
        Err(DecodeError::FrameTooLarge { .. })
    ));
}

#[test]
fn huge_count_with_few_bytes_allocates_little() {
    let mut b = vec![QueryType::MultiGet as u8];
    b.extend_from_slice(&131_072u64.to_le_bytes());
    assert!(matches!(
        decode(&b, &Limits::default()),
        Ok(Decoded::Incomplete { .. })
    ));
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn arb_request() -> impl Strategy<Value = Request> {
    let k = || arb_bytes(24);
    let v = || arb_bytes(64);
    let ks = || proptest::collection::vec(arb_bytes(24), 0..5);
    prop_oneof![
        any::<u32>().prop_map(|magic| Request::Validate { magic }),
        any::<u32>().prop_map(|nonce| Request::Ping { nonce }),
        (k(), v()).prop_map(|(key, value)| Request::Set { key, value }),
        (k(), v(), v()).prop_map(|(key, expected, desired)| Request::CompareSet {
            key,
            expected,
            desired
        }),
        k().prop_map(|key| Request::Get { key }),
        (k(), any::<i64>()).prop_map(|(key, delta)| Request::Add { key, delta }),
        ks().prop_map(|keys| Request::Check { keys }),
        ks().prop_map(|keys| Request::Wait { keys }),
        Just(Request::GetNumKeys),
        k().prop_map(|key| Request::DeleteKey { key }),
        (k(), v()).prop_map(|(key, value)| Request::Append { key, value }),
        ks().prop_map(|keys| Request::MultiGet { keys }),
        proptest::collection::vec((k(), v()), 0..4).prop_map(|pairs| Request::MultiSet { pairs }),
        Just(Request::CancelWait),
        (k(), v()).prop_map(|(key, value)| Request::QueuePush { key, value }),
        k().prop_map(|key| Request::QueuePop { key }),
        k().prop_map(|key| Request::QueueLen { key }),
        Just(Request::ListKeys),
        (k(), any::<i64>()).prop_map(|(key, world_size)| Request::Barrier { key, world_size }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any pipelined sequence of requests, delivered in arbitrary segments, decodes back to the
    /// same sequence, exactly as a driver with one buffer per connection would see it.
    #[test]
    fn pipelined_requests_survive_any_segmentation(
        reqs in proptest::collection::vec(arb_request(), 1..8),
        cuts in proptest::collection::vec(1usize..40, 1..64),
    ) {
        let mut stream = Vec::new();
        reqs.iter().for_each(|r| r.encode_into(&mut stream));
        let l = Limits::default();
        let mut buf: Vec<u8> = Vec::new();
        let mut got = Vec::new();
        let mut fed = 0;
        let mut cut = cuts.iter().cycle();
        while fed < stream.len() {
            let n = (*cut.next().unwrap()).min(stream.len() - fed);
            buf.extend_from_slice(&stream[fed..fed + n]);
            fed += n;
            while let Decoded::Complete(r, used) = decode(&buf, &l).unwrap() {
                got.push(r);
                buf.drain(..used);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, reqs);
    }

    /// The same with one [`Decoder`] per connection, which keeps its place between calls.
    #[test]
    fn one_decoder_survives_any_segmentation(
        reqs in proptest::collection::vec(arb_request(), 1..8),
        cuts in proptest::collection::vec(1usize..40, 1..64),
    ) {
        let mut stream = Vec::new();
        reqs.iter().for_each(|r| r.encode_into(&mut stream));
        let l = Limits::default();
        let mut d = Decoder::default();
        let mut buf: Vec<u8> = Vec::new();
        let mut got = Vec::new();
        let mut fed = 0;
        let mut cut = cuts.iter().cycle();
        while fed < stream.len() {
            let n = (*cut.next().unwrap()).min(stream.len() - fed);
            buf.extend_from_slice(&stream[fed..fed + n]);
            fed += n;
            while let Decoded::Complete(r, used) = d.decode(&buf, &l).unwrap() {
                got.push(r);
                buf.drain(..used);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(d.held_bytes(), 0);
        prop_assert_eq!(got, reqs);
    }

    /// Arbitrary bytes never panic the decoder, and a complete result never claims more bytes
    /// than it was given.
    #[test]
    fn garbage_never_panics(bytes in arb_bytes(256)) {
        if let Ok(Decoded::Complete(_, used)) = decode(&bytes, &Limits::default()) {
            prop_assert!(used <= bytes.len());
        }
    }
}

/// A decoder does not read a field twice: bytes it has read are not looked at again (here
/// they are overwritten after the first call, and the request still has the bytes first seen),
/// and a frame fed a byte at a time costs one look per byte.
#[test]
fn a_decoder_keeps_its_place_in_a_partial_frame() {
    let keys: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("/k/{i}").into_bytes())
        .collect();
    let frame = Request::Check { keys: keys.clone() }.encode();
    let l = Limits::default();
    let mut d = Decoder::default();
    let half = frame.len() / 2;
    let mut buf = frame[..half].to_vec();
    assert!(matches!(d.decode(&buf, &l), Ok(Decoded::Incomplete { .. })));
    assert!(d.held_bytes() > 0);
    // Clobber the first key's bytes: a decoder that starts again would read "/X/0".
    buf[9 + 8 + 1] = b'X';
    buf.extend_from_slice(&frame[half..]);
    let Ok(Decoded::Complete(Request::Check { keys: got }, used)) = d.decode(&buf, &l) else {
        panic!("incomplete");
    };
    assert_eq!(used, frame.len());
    assert_eq!(got, keys);
    assert_eq!(d.held_bytes(), 0);
    // Byte by byte: 20,000 keys (200 KB) in well under a second even unoptimised (re-reading
    // the frame from its start on every byte would copy ~20 GB).
    let t = std::time::Instant::now();
    let mut d = Decoder::default();
    let mut out = None;
    for end in 1..=frame.len() {
        if let Decoded::Complete(r, _) = d.decode(&frame[..end], &l).unwrap() {
            out = Some(r);
        }
    }
    assert_eq!(out, Some(Request::Check { keys }));
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
}
