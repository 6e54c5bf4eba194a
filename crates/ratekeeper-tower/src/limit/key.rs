//! What a limit counts by: the key of a request.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use http::{Extensions, HeaderMap, Method, Request, Uri};

use crate::client::{address_key, network, ClientIp};

/// The key every request whose client cannot be found shares: such
/// requests are limited together, never let through unlimited.
pub const UNKNOWN_KEY: &[u8] = b"unknown";

/// The IPv6 prefix [`Key::client_ip`] and [`Key::peer`] key a client by:
/// a /64 is usually one subscriber's network (one LAN, one phone), and a
/// client holding one can use any of its 2^64 addresses, so keying by the
/// whole address would let it pick a fresh quota per request.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The socket peer of a request, for servers that are not axum: insert it
/// into the request's extensions (a plain [`SocketAddr`] works too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

type KeyFn = dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync;

/// How a request becomes the key a limit counts by.
///
/// ```
/// use http::HeaderName;
/// use ratekeeper_tower::client::{private_networks, ClientIp};
/// use ratekeeper_tower::Key;
///
/// // The client behind our proxies (an IPv4 address, or an IPv6 /64).
/// let per_client = Key::client_ip(ClientIp::XForwardedFor { trusted: private_networks() });
/// // The same, by IPv4 /24 and IPv6 /56 (a whole site's allocation).
/// let per_site = Key::client_network(ClientIp::XForwardedFor { trusted: private_networks() }, 24, 56);
/// // An API key header and the route, as one key.
/// let api_key = HeaderName::from_static("x-api-key");
/// let per_key_and_route = Key::compose([Key::header(api_key), Key::route()]);
/// ```
#[derive(Clone)]
pub struct Key(Kind);

#[derive(Clone)]
enum Kind {
    Global,
    Client {
        strategy: ClientIp,
        prefixes: Option<(u8, u8)>,
    },
    Header(HeaderName),
    Route,
    Function(Arc<KeyFn>),
    Compose(Vec<Key>),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Global => f.write_str("Key::global"),
            Kind::Client { strategy, prefixes } => f
                .debug_struct("Key::client")
                .field("strategy", strategy)
                .field("prefixes", prefixes)
                .finish(),
            Kind::Header(name) => f.debug_tuple("Key::header").field(name).finish(),
            Kind::Route => f.write_str("Key::route"),
            Kind::Function(_) => f.write_str("Key::from_fn"),
            Kind::Compose(parts) => f.debug_tuple("Key::compose").field(parts).finish(),
        }
    }
}

/// What keys read of a request: its head, split off (`Parts`) or still in
/// the `Request`. Keys that need neither a function of `Parts` nor a cost
/// function read the request where it is, sparing the layer two copies of
/// the head per request.
pub(crate) trait Head {
    fn method(&self) -> &Method;
    fn uri(&self) -> &Uri;
    fn headers(&self) -> &HeaderMap;
    fn extensions(&self) -> &Extensions;
    /// The head as `Parts`, for [`Key::from_fn`]; `None` for a `Request`,
    /// which the layer only reads this way when no key is a function.
    fn parts(&self) -> Option<&Parts>;
}

impl Head for Parts {
    fn method(&self) -> &Method {
        &self.method
    }
    fn uri(&self) -> &Uri {
        &self.uri
    }
    fn headers(&self) -> &HeaderMap {
        &self.headers
    }
    fn extensions(&self) -> &Extensions {
        &self.extensions
    }
    fn parts(&self) -> Option<&Parts> {
        Some(self)
    }
}

impl<B> Head for Request<B> {
    fn method(&self) -> &Method {
        self.method()
    }
    fn uri(&self) -> &Uri {
        self.uri()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn extensions(&self) -> &Extensions {
        self.extensions()
    }
    fn parts(&self) -> Option<&Parts> {
        None
    }
}

/// A key's bytes, inline up to 40 (any address as text, most header values
/// and routes): extracting one costs no allocation.
pub(crate) type KeyBytes = smallvec::SmallVec<[u8; 40]>;

/// What a key extraction found.
pub(crate) struct Extracted {
    pub(crate) key: KeyBytes,
    /// The key needed the socket peer and the server did not provide it,
    /// so its client part is the [`UNKNOWN_KEY`].
    pub(crate) missing_peer: bool,
}

/// How keys treat a request without a socket peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WithoutPeer {
    /// No forwarding header is believed: the client is unknown.
    Unknown,
    /// The forwarding headers are believed as a trusted proxy's
    /// ([`ClientIp::find_trusting_headers`]): the layer's explicit opt-in.
    TrustHeaders,
}

