//! torchft's messages (`rdzv/proto/torchft/lighthouse.proto`) as hand-written prost structs:
//! no protoc in the build. A requester's `QuorumMember` is kept as the bytes it sent
//! ([`QuorumRequest::requester`]) and quorums carry those bytes back
//! ([`QuorumWire::participants`]; an embedded message and `bytes` are the same on the wire),
//! so fields a newer torchft adds reach the other members unchanged.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use dt_rdzv_proto::torchft::{Member, Quorum};

/// `LighthouseQuorumRequest`, its requester undecoded.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct QuorumRequest {
    /// `QuorumMember requester = 1`, as sent.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub(crate) requester: Option<Bytes>,
}

/// The `QuorumMember` fields the Lighthouse reads.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct QuorumMember {
    #[prost(string, tag = "1")]
    pub(crate) replica_id: String,
    #[prost(string, tag = "2")]
    pub(crate) address: String,
    #[prost(string, tag = "3")]
    pub(crate) store_address: String,
    #[prost(int64, tag = "4")]
    pub(crate) step: i64,
    #[prost(uint64, tag = "5")]
    pub(crate) world_size: u64,
    #[prost(bool, tag = "6")]
    pub(crate) shrink_only: bool,
    #[prost(string, tag = "7")]
    pub(crate) data: String,
    #[prost(int64, tag = "8")]
    pub(crate) commit_failures: i64,
}

impl QuorumMember {
    /// The core's member: these fields, and `wire` as received.
    pub(crate) fn into_member(self, wire: Bytes) -> Member {
        Member {
            replica_id: self.replica_id,
            address: self.address,
            store_address: self.store_address,
            step: self.step,
            world_size: self.world_size,
            shrink_only: self.shrink_only,
            data: self.data,
            commit_failures: self.commit_failures,
            wire,
        }
    }
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub(crate) struct Timestamp {
    #[prost(int64, tag = "1")]
    pub(crate) seconds: i64,
    #[prost(int32, tag = "2")]
    pub(crate) nanos: i32,
}

/// `Quorum`, its participants as their requesters sent them.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct QuorumWire {
    #[prost(int64, tag = "1")]
    pub(crate) quorum_id: i64,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub(crate) participants: Vec<Bytes>,
    #[prost(message, optional, tag = "3")]
    pub(crate) created: Option<Timestamp>,
}

/// `LighthouseQuorumResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct QuorumResponse {
    #[prost(message, optional, tag = "1")]
    pub(crate) quorum: Option<QuorumWire>,
}

/// `LighthouseHeartbeatRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HeartbeatRequest {
    #[prost(string, tag = "1")]
    pub(crate) replica_id: String,
}

/// `LighthouseHeartbeatResponse` (and `KillResponse`): empty.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Empty {}

/// `KillRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KillRequest {
    #[prost(string, tag = "1")]
    pub(crate) msg: String,
}

/// The Unix time of `t`, by the wall clock now.
pub(crate) fn unix_time(t: Instant) -> SystemTime {
    let (now, wall) = (Instant::now(), SystemTime::now());
    wall.checked_sub(now.saturating_duration_since(t))
        .unwrap_or(wall)
}

impl QuorumWire {
    /// A quorum as it goes on the wire.
    pub(crate) fn of(q: &Quorum) -> Self {
        let d = unix_time(q.created)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            quorum_id: q.quorum_id,
            participants: q.participants.iter().map(|m| m.wire.clone()).collect(),
            created: Some(Timestamp {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// A `QuorumMember` with a field this module does not name (a newer torchft's) goes back
    /// whole, and decodes as a member of the quorum.
    #[test]
    fn participants_verbatim() {
        let m = QuorumMember {
            replica_id: "r:1".into(),
            step: 7,
            world_size: 2,
            data: "{\"k\":1}".into(),
            ..Default::default()
        };
        let mut wire = m.encode_to_vec();
        // field 9, length-delimited "h": an unknown repeated string.
        wire.extend_from_slice(&[0x4a, 1, b'h']);
        let req = QuorumRequest {
            requester: Some(Bytes::from(wire.clone())),
        }
        .encode_to_vec();
        let got = QuorumRequest::decode(&req[..]).unwrap().requester.unwrap();
        let member = QuorumMember::decode(got.clone()).unwrap().into_member(got);
        assert_eq!(member.replica_id, "r:1");
        let q = Quorum {
            quorum_id: 3,
            participants: vec![member].into(),
            created: Instant::now(),
        };
        let resp = QuorumResponse {
            quorum: Some(QuorumWire::of(&q)),
        }
        .encode_to_vec();
        let back = QuorumResponse::decode(&resp[..]).unwrap().quorum.unwrap();
        assert_eq!(back.quorum_id, 3);
        assert_eq!(&back.participants[0][..], &wire[..]);
        assert!(back.created.unwrap().seconds > 1_700_000_000);
    }
}
