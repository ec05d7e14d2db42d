//! The native rendezvous from Rust: its settings with provenance ([`settings`], always built)
//! and one member's rounds ([`member`], feature `native`: it links dt-rdzv's QUIC client,
//! which the engine alone does not need).

#[cfg(feature = "native")]
pub mod member;
#[cfg(feature = "native")]
pub mod round_state;
pub mod settings;

#[cfg(feature = "native")]
pub use member::{JoinError, Member, watch_round};
#[cfg(feature = "native")]
pub use round_state::{RoundState, Stop};
pub use settings::{NativeExplicit, NativeSettings, loose_bool, parse_members};
