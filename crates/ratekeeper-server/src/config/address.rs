//! How an address becomes a key: the network around it, so that a client
//! cannot get a fresh quota by moving to the next address of its own
//! allocation (an IPv6 subscriber usually holds a whole /64).

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

/// The default IPv6 prefix length: one key per /64, what one subscriber
/// usually holds; the tower layer's, so both key a client alike.
pub use ratekeeper_tower::DEFAULT_IPV6_PREFIX;

/// The default IPv4 prefix length: one key per address.
pub const DEFAULT_IPV4_PREFIX: u8 = 32;

/// The prefix lengths an address is keyed by (`ipv4_prefix`,
/// `ipv6_prefix`).
///
/// ```
/// use ratekeeper_server::config::Prefixes;
///
/// let prefixes = Prefixes::default();
/// assert_eq!(prefixes.key("2001:db8:1:2:3:4:5:6".parse()?), "2001:db8:1:2::/64");
/// assert_eq!(prefixes.key("192.0.2.7".parse()?), "192.0.2.7");
/// // An IPv4-mapped address is its IPv4 address.
/// assert_eq!(prefixes.key("::ffff:192.0.2.7".parse()?), "192.0.2.7");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefixes {
    /// Bits of an IPv4 address that make its key, 1 to 32.
    pub ipv4: u8,
    /// Bits of an IPv6 address that make its key, 1 to 128.
    pub ipv6: u8,
}

impl Default for Prefixes {
    /// IPv4 by address, IPv6 by /64.
    fn default() -> Self {
        Prefixes {
            ipv4: DEFAULT_IPV4_PREFIX,
            ipv6: DEFAULT_IPV6_PREFIX,
        }
    }
}

impl Prefixes {
    /// The key text of `ip`: the bare address at the full length (`/32`,
    /// `/128`), so such keys are what they always were, else its network
    /// as `ipnet` writes it (`2001:db8:1:2::/64`, `192.0.2.0/24`).
    /// IPv4-mapped IPv6 addresses are keyed as IPv4.
    pub fn key(&self, ip: IpAddr) -> String {
        ratekeeper_tower::client::address_key(ip, self.ipv4, self.ipv6)
    }

    /// [`key`](Prefixes::key) of a value that a caller gave as text (the
    /// HTTP API's `client_ip`, Envoy's `remote_address`); text that is not
    /// an address is kept as it is.
    pub(crate) fn key_of_text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match text.trim().parse::<IpAddr>() {
            Ok(ip) => Cow::Owned(self.key(ip)),
            Err(_) => Cow::Borrowed(text),
        }
    }
}

impl fmt::Display for Prefixes {
    /// `IPv4 by address, IPv6 by /64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by = |bits: u8, full: u8| {
            if bits >= full {
                "address".to_owned()
            } else {
                format!("/{bits}")
            }
        };
        write!(
            f,
            "IPv4 by {}, IPv6 by {}",
            by(self.ipv4, 32),
            by(self.ipv6, 128)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_are_keyed_by_their_network() {
        let default = Prefixes::default();
        assert_eq!(default.key(ip("2001:db8:1:2:3:4:5:6")), "2001:db8:1:2::/64");
        assert_eq!(default.key(ip("2001:db8:1:2:ffff::1")), "2001:db8:1:2::/64");
        assert_eq!(default.key(ip("203.0.113.9")), "203.0.113.9");
        assert_eq!(default.key(ip("::ffff:203.0.113.9")), "203.0.113.9");
        let wide = Prefixes { ipv4: 24, ipv6: 56 };
        assert_eq!(wide.key(ip("2001:db8:1:2ff::1")), "2001:db8:1:200::/56");
        assert_eq!(wide.key(ip("203.0.113.9")), "203.0.113.0/24");
        let exact = Prefixes {
            ipv4: 32,
            ipv6: 128,
        };
        assert_eq!(exact.key(ip("2001:db8::1")), "2001:db8::1");
        assert_eq!(default.key_of_text("2001:db8::7"), "2001:db8::/64");
        assert_eq!(default.key_of_text("not an address"), "not an address");
    }

    #[test]
    fn prefixes_in_words() {
        assert_eq!(
            Prefixes::default().to_string(),
            "IPv4 by address, IPv6 by /64"
        );
        assert_eq!(
            Prefixes {
                ipv4: 24,
                ipv6: 128
            }
            .to_string(),
            "IPv4 by /24, IPv6 by address"
        );
    }
}
