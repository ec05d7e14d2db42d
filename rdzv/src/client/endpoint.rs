//! `host:port` parsing with torchrun's conventions.

/// torchrun's default rendezvous port, which `dt-rdzv serve` listens on.
pub const DEFAULT_PORT: u16 = dt_rdzv_proto::ports::STORE;

/// Splits `host[:port]` (IPv6 as `[addr]:port`) into host and port, defaulting to 29400 (see
/// [`dt_rdzv_proto::endpoint::split`]).
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    dt_rdzv_proto::endpoint::split(endpoint, DEFAULT_PORT).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("h:1"), Ok(("h".into(), 1)));
        assert_eq!(parse_endpoint("h"), Ok(("h".into(), 29400)));
        assert_eq!(parse_endpoint("[::1]:5"), Ok(("::1".into(), 5)));
        assert_eq!(parse_endpoint("[::1]"), Ok(("::1".into(), 29400)));
        assert_eq!(parse_endpoint("::1"), Ok(("::1".into(), 29400)));
        assert!(parse_endpoint("h:x").is_err());
        assert!(parse_endpoint("").is_err());
    }
}