impl Key {
    /// One key for every request: a global limit.
    pub fn global() -> Self {
        Key(Kind::Global)
    }

    /// The socket peer's address: an IPv4 peer by its whole address, an
    /// IPv6 peer by its /64 ([`DEFAULT_IPV6_PREFIX`]), an IPv4-mapped one
    /// (`::ffff:203.0.113.7`) as the IPv4 address. See
    /// [`client_ip`](Key::client_ip) for the key's text.
    pub fn peer() -> Self {
        Key::client_ip(ClientIp::Peer)
    }

    /// The client's address, found by `strategy`: an IPv4 client by its
    /// whole address (`203.0.113.7`), an IPv6 client by its /64
    /// ([`DEFAULT_IPV6_PREFIX`]; the key is the network as `ipnet` writes
    /// it, `2001:db8:1:2::/64`), an IPv4-mapped address as the IPv4
    /// address it maps. For other prefixes, such as a /56 or the whole
    /// IPv6 address (/128), use [`client_network`](Key::client_network).
    ///
    /// Without a socket peer the client is unknown: the key is the shared
    /// [`UNKNOWN_KEY`], whatever the forwarding headers say, unless the
    /// layer opted in with
    /// [`trust_headers_without_peer`](crate::RateLimitLayerBuilder::trust_headers_without_peer).
    pub fn client_ip(strategy: ClientIp) -> Self {
        Key(Kind::Client {
            strategy,
            prefixes: None,
        })
    }

    /// The client's network: its address cut to `v4_prefix` bits for IPv4
    /// and `v6_prefix` for IPv6 (64 or 56 are usual: one subscriber; 128
    /// keys each IPv6 address alone), after IPv4-mapped addresses are
    /// unmapped. The key is the network as `ipnet` writes it, prefix
    /// included (`203.0.113.0/24`, `2001:db8:1::/56`), or the bare address
    /// at the whole length (`203.0.113.7` for 32, `2001:db8::1` for 128):
    /// [`address_key`](crate::client::address_key), the service's rule too.
    pub fn client_network(strategy: ClientIp, v4_prefix: u8, v6_prefix: u8) -> Self {
        Key(Kind::Client {
            strategy,
            prefixes: Some((v4_prefix, v6_prefix)),
        })
    }

    /// The value of one header, such as an API key. Requests without it
    /// share the [`UNKNOWN_KEY`]; pair this with authentication that
    /// requires the header.
    pub fn header(name: HeaderName) -> Self {
        Key(Kind::Header(name))
    }

    /// The route: the method and the path, without the query.
    pub fn route() -> Self {
        Key(Kind::Route)
    }

    /// Any function of the request; `None` puts it in the shared
    /// [`UNKNOWN_KEY`].
    pub fn from_fn(f: impl Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        Key(Kind::Function(Arc::new(f)))
    }

    /// Several keys as one, by the core's rule
    /// ([`ratekeeper::key::compose`]: each part's `|` and `\` escaped, the
    /// parts joined by `|`), which the service keeps too, so the layer and
    /// the service count one client under one key in a shared store.
    /// `["a|b", "c"]` and `["a", "b|c"]` differ.
    pub fn compose(parts: impl IntoIterator<Item = Key>) -> Self {
        Key(Kind::Compose(parts.into_iter().collect()))
    }

    /// Whether this key reads a forwarding header to find a client (so the
    /// layer's opt-in to trusting headers without a peer concerns it).
    pub(crate) fn reads_forwarding_headers(&self) -> bool {
        match &self.0 {
            Kind::Client { strategy, .. } => strategy.header().is_some(),
            Kind::Compose(parts) => parts.iter().any(Key::reads_forwarding_headers),
            _ => false,
        }
    }

    /// The header a client can set that this key trusts, if any: for the
    /// start-up warnings.
    pub(crate) fn spoofable_header(&self) -> Option<&HeaderName> {
        match &self.0 {
            Kind::Header(name) => Some(name),
            Kind::Compose(parts) => parts.iter().find_map(Key::spoofable_header),
            _ => None,
        }
    }

