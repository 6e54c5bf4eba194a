//! Keys made of parts: where each part's value comes from, and how the
//! values are put together so that different parts never give the same key.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;

use http::{HeaderMap, Method};

use crate::config::KeyPart;

/// The value of every key part a request has (its peer, headers, route,
/// descriptor entries...). Each front door has its own.
pub trait KeySource {
    /// The value of `part`, or `None` when this request does not have it.
    ///
    /// Values are bytes: a header's value is keyed as it was sent, UTF-8 or
    /// not, as the tower layer keys it.
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>>;

    /// The socket peer of a door that reads a client's request (nginx's
    /// `auth_request`): who sent its headers. `None` where the caller
    /// states the parts itself (the JSON API, Envoy's descriptors).
    fn peer(&self) -> Option<IpAddr> {
        None
    }
}

/// Text as a part's value.
pub(crate) fn text(value: Cow<'_, str>) -> Cow<'_, [u8]> {
    match value {
        Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
        Cow::Owned(text) => Cow::Owned(text.into_bytes()),
    }
}

// The value every request shares when a part is missing and the front door
// counts such requests together (a client that cannot be found is limited
// as one, never let through unlimited): the tower layer's.
use ratekeeper_tower::UNKNOWN_KEY;

/// The value of `global`: one count for everyone (the core's
/// [`ratekeeper::key::GLOBAL`]).
const GLOBAL: &str = "*";

/// Puts `parts`' values from `source` together into a key, or names the
/// first part `source` lacks.
///
/// Values are put together by the core's rule
/// ([`ratekeeper::key::compose`]: each value's `|` and `\` escaped with
/// `\`, the values joined by `|`), the rule of the tower layer's keys too:
/// a layer and the service on one store count a client under one key.
pub fn compose_key<'p>(
    parts: &'p [KeyPart],
    source: &dyn KeySource,
) -> Result<Vec<u8>, &'p KeyPart> {
    let mut missing = None;
    let key = ratekeeper::key::compose(parts.iter().map_while(|part| {
        let value = match part {
            KeyPart::Global => Some(Cow::Borrowed(GLOBAL.as_bytes())),
            _ => source.part(part),
        };
        if value.is_none() {
            missing = Some(part);
        }
        value
    }));
    match missing {
        Some(part) => Err(part),
        None => Ok(key),
    }
}

/// An HTTP request's key parts: its peer, the client behind trusted
/// proxies (the peer itself when a trusted peer names none), its route and
/// headers. Descriptor entries it has none of.
#[derive(Clone, Copy, Debug)]
pub struct HttpSource<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path, without the query.
    pub path: &'a str,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The socket peer, when known.
    pub peer: Option<IpAddr>,
}

impl KeySource for HttpSource<'_> {
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
        match part {
            KeyPart::Peer(prefixes) => self
                .peer
                .map(|ip| Cow::Owned(prefixes.key(ip).into_bytes())),
            // The rule makes a trusted peer that names no client the client,
            // and any peer it does not trust the client too.
            KeyPart::ClientIp(rule, prefixes) => rule
                .find(self.headers, self.peer)
                .map(|ip| Cow::Owned(prefixes.key(ip).into_bytes())),
            KeyPart::Route => Some(Cow::Owned(
                format!("{} {}", self.method, self.path).into_bytes(),
            )),
            KeyPart::Header(name) => self
                .headers
                .get(name)
                .map(|value| Cow::Borrowed(value.as_bytes())),
            KeyPart::Global => Some(Cow::Borrowed(GLOBAL.as_bytes())),
            KeyPart::Descriptor(_) | KeyPart::Entry(_) => None,
        }
    }

    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }
}

/// Key parts given by name, as the HTTP decision API takes them:
/// `peer`, `client_ip`, `route`, `header:NAME` (lower case) and
/// `descriptor:KEY`.
#[derive(Clone, Copy, Debug)]
pub struct NamedParts<'a>(pub &'a HashMap<String, String>);

impl KeySource for NamedParts<'_> {
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
        let value = match part {
            // An address given as text is keyed by its network too.
            KeyPart::Peer(prefixes) => {
                return self.0.get("peer").map(|v| text(prefixes.key_of_text(v)));
            }
            KeyPart::ClientIp(_, prefixes) => {
                return self
                    .0
                    .get("client_ip")
                    .map(|v| text(prefixes.key_of_text(v)));
            }
            KeyPart::Route => self.0.get("route"),
            KeyPart::Header(name) => self.0.get(&format!("header:{name}")),
            KeyPart::Descriptor(key) => self.0.get(&format!("descriptor:{key}")),
            KeyPart::Global => return Some(Cow::Borrowed(GLOBAL.as_bytes())),
            // Only the matching adds it, for a descriptor's entries.
            KeyPart::Entry(_) => None,
        };
        value.map(|v| Cow::Borrowed(v.as_bytes()))
    }
}

/// Any source, with [`UNKNOWN_KEY`] for every part it lacks.
#[derive(Clone, Copy, Debug)]
pub struct OrUnknown<S>(pub S);

