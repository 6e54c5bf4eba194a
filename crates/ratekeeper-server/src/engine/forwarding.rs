//! Forwarding headers from peers a limit does not trust: the most common
//! misconfiguration (a proxy in front, and no `trusted_proxies`), which
//! keys every client behind the proxy as the proxy. The front doors look
//! for it on every request, and the engine logs it once per limit and
//! counts it for `/metrics`.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName};
use ratekeeper_tower::client::ClientIp;

use crate::config::KeyPart;

/// The first forwarding header `headers` carry that one of `parts`'
/// `client_ip` rules would read (or one of `also`), when `peer` is not
/// among the proxies that rule trusts: the header is ignored and the peer
/// counted as the client. `None` when nothing was ignored.
///
/// A `trusted_hops` rule believes any peer, so it never ignores a header.
pub fn untrusted_forwarding(
    parts: &[KeyPart],
    headers: &HeaderMap,
    peer: Option<IpAddr>,
    also: &[HeaderName],
) -> Option<HeaderName> {
    parts.iter().find_map(|part| {
        let KeyPart::ClientIp(rule, _) = part else {
            return None;
        };
        if matches!(rule, ClientIp::Hops(_)) || is_trusted(rule, peer) {
            return None;
        }
        rule.header()
            .into_iter()
            .chain(also.iter().cloned())
            .find(|name| headers.contains_key(name))
    })
}

/// Whether `rule` trusts `peer` (an unknown peer is never trusted).
pub fn is_trusted(rule: &ClientIp, peer: Option<IpAddr>) -> bool {
    peer.is_some_and(|peer| rule.trusts(peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Prefixes;

    fn client_ip(rule: ClientIp) -> Vec<KeyPart> {
        vec![KeyPart::Route, KeyPart::ClientIp(rule, Prefixes::default())]
    }

    #[test]
    fn a_forwarding_header_from_a_peer_that_is_not_trusted_is_found() {
        let xff = HeaderName::from_static("x-forwarded-for");
        let mut headers = HeaderMap::new();
        headers.insert(&xff, "203.0.113.1".parse().unwrap());
        let peer = Some(IpAddr::from([10, 0, 0, 1]));
        let none = client_ip(ClientIp::XForwardedFor {
            trusted: Vec::new(),
        });
        assert_eq!(
            untrusted_forwarding(&none, &headers, peer, &[]),
            Some(xff.clone())
        );
        assert_eq!(
            untrusted_forwarding(&none, &headers, None, &[]),
            Some(xff.clone())
        );
        let trusting = client_ip(ClientIp::XForwardedFor {
            trusted: vec!["10.0.0.0/8".parse().unwrap()],
        });
        assert_eq!(untrusted_forwarding(&trusting, &headers, peer, &[]), None);
        // An IPv4-mapped peer is its IPv4 address.
        let mapped = Some("::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(untrusted_forwarding(&trusting, &headers, mapped, &[]), None);
        // Without the header there is nothing to say.
        assert_eq!(
            untrusted_forwarding(&none, &HeaderMap::new(), peer, &[]),
            None
        );
        // Hops believe any peer; a key without client_ip reads no header.
        assert_eq!(
            untrusted_forwarding(&client_ip(ClientIp::Hops(1)), &headers, peer, &[]),
            None
        );
        assert_eq!(
            untrusted_forwarding(&[KeyPart::Peer(Prefixes::default())], &headers, peer, &[]),
            None
        );
        // Another header the door reads counts too.
        let real_ip = HeaderName::from_static("x-real-ip");
        let mut only_real_ip = HeaderMap::new();
        only_real_ip.insert(&real_ip, "203.0.113.1".parse().unwrap());
        assert_eq!(
            untrusted_forwarding(&none, &only_real_ip, peer, std::slice::from_ref(&real_ip)),
            Some(real_ip)
        );
    }
}
