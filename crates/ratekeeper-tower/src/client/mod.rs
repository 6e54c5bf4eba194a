//! Finding the client behind proxies.
//!
//! Behind a proxy every request comes from the proxy's address, so the
//! client must be read from what the proxies recorded: `X-Forwarded-For`,
//! RFC 7239 `Forwarded`, or a single header such as `X-Real-IP`. Those
//! headers are lists any client can start with anything it likes; only the
//! entries appended by **your own** proxies can be believed. So the client
//! is found right to left: skip the addresses of trusted proxies, and the
//! first address that is not one is the client. The leftmost entry, which
//! the client wrote, is never taken on trust.
//!
//! Anything that is not an address (garbage, `unknown`, an obfuscated
//! `_name`) stops the walk: the client is then unknown, and the middleware
//! keys such requests to one shared bucket rather than letting them through
//! unlimited. A trusted peer that sends no such header at all is itself the
//! client (a service on the private network calling directly).
//!
//! Without a socket peer nothing can be trusted, so [`ClientIp::find`]
//! believes no header at all and finds no client. A platform whose edge
//! strips and sets the forwarding headers itself and gives the application
//! no usable peer can opt in with [`ClientIp::find_trusting_headers`].

mod forwarded;
pub(crate) mod ip;

use std::net::IpAddr;

use http::header::{HeaderName, FORWARDED};
use http::HeaderMap;
use ipnet::IpNet;

pub use forwarded::{parse_forwarded, parse_node, ForwardedElement, ForwardedError, Node};
pub use ip::{address_key, canonical, network, private_networks};

/// The `X-Forwarded-For` header.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The `X-Real-IP` header.
pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// How to find a request's client address.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientIp {
    /// The socket peer: right when clients connect directly.
    Peer,
    /// `X-Forwarded-For`, by the rightmost-untrusted rule over `trusted`
    /// proxy networks (the socket peer must be one of them for the header
    /// to count).
    XForwardedFor {
        /// The networks of your proxies.
        trusted: Vec<IpNet>,
    },
    /// RFC 7239 `Forwarded` `for=` nodes, by the rightmost-untrusted rule.
    Forwarded {
        /// The networks of your proxies.
        trusted: Vec<IpNet>,
    },
    /// `X-Forwarded-For` behind exactly this many proxies: the entry that
    /// many places from the right (express's `trust proxy = n`, Envoy's
    /// `xff_num_trusted_hops`). Right only when every request passes those
    /// proxies: a client that can reach the server directly picks its key.
    Hops(usize),
    /// One header that your proxy always overwrites, such as `X-Real-IP`,
    /// `CF-Connecting-IP` or `Fly-Client-IP`, believed only from a peer in
    /// `trusted`; any other peer is itself the client, and a trusted peer
    /// that sends no such header is the client too.
    Header {
        /// The header.
        name: HeaderName,
        /// The networks of the proxies that set it.
        trusted: Vec<IpNet>,
    },
}

impl ClientIp {
    /// The client of a request with `headers` whose socket peer is `peer`,
    /// or `None` if it cannot be found. Addresses come out canonical:
    /// IPv4-mapped IPv6 as IPv4.
    ///
    /// Without a peer (`None`: the server does not say who connected)
    /// there is no client: no header is believed when nobody can tell
    /// whether a trusted proxy sent it. See
    /// [`find_trusting_headers`](ClientIp::find_trusting_headers) for the
    /// platforms where that is known by other means.
    #[inline]
    pub fn find(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> Option<IpAddr> {
        let peer = peer?;
        let found = match self {
            ClientIp::Peer => Some(peer),
            ClientIp::XForwardedFor { trusted } => {
                behind_trusted(peer, trusted, headers.contains_key(X_FORWARDED_FOR), || {
                    rightmost_untrusted_xff(headers, trusted)
                })
            }
            ClientIp::Forwarded { trusted } => {
                behind_trusted(peer, trusted, headers.contains_key(FORWARDED), || {
                    rightmost_untrusted_forwarded(headers, trusted)
                })
            }
            ClientIp::Hops(hops) => nth_from_right_xff(headers, *hops),
            ClientIp::Header { name, trusted } => {
                behind_trusted(peer, trusted, headers.contains_key(name), || {
                    single_header(headers, name)
                })
            }
        };
        found.map(canonical)
    }

    /// The client as the headers name it, as if the request came from a
    /// trusted proxy: for platforms whose edge strips and sets the
    /// forwarding headers itself and gives the application no socket peer
    /// it could check (some serverless runtimes). Anywhere else this lets
    /// every client choose its own key. `Peer` finds nothing.
    pub fn find_trusting_headers(&self, headers: &HeaderMap) -> Option<IpAddr> {
        let found = match self {
            ClientIp::Peer => None,
            ClientIp::XForwardedFor { trusted } => rightmost_untrusted_xff(headers, trusted),
            ClientIp::Forwarded { trusted } => rightmost_untrusted_forwarded(headers, trusted),
            ClientIp::Hops(hops) => nth_from_right_xff(headers, *hops),
            ClientIp::Header { name, .. } => single_header(headers, name),
        };
        found.map(canonical)
    }

    /// The forwarding header this strategy reads, if any: for telling when
    /// one arrives from a peer that is not trusted.
    pub fn header(&self) -> Option<HeaderName> {
        match self {
            ClientIp::Peer => None,
            ClientIp::XForwardedFor { .. } | ClientIp::Hops(_) => Some(X_FORWARDED_FOR),
            ClientIp::Forwarded { .. } => Some(FORWARDED),
            ClientIp::Header { name, .. } => Some(name.clone()),
        }
    }

    /// Whether `peer` is one of the proxies this strategy trusts
    /// (IPv4-mapped addresses match IPv4 networks); never for `Peer` and
    /// `Hops`, which name no proxies.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        ip::is_in(self.trusted(), peer)
    }

