//! The recorder's settings from the environment: its capacity (`DTCOMM_FR_BUFFER_SIZE`, else
//! torch's `TORCH_FR_BUFFER_SIZE` / `TORCH_NCCL_TRACE_BUFFER_SIZE`), whether a call's timeout
//! dumps the trace (`DTCOMM_FR_DUMP_ON_TIMEOUT`, `TORCH_FR_DUMP_ON_TIMEOUT`,
//! `TORCH_NCCL_DUMP_ON_TIMEOUT`) and where (`TORCH_FR_DUMP_TEMP_FILE`,
//! `TORCH_NCCL_DEBUG_INFO_TEMP_FILE`: a prefix the rank is appended to).

/// Calls kept when no variable says otherwise (torch's default too).
pub const DEFAULT_CAPACITY: usize = 2_000;
/// The largest ring allowed (about 200 MB of slots); larger sizes are cut to it.
pub const MAX_CAPACITY: usize = 1_000_000;
/// Where dumps go when no variable says (torch's default prefix).
pub const DEFAULT_DUMP_PREFIX: &str = "/tmp/nccl_trace_rank_";

const SIZE_VARS: [&str; 3] = [
    "DTCOMM_FR_BUFFER_SIZE",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
];
const DUMP_VARS: [&str; 3] = [
    "DTCOMM_FR_DUMP_ON_TIMEOUT",
    "TORCH_FR_DUMP_ON_TIMEOUT",
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
];
const FILE_VARS: [&str; 2] = ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"];

/// The ring's capacity from `(name, value)` of the first size variable set, and what to log
/// about it (a refused or cut value).
pub(crate) fn capacity_from(var: Option<(&str, &str)>) -> (usize, Option<String>) {
    let Some((name, value)) = var else {
        return (DEFAULT_CAPACITY, None);
    };
    match value.trim().parse::<u64>() {
        Ok(n) if n as u128 > MAX_CAPACITY as u128 => (
            MAX_CAPACITY,
            Some(format!(
                "{name}={value} is more than {MAX_CAPACITY} calls: the flight recorder keeps \
                 {MAX_CAPACITY}"
            )),
        ),
        Ok(n) => (n as usize, None),
        Err(_) => (
            DEFAULT_CAPACITY,
            Some(format!(
                "{name}={value:?} is not a number of calls: the flight recorder keeps \
                 {DEFAULT_CAPACITY}"
            )),
        ),
    }
}

fn first_set<'a>(names: &[&'a str]) -> Option<(&'a str, String)> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok().map(|v| (*n, v)))
}

/// The capacity the environment asks for (0: the recorder is off), logging a refused value.
pub(crate) fn capacity() -> usize {
    let var = first_set(&SIZE_VARS);
    let (cap, why) = capacity_from(var.as_ref().map(|(n, v)| (*n, v.as_str())));
    if let Some(why) = why {
        tracing::warn!("dtcomm: {why}");
    }
    cap
}

fn truthy(v: &str) -> bool {
    !matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "false" | "no" | "off"
    )
}

/// Whether a call's timeout dumps this rank's trace.
pub fn dump_on_timeout() -> bool {
    first_set(&DUMP_VARS).is_some_and(|(_, v)| truthy(&v))
}

/// The file a dump on timeout of global rank `rank` goes to: the prefix the environment
/// names, then the rank.
pub fn dump_file(rank: u32) -> String {
    let prefix = first_set(&FILE_VARS).map_or_else(|| DEFAULT_DUMP_PREFIX.to_owned(), |(_, v)| v);
    format!("{prefix}{rank}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_bounded_and_refused_with_a_reason() {
        assert_eq!(capacity_from(None), (DEFAULT_CAPACITY, None));
        assert_eq!(capacity_from(Some(("X", "0"))), (0, None));
        assert_eq!(capacity_from(Some(("X", " 17 "))), (17, None));
        let (n, why) = capacity_from(Some(("TORCH_FR_BUFFER_SIZE", "99999999999")));
        assert_eq!(n, MAX_CAPACITY);
        assert!(why.unwrap().contains("TORCH_FR_BUFFER_SIZE=99999999999"));
        let (n, why) = capacity_from(Some(("X", "-3")));
        assert_eq!(n, DEFAULT_CAPACITY);
        assert!(why.unwrap().contains("not a number"));
    }

    #[test]
    fn truthiness() {
        assert!(truthy("1") && truthy("true") && truthy("YES"));
        assert!(!truthy("0") && !truthy("false") && !truthy(""));
    }
}
