//! `host:port` parsing with torchrun's conventions.

/// torchrun's default rendezvous port, which `dt-rdzv serve` listens on.
pub const DEFAULT_PORT: u16 = dt_rdzv_proto::ports::STORE;

/// Splits `host[:port]` (IPv6 as `[addr]:port`) into host and port, defaulting to 29400.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let e = endpoint.trim();
    if e.is_empty() {
        return Err("empty endpoint".into());
    }
    if let Some(rest) = e.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed '[' in endpoint {endpoint:?}"))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => parse_port(p, endpoint)?,
            None if tail.is_empty() => DEFAULT_PORT,
            None => return Err(format!("junk after ']' in endpoint {endpoint:?}")),
        };
        return Ok((host.to_owned(), port));
    }
    match e.rsplit_once(':') {
        // a bare IPv6 address has several colons and no port
        Some((host, _)) if host.contains(':') => Ok((e.to_owned(), DEFAULT_PORT)),
        Some((host, port)) => Ok((host.to_owned(), parse_port(port, endpoint)?)),
        None => Ok((e.to_owned(), DEFAULT_PORT)),
    }
}

fn parse_port(p: &str, endpoint: &str) -> Result<u16, String> {
    p.parse()
        .map_err(|_| format!("bad port {p:?} in endpoint {endpoint:?}"))
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