    /// The proxy networks this strategy trusts (none for `Peer` and `Hops`).
    pub fn trusted(&self) -> &[IpNet] {
        match self {
            ClientIp::XForwardedFor { trusted }
            | ClientIp::Forwarded { trusted }
            | ClientIp::Header { trusted, .. } => trusted,
            ClientIp::Peer | ClientIp::Hops(_) => &[],
        }
    }
}

/// A header list counts only if the request came from a trusted proxy; an
/// untrusted peer is itself the client. A trusted peer that sent no such
/// header at all is the client (a service on the private network calling
/// directly), as express's `trust proxy` has it, so such callers keep keys
/// of their own; a header that is there but names no usable client
/// (`unknown`, garbage) still finds none.
fn behind_trusted(
    peer: IpAddr,
    trusted: &[IpNet],
    has_header: bool,
    walk: impl FnOnce() -> Option<IpAddr>,
) -> Option<IpAddr> {
    if !ip::is_in(trusted, peer) || !has_header {
        Some(peer)
    } else {
        walk()
    }
}

/// The address in a header that must appear once: two values mean someone
/// besides the proxy set it.
fn single_header(headers: &HeaderMap, name: &HeaderName) -> Option<IpAddr> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok().and_then(ip::parse_entry),
        _ => None,
    }
}

/// The entries of every `X-Forwarded-For` line, in order.
fn xff_entries(headers: &HeaderMap) -> Option<Vec<&str>> {
    let mut entries = Vec::new();
    for value in headers.get_all(X_FORWARDED_FOR) {
        // A line that is not text poisons the list: stop, don't skip.
        entries.extend(value.to_str().ok()?.split(','));
    }
    Some(entries)
}

/// Walks `X-Forwarded-For` from the right past trusted proxies.
pub fn rightmost_untrusted_xff(headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let entries = xff_entries(headers)?;
    walk(
        entries.iter().rev().map(|entry| ip::parse_entry(entry)),
        trusted,
    )
}

/// Walks the `for=` nodes of `Forwarded` from the right past trusted
/// proxies; `unknown`, obfuscated nodes and unreadable headers stop it.
pub fn rightmost_untrusted_forwarded(headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let mut elements = Vec::new();
    for value in headers.get_all(FORWARDED) {
        elements.extend(parse_forwarded(value.to_str().ok()?).ok()?);
    }
    let nodes = elements
        .into_iter()
        .rev()
        .map(|element| match element.for_node {
            Some(Node::Ip(ip, _)) => Some(ip),
            _ => None,
        });
    walk(nodes, trusted)
}

/// The first address from the right that is not trusted; the last one seen
/// if all are (a request from inside); `None` at anything not an address.
fn walk(nodes: impl Iterator<Item = Option<IpAddr>>, trusted: &[IpNet]) -> Option<IpAddr> {
    let mut last = None;
    for node in nodes {
        let ip = node?;
        if !ip::is_in(trusted, ip) {
            return Some(ip);
        }
        last = Some(ip);
    }
    last
}

/// The `X-Forwarded-For` entry `hops` places from the right (1 is the
/// rightmost); `None` if there are fewer entries.
pub fn nth_from_right_xff(headers: &HeaderMap, hops: usize) -> Option<IpAddr> {
    let entries = xff_entries(headers)?;
    let index = entries.len().checked_sub(hops.max(1))?;
    ip::parse_entry(entries[index])
}
