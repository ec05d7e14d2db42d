//! Choosing the interface to bind and advertise: `DTCOMM_SOCKET_IFNAME` in NCCL's syntax.
//!
//! * `eth,ib`: interfaces whose names start with one of the prefixes;
//! * `=eth0`: exactly these names;
//! * `^docker,lo`: any interface except those prefixes (`^=` for exact names).
//!
//! Without a spec: the first interface that is up and not loopback (nor `docker*`/`virbr*`),
//! IPv4 first; loopback only when there is nothing else.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An interface address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IfAddr {
    pub name: String,
    pub ip: IpAddr,
}

/// The address this host's data plane advertises under `spec` (`DTCOMM_SOCKET_IFNAME`'s
/// syntax; `None`: the first interface that is up and not loopback, as the listener picks).
pub fn advertised_ip(spec: Option<&str>) -> Result<IpAddr, String> {
    let addrs = list().map_err(|e| format!("listing interfaces: {e}"))?;
    choose(spec, &addrs).map(|a| a.ip)
}

/// Lists the addresses of interfaces that are up (IPv4 and IPv6, link-local v6 skipped).
pub(crate) fn list() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we own and free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family says its layout.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the sockaddr is a sockaddr_in.
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the sockaddr is a sockaddr_in6.
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(sa.sin6_addr.s6_addr);
                if ip.segments()[0] & 0xffc0 == 0xfe80 {
                    continue; // link-local needs a scope id; not advertisable
                }
                IpAddr::V6(ip)
            }
            _ => continue,
        };
        out.push(IfAddr { name, ip });
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// A parsed `DTCOMM_SOCKET_IFNAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IfSpec {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl IfSpec {
    pub(crate) fn parse(s: &str) -> IfSpec {
        let mut s = s.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        IfSpec {
            exclude,
            exact,
            names,
        }
    }

    pub(crate) fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                name == n
            } else {
                name.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Picks the address to bind and advertise, from `addrs` (normally [`list`]).
pub(crate) fn choose(spec: Option<&str>, addrs: &[IfAddr]) -> Result<IfAddr, String> {
    let order = |a: &&IfAddr| (!a.ip.is_ipv4(), a.ip.is_loopback());
    match spec {
        Some(s) => {
            let spec = IfSpec::parse(s);
            let mut c: Vec<&IfAddr> = addrs.iter().filter(|a| spec.matches(&a.name)).collect();
            c.sort_by_key(order);
            c.first().map(|a| (*a).clone()).ok_or_else(|| {
                let names: Vec<&str> = addrs.iter().map(|a| a.name.as_str()).collect();
                format!(
                    "DTCOMM_SOCKET_IFNAME={s:?} matches no interface that is up (have {names:?})"
                )
            })
        }
        None => {
            let skip = IfSpec::parse("^docker,virbr,lo");
            let mut c: Vec<&IfAddr> = addrs
                .iter()
                .filter(|a| skip.matches(&a.name) && !a.ip.is_loopback())
                .collect();
            c.sort_by_key(order);
            Ok(c.first().map(|a| (*a).clone()).unwrap_or(IfAddr {
                name: "lo".into(),
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str) -> IfAddr {
        IfAddr {
            name: name.into(),
            ip: ip.parse().unwrap(),
        }
    }

    #[test]
    fn nccl_syntax() {
        let addrs = [
            a("lo", "127.0.0.1"),
            a("docker0", "172.17.0.1"),
            a("eth0", "10.0.0.5"),
            a("eth1", "10.1.0.5"),
        ];
        assert_eq!(choose(None, &addrs).unwrap().name, "eth0");
        assert_eq!(
            choose(Some("lo"), &addrs).unwrap().ip.to_string(),
            "127.0.0.1"
        );
        assert_eq!(
            choose(Some("^eth0,lo,docker"), &addrs).unwrap().name,
            "eth1"
        );
        assert_eq!(choose(Some("=eth1"), &addrs).unwrap().name, "eth1");
        assert!(
            choose(Some("=eth"), &addrs)
                .unwrap_err()
                .contains("matches no interface")
        );
        assert_eq!(choose(None, &addrs[..2]).unwrap().name, "lo");
        assert!(list().unwrap().iter().any(|i| i.ip.is_loopback()));
    }
}