impl<S: KeySource> KeySource for OrUnknown<S> {
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
        Some(self.0.part(part).unwrap_or(Cow::Borrowed(UNKNOWN_KEY)))
    }

    fn peer(&self) -> Option<IpAddr> {
        self.0.peer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Prefixes;
    use ratekeeper_tower::client::ClientIp;

    struct Values(Vec<&'static str>);

    impl KeySource for Values {
        fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
            match part {
                KeyPart::Descriptor(key) => {
                    let index: usize = key.parse().ok()?;
                    self.0.get(index).map(|v| Cow::Borrowed(v.as_bytes()))
                }
                _ => None,
            }
        }
    }

    fn parts(n: usize) -> Vec<KeyPart> {
        (0..n).map(|i| KeyPart::Descriptor(i.to_string())).collect()
    }

    #[test]
    fn global_is_the_cores_global() {
        assert_eq!(GLOBAL.as_bytes(), ratekeeper::key::GLOBAL);
    }

    #[test]
    fn values_are_joined_and_escaped() {
        let key = compose_key(&parts(2), &Values(vec!["a|b", "c\\"])).unwrap();
        assert_eq!(key, b"a\\|b|c\\\\");
        assert_eq!(
            compose_key(&parts(2), &Values(vec!["a", "b"])).unwrap(),
            b"a|b"
        );
        assert_eq!(
            compose_key(&parts(1), &Values(vec!["a|b"])).unwrap(),
            b"a\\|b"
        );
    }

    #[test]
    fn a_missing_part_is_named_unless_unknown_is_allowed() {
        let source = Values(vec!["a"]);
        let all = parts(2);
        assert_eq!(compose_key(&all, &source), Err(&all[1]));
        assert_eq!(compose_key(&all, &OrUnknown(source)).unwrap(), b"a|unknown");
    }

    fn http_part(part: &KeyPart, headers: &HeaderMap, peer: &str) -> Option<String> {
        let method = Method::GET;
        let source = HttpSource {
            method: &method,
            path: "/",
            headers,
            peer: Some(peer.parse().unwrap()),
        };
        source
            .part(part)
            .map(|value| String::from_utf8(value.into_owned()).unwrap())
    }

    /// A header's value is keyed as sent, UTF-8 or not, as the tower
    /// layer keys it: the same request, the same key at both.
    #[test]
    fn a_header_that_is_not_utf8_is_keyed_by_its_bytes() {
        let mut headers = HeaderMap::new();
        let raw = [0xff, b'a', b'|'];
        headers.insert("x-api-key", http::HeaderValue::from_bytes(&raw).unwrap());
        let method = Method::GET;
        let source = HttpSource {
            method: &method,
            path: "/",
            headers: &headers,
            peer: None,
        };
        let parts = [KeyPart::Header(http::HeaderName::from_static("x-api-key"))];
        assert_eq!(
            compose_key(&parts, &source).unwrap(),
            ratekeeper::key::compose([&raw[..]])
        );
        assert_eq!(
            compose_key(&parts, &source).unwrap(),
            [0xff, b'a', b'\\', b'|']
        );
    }

    #[test]
    fn an_http_client_the_rule_cannot_find_is_the_peer() {
        let rule = KeyPart::ClientIp(
            ClientIp::XForwardedFor {
                trusted: ratekeeper_tower::client::private_networks(),
            },
            Prefixes::default(),
        );
        // A trusted peer that names no client is the client.
        let mut headers = HeaderMap::new();
        assert_eq!(
            http_part(&rule, &headers, "10.0.0.1").as_deref(),
            Some("10.0.0.1")
        );
        headers.insert("x-forwarded-for", "203.0.113.5".parse().unwrap());
        assert_eq!(
            http_part(&rule, &headers, "10.0.0.1").as_deref(),
            Some("203.0.113.5")
        );
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_the_headers_say() {
        let rule = KeyPart::ClientIp(
            ClientIp::XForwardedFor {
                trusted: Vec::new(),
            },
            Prefixes::default(),
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "203.0.113.5".parse().unwrap());
        for peer in ["10.0.0.1", "127.0.0.1", "198.51.100.3"] {
            assert_eq!(http_part(&rule, &headers, peer).as_deref(), Some(peer));
        }
    }

    #[test]
    fn ipv6_clients_and_peers_are_keyed_by_their_network() {
        let headers = HeaderMap::new();
        let peer = "2001:db8:1:2:aaaa::1";
        let client_ip = KeyPart::ClientIp(
            ClientIp::XForwardedFor {
                trusted: Vec::new(),
            },
            Prefixes::default(),
        );
        assert_eq!(
            http_part(&client_ip, &headers, peer).as_deref(),
            Some("2001:db8:1:2::/64")
        );
        let peer_part = KeyPart::Peer(Prefixes { ipv4: 32, ipv6: 56 });
        assert_eq!(
            http_part(&peer_part, &headers, peer).as_deref(),
            Some("2001:db8:1::/56")
        );
        assert_eq!(
            http_part(&peer_part, &headers, "::ffff:192.0.2.1").as_deref(),
            Some("192.0.2.1")
        );
        // Given by name (the HTTP API), the same.
        let named: HashMap<String, String> = [("client_ip".to_owned(), peer.to_owned())].into();
        assert_eq!(
            NamedParts(&named).part(&client_ip).as_deref(),
            Some(&b"2001:db8:1:2::/64"[..])
        );
    }

    proptest::proptest! {
        #[test]
        fn different_values_never_share_a_key(
            a in proptest::collection::vec("[a-c|\\\\]{0,4}", 1..4),
            b in proptest::collection::vec("[a-c|\\\\]{0,4}", 1..4),
        ) {
            let leak = |v: &Vec<String>| -> Vec<&'static str> {
                v.iter().map(|s| &*Box::leak(s.clone().into_boxed_str())).collect()
            };
            let ka = compose_key(&parts(a.len()), &Values(leak(&a))).unwrap();
            let kb = compose_key(&parts(b.len()), &Values(leak(&b))).unwrap();
            proptest::prop_assert_eq!(ka == kb, a == b);
        }
    }
}
