//! The TCPStore door (mirrors `dt_rdzv_proto::tcpstore`): torch's `TCPStore` wire protocol on
//! the TCPStore port.
//!
//! * `listener`: the dual-stack listening socket (socket2: backlog, NODELAY, keepalive) and
//!   the tuning of each accepted socket;
//! * `core`: the store engine and the per-connection outboxes, behind the server's one
//!   `Driver`, so a reply and the wake-ups other connections cause reach each client in engine
//!   order;
//! * `conn`: one task per TCPStore connection: read, decode, handle, write, with deadlines
//!   and a bound on its queued replies.
//!
//! With `--backend`, the server that does not hold the door relays its connections
//! (`ha::relay`).

pub(super) mod conn;
pub(super) mod core;
pub(super) mod listener;
