//! Clients of the native rendezvous protocol (QUIC + TLS 1.3, rkyv frames), feature `native`.
//!
//! * [`NativeClient`]: async; join a job, receive pushed rounds ([`Welcome`]), heartbeats in
//!   the background, leave / finish / publish, operator requests (status, stop); a member
//!   whose connection is lost by a server restart reconnects and resumes its round;
//! * [`BlockingNativeClient`]: the same with a private one-worker runtime, for callers without
//!   tokio (the collective engine, Python);
//! * [`NodeAgent`]: one connection for the ranks of a node, one heartbeat for all of them;
//! * [`MemberHandle`]: for a communicator of the member's process: hear at once when the
//!   server ends its round ([`RoundEnd`]), report a peer its links lost;
//! * [`Trust`]: pin the server's certificate fingerprint, or verify it against a CA file;
//! * [`NativeError`]: what went wrong, with the server's reasons.
//!
//! [`Welcome`]: dt_rdzv_proto::native::Welcome

mod agent;
mod blocking;
mod client;
mod config;
mod dial;
mod error;
mod session;
mod tls;
mod transport;
pub(crate) mod udp;
mod watch;

pub use agent::{NodeAgent, NodeGrant};
pub use blocking::BlockingNativeClient;
pub use client::{
    ClientConfig, Connector, DEFAULT_NATIVE_PORT, Joined, Membership, NativeClient, ProgressSource,
};
pub use error::NativeError;
#[cfg(feature = "server")]
pub(crate) use tls::provider;
pub use tls::{ALPN, Trust, client_config, fingerprint, parse_fingerprint, read_certs};
pub(crate) use transport::control_transport;
pub use watch::{MemberHandle, RoundEnd};
