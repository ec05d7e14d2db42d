//! Rate limits for repeated log lines: at most [`LINES_PER_SECOND`] lines per reason per
//! second; the lines dropped are counted and reported with the next line let through ("
//! suppressed K similar lines").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines of one reason let through per one-second window.
pub(crate) const LINES_PER_SECOND: u32 = 5;

#[derive(Debug)]
struct Window {
    start: Instant,
    logged: u32,
    suppressed: u64,
}

/// Per-reason windows. Sans-IO: time comes in as an argument.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    windows: Mutex<HashMap<&'static str, Window>>,
}

impl LogLimiter {
    /// Whether a line of `reason` may be logged at `now`: `Some(k)` with the number of lines
    /// of that reason suppressed since the last one logged, or `None` to drop it.
    pub(crate) fn check(&self, reason: &'static str, now: Instant) -> Option<u64> {
        let mut g = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let w = g.entry(reason).or_insert(Window {
            start: now,
            logged: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(w.start) >= Duration::from_secs(1) {
            w.start = now;
            w.logged = 0;
        }
        if w.logged < LINES_PER_SECOND {
            w.logged += 1;
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }
}

/// The process-wide limiter used by [`warn_limited!`].
pub(crate) fn global() -> &'static LogLimiter {
    static L: std::sync::OnceLock<LogLimiter> = std::sync::OnceLock::new();
    L.get_or_init(LogLimiter::default)
}

/// `tracing::warn!` (or `info`) limited per reason: `limited!(warn, "reason", fields...; "msg")`.
/// The message is the reason; a `suppressed` field counts the similar lines dropped since.
macro_rules! limited {
    ($level:ident, $reason:literal $(, $($field:tt)+)?) => {
        if let Some(suppressed) =
            $crate::server::ratelog::global().check($reason, std::time::Instant::now())
        {
            if suppressed > 0 {
                tracing::$level!($($($field)+,)? suppressed, concat!($reason, " (suppressed similar lines)"));
            } else {
                tracing::$level!($($($field)+,)? $reason);
            }
        }
    };
}
pub(crate) use limited;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_n_per_second_per_reason_then_a_count() {
        let l = LogLimiter::default();
        let t = Instant::now();
        for _ in 0..LINES_PER_SECOND {
            assert_eq!(l.check("a", t), Some(0));
        }
        assert_eq!(l.check("a", t), None);
        assert_eq!(l.check("a", t + Duration::from_millis(500)), None);
        // Another reason has its own window.
        assert_eq!(l.check("b", t), Some(0));
        // Next second: the first line carries the count of the two dropped.
        assert_eq!(l.check("a", t + Duration::from_secs(1)), Some(2));
        assert_eq!(l.check("a", t + Duration::from_secs(1)), Some(0));
    }
}
