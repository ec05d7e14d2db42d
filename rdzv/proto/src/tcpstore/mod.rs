//! The c10d TCPStore protocol (torch 2.15) and the engine that serves it.
//!
//! * [`QueryType`]: the 19 opcodes; [`Request`]: a decoded request;
//! * [`decode`]: the incremental request parser (split, coalesced, pipelined frames) that
//!   enforces [`Limits`] on length prefixes before the body arrives;
//! * [`reply`]: the reply shapes, for clients;
//! * [`Engine`]: the store (KV map, queues, waiters, counters, compare-set) and the namespace
//!   lifecycle that keeps a long-lived server clean between jobs; `handle(now, Input)`, then
//!   `poll_action()` and `poll_timeout()`;
//! * [`semantics`]: the value rules shared with in-memory twins.

mod decode;
mod engine;
mod limits;
mod namespace;
mod opcode;
pub mod reply;
mod request;
pub mod semantics;

pub use decode::{DecodeError, Decoded, Decoder, decode};
pub use engine::{
    Action, CloseReason, ConnId, DEFAULT_MAX_NAMESPACE_BYTES, DEFAULT_MAX_STORE_BYTES, Engine,
    EngineConfig, Input, MAX_WAITING_BYTES, PurgeReason, Stats,
};
pub use limits::Limits;
pub use namespace::namespace_of;
pub use opcode::{QueryType, VALIDATE_MAGIC};
pub use request::Request;

/// Reply byte of a completed WAIT or BARRIER (`WaitResponseType::STOP_WAITING`).
pub const STOP_WAITING: u8 = 0;
/// Reply byte of CANCEL_WAIT (`WaitResponseType::WAIT_CANCELED`).
pub const WAIT_CANCELED: u8 = 1;
/// CHECK reply when every key is present (`CheckResponseType::READY`).
pub const READY: u8 = 0;
/// CHECK reply when a key is missing (`CheckResponseType::NOT_READY`).
pub const NOT_READY: u8 = 1;
