//! # dt-rdzv
//!
//! The rendezvous server of dtcomm and the clients that talk to it.
//!
//! * [`store`]: the [`Store`](store::Store) trait, its in-memory twin and `PrefixStore`;
//! * [`client`]: clients of the c10d TCPStore wire protocol (blocking, std only);
//! * [`native`] (feature `native`): clients of the native rendezvous protocol (QUIC);
//! * `server` (feature `server`, on by default): the tokio server behind `dt-rdzv serve`.
//!
//! Without the `server` feature this crate has no tokio in it: that is how the collective
//! engine links it. The protocol itself (codec, store engine) lives in the sans-IO crate
//! [`dt_rdzv_proto`]; this crate only drives it.

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod client;
#[cfg(feature = "native")]
pub mod native;
#[cfg(feature = "server")]
pub mod server;
pub mod store;
