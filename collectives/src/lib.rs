//! # dtcomm
//!
//! The collective engine (work in progress).

pub mod config;
pub mod dtype;
pub mod error;
pub mod op;
pub(crate) mod reduce;
pub(crate) mod schedule;
