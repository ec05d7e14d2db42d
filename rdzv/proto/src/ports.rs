//! The default ports of `dt-rdzv serve`'s doors, one source for every crate (the server's
//! flags, the clients' endpoint parsers, the engine's launch rules) and, through the Python
//! extension, for `dtcomm`'s Python side. Each is overridable where it is used.

/// The c10d TCPStore door (`--port`): torch's store clients, `env://`, torchrun's static
/// rendezvous.
pub const STORE: u16 = 29400;
/// The native QUIC door (`--native-port`): native rounds, `dtrun`, operators.
pub const NATIVE: u16 = 29401;
/// The HTTP door (`--http-port`): `/healthz`, `/metrics`, the status page.
pub const HTTP: u16 = 29402;
