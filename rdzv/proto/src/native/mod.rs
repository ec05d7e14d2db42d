//! The native rendezvous protocol (carried over QUIC by `dt-rdzv`): messages and their codec.
//!
//! * [`messages`]: [`ClientMsg`] and [`ServerMsg`] and the types inside them;
//! * [`member`]: a member's session rules (join, heartbeats, reconnect and resume, redirects),
//!   sans-IO;
//! * [`hang`]: why a job is stuck, from its members' summaries (`dt-rdzv status --hang`);
//! * [`codec`]: frames of magic, version and length around rkyv archives, validated on read;
//! * the QUIC application close codes ([`CLOSE_GOING_AWAY`]: reconnect and resume).

mod close;
pub mod codec;
pub mod hang;
pub mod member;
// rkyv derives undocumented public helper types for enum variants with fields; every item
// written here is documented.
#[allow(missing_docs)]
pub mod messages;
#[allow(missing_docs)]
pub mod progress;
mod round_end;

pub use close::{CLOSE_GOING_AWAY, CLOSE_NO_STREAM, CLOSE_NORMAL};
pub use codec::{
    CodecError, FrameReader, MAGIC, VERSION, decode_client, decode_server, encode_client,
    encode_server,
};
pub use messages::{
    ClientMsg, JobEnd, JobSpec, JobStatus, Join, LateJoin, MAX_DUMP_REASON_BYTES, MAX_HOST_BYTES,
    MAX_RELAYED, MemberStatus, NodeHello, Peer, RefusalCode, Relayed, Resume, Role, RoundCause,
    ServerMsg, Welcome,
};
pub use progress::{CallState, GroupProgress, PendingCall, Progress, ProgressError};
pub use round_end::RoundEnd;
