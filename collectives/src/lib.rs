//! # dtcomm
//!
//! The collective engine (work in progress).
