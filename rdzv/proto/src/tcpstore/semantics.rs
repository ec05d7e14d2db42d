//! The value rules of the store, shared by the engine and every in-memory twin.
//!
//! These are pure functions over the stored value so that the server engine and the
//! `MemoryStore` of `dt-rdzv` cannot drift apart.

/// Outcome of a compare-and-set, as the c10d TCPStore server decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompareSetOutcome {
    /// The value to store, if the swap happened (`None`: leave the key as it is).
    pub store: Option<Vec<u8>>,
    /// The bytes to reply with.
    pub reply: Vec<u8>,
}

/// Applies torch's compare-set rules.
///
/// | stored | expected | effect | reply |
/// | --- | --- | --- | --- |
/// | missing | empty | create = desired | desired |
/// | missing | non-empty | nothing | expected (upstream's answer, kept) |
/// | present, equal | any | replace = desired | desired |
/// | present, different | any | nothing | current value |
///
/// Unlike upstream, the "missing, non-empty expected" case wakes nobody: the caller only
/// wakes waiters when `store` is `Some`.
pub fn compare_set(stored: Option<&[u8]>, expected: &[u8], desired: &[u8]) -> CompareSetOutcome {
    match stored {
        None if expected.is_empty() => CompareSetOutcome {
            store: Some(desired.to_vec()),
            reply: desired.to_vec(),
        },
        None => CompareSetOutcome {
            store: None,
            reply: expected.to_vec(),
        },
        Some(cur) if cur == expected => CompareSetOutcome {
            store: Some(desired.to_vec()),
            reply: desired.to_vec(),
        },
        Some(cur) => CompareSetOutcome {
            store: None,
            reply: cur.to_vec(),
        },
    }
}

/// Why a stored value could not be used as an integer counter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CounterError {
    /// The stored value does not start with an integer.
    #[error("stored value {0:?} is not an integer")]
    NotAnInteger(String),
    /// The integer or the sum does not fit in an i64.
    #[error("integer overflow ({0:?} + {1})")]
    Overflow(String, i64),
}

/// Parses like C++ `std::stoll(s, nullptr, 10)`: leading whitespace, an optional sign, at least
/// one digit, trailing bytes ignored, out of range is an error.
pub fn stoll(bytes: &[u8]) -> Result<i64, CounterError> {
    let shown = || String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned();
    let mut i = 0;
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let negative = match bytes.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let start = i;
    let mut acc: i64 = 0;
    while let Some(d) = bytes.get(i).filter(|b| b.is_ascii_digit()) {
        let digit = i64::from(d - b'0');
        // Accumulate negatively so that i64::MIN parses.
        acc = acc
            .checked_mul(10)
            .and_then(|a| a.checked_sub(digit))
            .ok_or_else(|| CounterError::Overflow(shown(), 0))?;
        i += 1;
    }
    if i == start {
        return Err(CounterError::NotAnInteger(shown()));
    }
    if negative {
        Ok(acc)
    } else {
        acc.checked_neg()
            .ok_or_else(|| CounterError::Overflow(shown(), 0))
    }
}

/// ADD: the new counter value given the stored bytes (missing counts as 0).
pub fn add(stored: Option<&[u8]>, delta: i64) -> Result<i64, CounterError> {
    let current = match stored {
        None => 0,
        Some(v) => stoll(v)?,
    };
    current
        .checked_add(delta)
        .ok_or_else(|| CounterError::Overflow(current.to_string(), delta))
}

/// How a counter is stored: ASCII decimal, as `std::to_string` writes it.
pub fn encode_counter(value: i64) -> Vec<u8> {
    value.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stoll_matches_cpp() {
        assert_eq!(stoll(b"42"), Ok(42));
        assert_eq!(stoll(b"  -7xyz"), Ok(-7));
        assert_eq!(stoll(b"+3"), Ok(3));
        assert_eq!(stoll(b"\t\n 0"), Ok(0));
        assert_eq!(stoll(b"-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(stoll(b"9223372036854775807"), Ok(i64::MAX));
        assert!(matches!(
            stoll(b"9223372036854775808"),
            Err(CounterError::Overflow(..))
        ));
        assert!(matches!(stoll(b"xyz"), Err(CounterError::NotAnInteger(_))));
        assert!(matches!(stoll(b""), Err(CounterError::NotAnInteger(_))));
        assert!(matches!(stoll(b"-"), Err(CounterError::NotAnInteger(_))));
        assert!(matches!(stoll(b" + 1"), Err(CounterError::NotAnInteger(_))));
    }

    #[test]
    fn add_rules() {
        assert_eq!(add(None, 5), Ok(5));
        assert_eq!(add(Some(b"5"), -2), Ok(3));
        assert_eq!(add(Some(b"5"), 0), Ok(5));
        assert!(add(Some(b"xyz"), 1).is_err());
        assert!(add(Some(b"9223372036854775807"), 1).is_err());
        assert_eq!(encode_counter(-3), b"-3");
    }

    #[test]
    fn compare_set_table() {
        let o = compare_set(None, b"", b"new");
        assert_eq!(
            (o.store.as_deref(), o.reply.as_slice()),
            (Some(&b"new"[..]), &b"new"[..])
        );
        let o = compare_set(None, b"x", b"new");
        assert_eq!((o.store, o.reply.as_slice()), (None, &b"x"[..]));
        let o = compare_set(Some(b"new"), b"new", b"newer");
        assert_eq!(
            (o.store.as_deref(), o.reply.as_slice()),
            (Some(&b"newer"[..]), &b"newer"[..])
        );
        let o = compare_set(Some(b"newer"), b"bogus", b"zzz");
        assert_eq!((o.store, o.reply.as_slice()), (None, &b"newer"[..]));
        let o = compare_set(Some(b""), b"", b"a");
        assert_eq!(o.store.as_deref(), Some(&b"a"[..]));
    }
}
