//! [`Input`]: what a driver tells the store.

use super::request::V2Request;
use super::watch::WatchId;

/// A driver's name for one client connection (runs are live while a connection that touched
/// them is open, see [`super::namespace`]).
pub type ConnId = u64;

/// What the driver tells the store, with the time it happened
/// ([`V2Store::handle`](super::V2Store::handle)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A parsed `/v2/keys` request; its [`Answer`](super::Answer) comes back as
    /// [`Output::Answer`](super::Output::Answer).
    Request {
        /// The connection it came on.
        conn: ConnId,
        /// The key, as the URL names it (cleaned by the store).
        key: String,
        /// What is asked.
        request: V2Request,
    },
    /// The client of a pending watch went away: forget the watch.
    Cancel {
        /// The watch.
        watch: WatchId,
    },
    /// A connection closed: the runs only it touched go idle.
    Closed {
        /// Which.
        conn: ConnId,
    },
}
