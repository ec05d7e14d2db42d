//! `host[:port]` endpoints, one reading for every crate and, through the Python extension, for
//! `dtcomm`'s Python side: torchrun's conventions (IPv6 in brackets, a default port where none
//! is given) with the errors named.

use thiserror::Error;

/// Why an endpoint does not read as `host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndpointError {
    /// Nothing but spaces.
    #[error("empty endpoint")]
    Empty,
    /// `[` without its `]`.
    #[error("endpoint {0:?}: unclosed '['")]
    Unclosed(String),
    /// Something other than `:port` after `]`.
    #[error("endpoint {0:?}: junk after ']'")]
    Junk(String),
    /// A port that is not a number from 0 to 65535.
    #[error("endpoint {endpoint:?}: port {port:?} is not a number from 0 to 65535")]
    Port {
        /// The endpoint.
        endpoint: String,
        /// Its port part.
        port: String,
    },
    /// `:port` with no host.
    #[error("endpoint {0:?}: no host before the port")]
    NoHost(String),
}

/// Splits `host[:port]` into the host (without brackets) and the port, `default_port` where
/// none is given. An IPv6 address takes brackets before a port (`[fd00::1]:29400`); a bare one
/// (`fd00::1`, several colons) is a host without a port.
pub fn split(endpoint: &str, default_port: u16) -> Result<(String, u16), EndpointError> {
    let e = endpoint.trim();
    if e.is_empty() {
        return Err(EndpointError::Empty);
    }
    let (host, port) = if let Some(rest) = e.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| EndpointError::Unclosed(endpoint.into()))?;
        match tail.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if tail.is_empty() => (host, None),
            None => return Err(EndpointError::Junk(endpoint.into())),
        }
    } else {
        match e.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            // A bare IPv6 address: several colons and no port.
            _ => (e, None),
        }
    };
    if host.is_empty() {
        return Err(EndpointError::NoHost(endpoint.into()));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse().map_err(|_| EndpointError::Port {
            endpoint: endpoint.into(),
            port: p.into(),
        })?,
    };
    Ok((host.to_owned(), port))
}

/// `host:port`, with brackets around an IPv6 host.
pub fn join(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ports_and_ipv6_read_as_torchrun_writes_them() {
        let ok = |e: &str| split(e, 29400).unwrap();
        assert_eq!(ok("h:1"), ("h".into(), 1));
        assert_eq!(ok(" h "), ("h".into(), 29400));
        assert_eq!(ok("[::1]:5"), ("::1".into(), 5));
        assert_eq!(ok("[::1]"), ("::1".into(), 29400));
        assert_eq!(ok("fd00::1"), ("fd00::1".into(), 29400));
        assert_eq!(ok("10.0.0.1:29401"), ("10.0.0.1".into(), 29401));
        assert_eq!(ok("h:0"), ("h".into(), 0));
    }

    #[test]
    fn what_does_not_read_is_named() {
        assert_eq!(split("", 1), Err(EndpointError::Empty));
        assert_eq!(split("  ", 1), Err(EndpointError::Empty));
        assert!(matches!(split("h:x", 1), Err(EndpointError::Port { port, .. }) if port == "x"));
        assert!(matches!(split("h:", 1), Err(EndpointError::Port { .. })));
        assert!(matches!(
            split("h:70000", 1),
            Err(EndpointError::Port { .. })
        ));
        assert_eq!(
            split("[::1", 1),
            Err(EndpointError::Unclosed("[::1".into()))
        );
        assert_eq!(
            split("[::1]x", 1),
            Err(EndpointError::Junk("[::1]x".into()))
        );
        assert_eq!(
            split(":29400", 1),
            Err(EndpointError::NoHost(":29400".into()))
        );
        assert_eq!(split("[]:1", 1), Err(EndpointError::NoHost("[]:1".into())));
    }

    #[test]
    fn join_is_the_inverse_of_split() {
        for (h, p) in [("h", 1), ("::1", 29401), ("10.0.0.1", 0)] {
            assert_eq!(split(&join(h, p), 7).unwrap(), (h.to_owned(), p));
        }
        assert_eq!(join("fd00::2", 29401), "[fd00::2]:29401");
    }
}
