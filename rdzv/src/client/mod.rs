//! Clients of the c10d TCPStore wire protocol.
//!
//! [`TcpStoreClient`] is blocking and std-only (no tokio), for the collective engine, the CLI
//! and tests. It speaks to `dt-rdzv serve` and to torch's own TCPStore server alike, and puts
//! keys on the wire the way torch's client does (`/` + key), so both see the same keys.

mod blocking;
mod endpoint;

pub use blocking::{ClientOptions, TcpStoreClient};
pub use endpoint::parse_endpoint;
