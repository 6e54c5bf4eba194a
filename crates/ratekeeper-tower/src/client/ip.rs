//! Addresses as clients send them: parsing, normalizing, networks.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

/// The address in one entry of X-Forwarded-For or X-Real-IP: a bare IPv4 or
/// IPv6 address, optionally bracketed, optionally with a port
/// (`192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`).
/// Surrounding spaces are ignored. IPv4 parts with leading zeros are
/// refused (some parsers read them as octal).
pub(crate) fn parse_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if entry.is_empty() || entry.len() > 64 {
        return None;
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(socket) = entry.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    // A bracketed IPv6 address without a port.
    let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

/// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`) as the IPv4 address it
/// maps, so one client is one key whichever way its address arrives.
#[inline]
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The network of `ip` with `v4_prefix` bits for IPv4 and `v6_prefix` for
/// IPv6 (after [`canonical`]), so a client cannot escape a limit by
/// rotating addresses within its allocation: an IPv6 /64 is usually one
/// subscriber. Prefixes past the address length are clamped.
pub fn network(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> IpNet {
    match canonical(ip) {
        IpAddr::V4(v4) => ipnet::Ipv4Net::new(v4, v4_prefix.min(32))
            .map(|net| IpNet::V4(net.trunc()))
            .unwrap_or_else(|_| IpNet::from(IpAddr::V4(v4))),
        IpAddr::V6(v6) => ipnet::Ipv6Net::new(v6, v6_prefix.min(128))
            .map(|net| IpNet::V6(net.trunc()))
            .unwrap_or_else(|_| IpNet::from(IpAddr::V6(v6))),
    }
}

/// The key of a client at `ip`, cut to `v4_prefix` or `v6_prefix` bits (after
/// [`canonical`]): the bare address when the prefix is the whole address
/// (`/32`, `/128`), else the network as `ipnet` writes it
/// (`192.0.2.0/24`, `2001:db8:1:2::/64`). The tower layer's keys and the
/// service's are this text, so both count a client under one key.
///
/// ```
/// use ratekeeper_tower::client::address_key;
///
/// let ip = "2001:db8:1:2:3:4:5:6".parse().unwrap();
/// assert_eq!(address_key(ip, 32, 64), "2001:db8:1:2::/64");
/// assert_eq!(address_key(ip, 32, 128), "2001:db8:1:2:3:4:5:6");
/// assert_eq!(address_key("::ffff:192.0.2.7".parse().unwrap(), 32, 64), "192.0.2.7");
/// ```
pub fn address_key(ip: IpAddr, v4_prefix: u8, v6_prefix: u8) -> String {
    let ip = canonical(ip);
    let whole = match ip {
        IpAddr::V4(_) => v4_prefix >= 32,
        IpAddr::V6(_) => v6_prefix >= 128,
    };
    match whole {
        true => ip.to_string(),
        false => network(ip, v4_prefix, v6_prefix).to_string(),
    }
}

/// The networks proxies usually sit in: loopback, private (RFC 1918,
/// RFC 4193), link-local and carrier-grade NAT.
///
/// Nothing trusts these by default: passing them as a strategy's
/// `trusted` networks is a choice, right when your proxies are the only
/// hosts on those networks that reach the application (any other host
/// there could name its own key). List your proxies' own networks where
/// you can.
pub fn private_networks() -> Vec<IpNet> {
    [
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "100.64.0.0/10",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    ]
    .iter()
    .filter_map(|net| net.parse().ok())
    .collect()
}

/// Whether `ip` is in any of `networks` (IPv4-mapped addresses match IPv4
/// networks).
pub(crate) fn is_in(networks: &[IpNet], ip: IpAddr) -> bool {
    let ip = canonical(ip);
    networks.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn entries_in_every_form() {
        for (entry, expected) in [
            ("192.0.2.1", Some(ip("192.0.2.1"))),
            (" 192.0.2.1 ", Some(ip("192.0.2.1"))),
            ("192.0.2.1:4711", Some(ip("192.0.2.1"))),
            ("2001:db8::1", Some(ip("2001:db8::1"))),
            ("[2001:db8::1]", Some(ip("2001:db8::1"))),
            ("[2001:db8::1]:4711", Some(ip("2001:db8::1"))),
            ("::ffff:192.0.2.1", Some(ip("::ffff:192.0.2.1"))),
            ("192.000.2.1", None),
            ("010.0.0.1", None),
            ("unknown", None),
            ("", None),
            ("[192.0.2.1]", None),
            ("2001:db8::1:4711:1:1:1:1:1", None),
            ("fe80::1%eth0", None),
        ] {
            assert_eq!(parse_entry(entry), expected, "{entry:?}");
        }
    }

    #[test]
    fn networks_unmap_then_truncate() {
        assert_eq!(
            network(ip("::ffff:192.0.2.77"), 24, 64).to_string(),
            "192.0.2.0/24"
        );
        assert_eq!(
            network(ip("2001:db8:1:2:3:4:5:6"), 32, 64).to_string(),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            network(ip("2001:db8:1:2:3:4:5:6"), 32, 56).to_string(),
            "2001:db8:1::/56"
        );
        assert_eq!(
            network(ip("192.0.2.77"), 99, 200).to_string(),
            "192.0.2.77/32"
        );
        assert!(is_in(&private_networks(), ip("::ffff:10.1.2.3")));
        assert!(!is_in(&private_networks(), ip("203.0.113.1")));
    }
}
