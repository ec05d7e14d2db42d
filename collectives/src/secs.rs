//! Seconds given as floating-point numbers (environment variables, C and Python arguments)
//! turned into [`Duration`]s and deadlines without the panics of `Duration::from_secs_f64`
//! (which aborts on NaN, on negatives and past about 5.8e11 years) or of `Instant + Duration`.

use std::time::{Duration, Instant};

/// The longest wait or timeout taken: 100 years (anything longer means "no limit").
pub const MAX_SECONDS: f64 = 100.0 * 365.0 * 86_400.0;

/// `secs` as a limit a user set: finite, not negative, at most [`MAX_SECONDS`]; the error says
/// which rule `secs` broke (the caller adds the variable's name and value).
pub fn limit(secs: f64) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err("not a finite, non-negative number of seconds".into());
    }
    if secs > MAX_SECONDS {
        return Err(format!(
            "more than the longest wait taken ({MAX_SECONDS:.0} s, 100 years)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `secs` clamped into `0 ..= MAX_SECONDS` (NaN is 0): for values already checked, or where
/// any number must give some wait.
pub fn saturating(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(secs.min(MAX_SECONDS))
    }
}

/// `from + d`, or [`MAX_SECONDS`] after `from` when that overflows the clock.
pub fn deadline(from: Instant, d: Duration) -> Instant {
    from.checked_add(d)
        .or_else(|| from.checked_add(saturating(MAX_SECONDS)))
        .unwrap_or(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_nan_and_negative_seconds_are_refused_or_clamped_never_a_panic() {
        assert_eq!(limit(1.5), Ok(Duration::from_millis(1500)));
        assert_eq!(limit(0.0), Ok(Duration::ZERO));
        for bad in [1e300, f64::INFINITY, f64::NAN, -1.0, MAX_SECONDS * 2.0] {
            assert!(limit(bad).is_err(), "{bad}");
        }
        assert_eq!(saturating(f64::NAN), Duration::ZERO);
        assert_eq!(saturating(-3.0), Duration::ZERO);
        assert_eq!(saturating(1e300), saturating(MAX_SECONDS));
        assert_eq!(saturating(f64::INFINITY), saturating(MAX_SECONDS));
        let now = Instant::now();
        assert!(deadline(now, Duration::MAX) > now);
        assert_eq!(
            deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }
}
