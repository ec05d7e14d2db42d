//! The native rendezvous from Rust: its settings with provenance ([`settings`], always built)
//! and one member's rounds ([`member`], feature `native`: it links dt-rdzv's QUIC client,
//! which the engine alone does not need).

pub mod member;
pub mod settings;

/// What a member knows of its rounds, kept by its session's machine (dt-rdzv-proto's).
pub use dt_rdzv_proto::native::member::{Rounds, Stop};
pub use member::{JoinError, Member, watch_round};
pub use settings::{NativeExplicit, NativeSettings, loose_bool, parse_members};
