//! Clients of the c10d TCPStore wire protocol.
