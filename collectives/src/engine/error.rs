//! What a step of the engine fails with: a call's error, or a link's (which the engine turns
//! into a call's error naming the call). Its own file so that the shared-memory collectives
//! below the engine can return it without importing the engine.

use crate::error::CommError;
use crate::transport::LinkError;

/// A failed step: the call's error, or the link's.
pub(crate) enum EngineError {
    Comm(CommError),
    Link(LinkError),
}

impl From<LinkError> for EngineError {
    fn from(e: LinkError) -> Self {
        EngineError::Link(e)
    }
}