    /// The header in which any client can name its own key, because this
    /// key trusts every address as a proxy (a /0 network), if it does; as
    /// people write it (`X-Forwarded-For`, `Forwarded`, or the header's
    /// name).
    pub(crate) fn header_trusting_everyone(&self) -> Option<String> {
        match &self.0 {
            Kind::Client { strategy, .. }
                if strategy.trusted().iter().any(|net| net.prefix_len() == 0) =>
            {
                Some(match strategy {
                    ClientIp::Forwarded { .. } => "Forwarded".to_owned(),
                    ClientIp::Header { name, .. } => name.to_string(),
                    _ => "X-Forwarded-For".to_owned(),
                })
            }
            Kind::Compose(parts) => parts.iter().find_map(Key::header_trusting_everyone),
            _ => None,
        }
    }

    /// Whether this key is a client's address with the default prefixes
    /// (an IPv6 client as its /64), not composed.
    pub(crate) fn is_client_address(&self) -> bool {
        matches!(self.0, Kind::Client { prefixes: None, .. })
    }

    /// Whether this key is the socket peer's address, whole.
    pub(crate) fn is_peer(&self) -> bool {
        matches!(
            self.0,
            Kind::Client {
                strategy: ClientIp::Peer,
                prefixes: None
            }
        )
    }

    /// Whether this key calls a function of the request's `Parts`.
    pub(crate) fn needs_parts(&self) -> bool {
        match &self.0 {
            Kind::Function(_) => true,
            Kind::Compose(parts) => parts.iter().any(Key::needs_parts),
            _ => false,
        }
    }

    #[inline]
    pub(crate) fn extract(&self, parts: &impl Head, without_peer: WithoutPeer) -> Extracted {
        // The socket peer is the most common key: straight to its text.
        if let Kind::Client {
            strategy: ClientIp::Peer,
            prefixes: None,
        } = &self.0
        {
            return match peer_of(parts) {
                Some(ip) => Extracted {
                    key: client_text(crate::client::canonical(ip)),
                    missing_peer: false,
                },
                None => Extracted {
                    key: KeyBytes::from_slice(UNKNOWN_KEY),
                    missing_peer: true,
                },
            };
        }
        let mut missing_peer = false;
        let key = match self.part(parts, without_peer, &mut missing_peer) {
            // A composed key is escaped part by part already; one value is
            // escaped as the one part of a key, by the core's rule.
            Some(key) if matches!(self.0, Kind::Compose(_)) => key,
            Some(key) => match ratekeeper::key::escape_part(&key) {
                Cow::Borrowed(_) => key,
                Cow::Owned(escaped) => KeyBytes::from_vec(escaped),
            },
            None => KeyBytes::from_slice(UNKNOWN_KEY),
        };
        Extracted { key, missing_peer }
    }

    fn part(
        &self,
        parts: &impl Head,
        without_peer: WithoutPeer,
        missing_peer: &mut bool,
    ) -> Option<KeyBytes> {
        // Every request runs this: keep it free of `fmt` where it can be.
        match &self.0 {
            Kind::Global => Some(KeyBytes::from_slice(ratekeeper::key::GLOBAL)),
            Kind::Client { strategy, prefixes } => {
                let ip = match peer_of(parts) {
                    peer @ Some(_) => strategy.find(parts.headers(), peer)?,
                    // Without a peer nobody can tell a trusted proxy's
                    // header from a client's: unknown, unless the layer
                    // was told the platform's edge sets them.
                    None => match without_peer {
                        WithoutPeer::TrustHeaders if strategy.header().is_some() => {
                            strategy.find_trusting_headers(parts.headers())?
                        }
                        _ => {
                            *missing_peer = true;
                            return None;
                        }
                    },
                };
                Some(match prefixes {
                    Some((v4, v6)) => KeyBytes::from_vec(address_key(ip, *v4, *v6).into_bytes()),
                    None => client_text(ip),
                })
            }
            Kind::Header(name) => parts
                .headers()
                .get(name)
                .map(|value| KeyBytes::from_slice(value.as_bytes())),
            Kind::Route => {
                let mut route = KeyBytes::from_slice(parts.method().as_str().as_bytes());
                route.push(b' ');
                route.extend_from_slice(parts.uri().path().as_bytes());
                Some(route)
            }
            // The layer reads the head as `Parts` whenever a key is a
            // function (`needs_parts`), so `parts()` is there.
            Kind::Function(f) => parts
                .parts()
                .and_then(|parts| f(parts))
                .map(KeyBytes::from_vec),
            // The core's rule (`ratekeeper::key::compose`), which the
            // service keeps too: the same request, the same key.
            Kind::Compose(keys) => {
                let mut out = KeyBytes::new();
                for (index, key) in keys.iter().enumerate() {
                    let part = key
                        .part(parts, without_peer, missing_peer)
                        .unwrap_or_else(|| KeyBytes::from_slice(UNKNOWN_KEY));
                    if index > 0 {
                        out.push(ratekeeper::key::SEPARATOR);
                    }
                    out.extend_from_slice(&ratekeeper::key::escape_part(&part));
                }
                Some(out)
            }
        }
    }
}

