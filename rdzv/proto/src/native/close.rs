//! QUIC application close codes of the native protocol: why the server closed a connection,
//! which tells a member whether to reconnect.

/// A normal close (the member left, the job ended, a request was refused): do not reconnect.
pub const CLOSE_NORMAL: u32 = 0;
/// The client opened no stream within the handshake timeout.
pub const CLOSE_NO_STREAM: u32 = 1;
/// The server is shutting down (a restart): members reconnect and resume their rounds.
pub const CLOSE_GOING_AWAY: u32 = 2;
