//! The c10d TCPStore protocol (torch 2.15) and the engine that serves it.

pub mod semantics;
