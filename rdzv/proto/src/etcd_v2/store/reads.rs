//! Reads (a key, or a directory one level or recursively, bounded by the answer limit) and
//! watches (an event from the history at once, or a pending watch for the next one).

use super::super::error::{ErrorCode, V2Error};
use super::super::event::{Action, Event};
use super::super::key::clean_key;
use super::super::node::NodeView;
use super::super::output::Answer;
use super::V2Store;

impl V2Store {
    /// Reads a key (`recursive`: the whole subtree; otherwise one level of a directory).
    pub(super) fn get(&mut self, key: &str, recursive: bool, now: u64) -> Result<Event, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        let depth = if recursive { usize::MAX } else { 1 };
        let node = self
            .lookup(&key)?
            .ok_or_else(|| self.err(ErrorCode::KeyNotFound, key.clone()))?;
        let size = {
            let size = node.view_bytes(&key, depth);
            let max = self.config.limits.max_answer_bytes;
            if size > max {
                return Err(V2Error::request(
                    ErrorCode::InvalidField,
                    format!(
                        "a read of {key} would answer with {size} bytes; the limit is {max} (read \
                         its children one by one, or a smaller subtree)",
                    ),
                ));
            }
            // Answers being sent count against one server-wide bound, and the byte budget.
            if self.answers_in_flight + size > max {
                return Err(self.err(
                    ErrorCode::RaftInternal,
                    format!(
                        "a read of {key} would answer with {size} bytes while {} bytes of \
                         answers are still being sent; the server-wide limit is {max} (retry)",
                        self.answers_in_flight
                    ),
                ));
            }
            self.check_quota(size)?;
            size
        };
        let mut view = node.view(&key, depth, Some(now));
        if key == "/" {
            view = NodeView {
                key: None,
                modified: None,
                created: None,
                expiration_ms: None,
                ttl: None,
                ..view
            };
        }
        self.answer_bytes = size;
        Ok(Event {
            action: Action::Get,
            node: view,
            prev: None,
            index: self.index,
        })
    }

    /// Starts a watch: the first kept event at or after `wait_index` that it sees, or a
    /// pending watch for the next one (after the current index without `wait_index`).
    pub(super) fn watch(
        &mut self,
        key: &str,
        recursive: bool,
        wait_index: Option<u64>,
        now: u64,
    ) -> Result<Answer, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        let since = match wait_index {
            Some(i) if i > 0 => {
                if let Some(e) = self.watches.scan(&key, recursive, i, self.index)? {
                    return Ok(Answer::Watched(Event {
                        index: self.index,
                        ..e
                    }));
                }
                i
            }
            _ => self.index + 1,
        };
        if self.watches.pending() >= self.config.limits.max_watches {
            return Err(self.err(
                ErrorCode::RaftInternal,
                format!(
                    "{} watches are pending; the limit is {}",
                    self.watches.pending(),
                    self.config.limits.max_watches
                ),
            ));
        }
        let watch = self.watches.add(key, recursive, since);
        Ok(Answer::Pending {
            watch,
            index: self.index,
        })
    }
}