/// The socket peer: axum's `ConnectInfo<SocketAddr>`, a [`PeerAddr`], or a
/// plain [`SocketAddr`] in the request's extensions.
#[inline]
pub(crate) fn peer_of(parts: &impl Head) -> Option<IpAddr> {
    let extensions = parts.extensions();
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
        return Some(addr.ip());
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// Each octet as text followed by a dot, little-endian in the low bytes of a
/// `u32`, and that text's length (digits and dot): an IPv4 key is four
/// table reads, shifts and ors, with no division, branch or bounds check.
const OCTET_TEXT: [(u32, u8); 256] = {
    let mut table = [(0u32, 0u8); 256];
    let mut n = 0;
    while n < 256 {
        let (hundreds, tens, ones) = ((n / 100) as u32, (n / 10 % 10) as u32, (n % 10) as u32);
        let (d0, d1, d2) = (
            b'0' as u32 + hundreds,
            b'0' as u32 + tens,
            b'0' as u32 + ones,
        );
        let dot = b'.' as u32;
        table[n] = if n >= 100 {
            (d0 | d1 << 8 | d2 << 16 | dot << 24, 4)
        } else if n >= 10 {
            (d1 | d2 << 8 | dot << 16, 3)
        } else {
            (d2 | dot << 8, 2)
        };
        n += 1;
    }
    table
};

/// An IPv4 address as text, as `Display` writes it, and its length: built
/// in a register without the formatting machinery, which costs more than
/// the rest of a decision.
#[inline(always)]
pub(crate) fn ipv4_text(v4: std::net::Ipv4Addr) -> ([u8; 16], usize) {
    // "255.255.255.255." is 16 bytes: the whole text fits a u128.
    let mut text = 0u128;
    let mut len = 0u32;
    for octet in v4.octets() {
        let (chunk, count) = OCTET_TEXT[usize::from(octet)];
        text |= u128::from(chunk) << (len * 8);
        len += u32::from(count);
    }
    // less the last dot
    (text.to_le_bytes(), len as usize - 1)
}

/// The default key text of a (canonical) client address: an IPv4 address
/// as `Display` writes it, without the formatting machinery (most keys);
/// an IPv6 address as its /64, as `ipnet` writes it.
#[inline]
fn client_text(ip: IpAddr) -> KeyBytes {
    match ip {
        IpAddr::V4(v4) => {
            let (text, len) = ipv4_text(v4);
            let mut out = [0u8; 40];
            out[..16].copy_from_slice(&text);
            KeyBytes::from_buf_and_len(out, len)
        }
        IpAddr::V6(_) => ipv6_network_text(ip),
    }
}

/// An IPv6 client's /64 as text: out of line, so the IPv4 key above stays
/// a few instructions.
#[inline(never)]
fn ipv6_network_text(ip: IpAddr) -> KeyBytes {
    let net = network(ip, 32, DEFAULT_IPV6_PREFIX);
    KeyBytes::from_vec(net.to_string().into_bytes())
}

#[cfg(test)]
mod client_text_tests {
    use super::{client_text, DEFAULT_IPV6_PREFIX};

    proptest::proptest! {
        #[test]
        fn client_text_is_the_address_or_its_64(octets in proptest::prelude::any::<[u8; 4]>(), segments in proptest::prelude::any::<[u16; 8]>()) {
            let v4 = std::net::IpAddr::from(octets);
            proptest::prop_assert_eq!(client_text(v4).to_vec(), v4.to_string().into_bytes());
            let v6 = std::net::Ipv6Addr::from(segments);
            // Mapped addresses are unmapped before they get here.
            proptest::prop_assume!(v6.to_ipv4_mapped().is_none());
            let net = ipnet::Ipv6Net::new(v6, DEFAULT_IPV6_PREFIX).unwrap().trunc();
            proptest::prop_assert_eq!(client_text(v6.into()).to_vec(), net.to_string().into_bytes());
        }
    }

    #[test]
    fn an_ipv6_key_is_its_64_as_ipnet_writes_it() {
        let ip: std::net::IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        assert_eq!(client_text(ip).as_slice(), b"2001:db8:1:2::/64");
    }
}
