//! The headers the proxy changes on the way: the hop-by-hop ones, which
//! describe one connection and are never forwarded, and the forwarding
//! ones, which tell the upstream who asked and how.
//!
//! A forwarding header (`X-Forwarded-For`, `-Proto`, `-Host`, `Forwarded`,
//! `X-Real-IP`) is only what its sender says: it is kept only from a peer
//! in [`ProxyOptions::trusted_proxies`](super::ProxyOptions::trusted_proxies),
//! so that an upstream that believes them believes no client.

use std::net::IpAddr;

use axum::http::header::{HeaderName, HeaderValue, CONNECTION, FORWARDED};
use axum::http::HeaderMap;

/// `X-Forwarded-Proto`: the scheme the client used to reach the proxy.
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`: the host the client asked the proxy for.
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// The headers that describe one connection, not the message (RFC 9110
/// 7.6.1), and are never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes the hop-by-hop headers, and those `Connection` names.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether `headers`' `Connection` lists `token` (case-insensitively).
pub(crate) fn connection_has(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|listed| listed.trim().eq_ignore_ascii_case(token))
}

/// How the request reached the proxy, for the forwarding headers.
#[derive(Debug)]
pub(crate) struct Hop<'a> {
    /// The socket peer, if known.
    pub(crate) peer: Option<IpAddr>,
    /// Whether the peer is a trusted proxy, whose forwarding headers stay.
    pub(crate) trusted: bool,
    /// `http` or `https`: how the client reached the proxy.
    pub(crate) proto: &'static str,
    /// The host the client asked for (`Host`, or HTTP/2's `:authority`).
    pub(crate) host: Option<&'a HeaderValue>,
}

/// Sets the forwarding headers for the upstream: from a peer that is not
/// a trusted proxy, the ones it sent are dropped and replaced by what the
/// proxy saw (`X-Forwarded-For` the peer, `-Proto` and `-Host` the
/// client's scheme and host); from a trusted proxy they are kept, the peer
/// appended to `X-Forwarded-For`, and `-Proto` and `-Host` added only if
/// missing (the first proxy saw the client, this one saw that proxy).
pub(crate) fn set_forwarding(headers: &mut HeaderMap, hop: &Hop<'_>) {
    let for_name = ratekeeper_tower::client::X_FORWARDED_FOR;
    if !hop.trusted {
        for name in [
            &for_name,
            &X_FORWARDED_PROTO,
            &X_FORWARDED_HOST,
            &FORWARDED,
            &X_REAL_IP,
        ] {
            headers.remove(name);
        }
    }
    if let Some(peer) = hop.peer {
        append_forwarded_for(headers, peer);
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(hop.proto));
    }
    if let Some(host) = hop.host {
        if !headers.contains_key(&X_FORWARDED_HOST) {
            headers.insert(X_FORWARDED_HOST, host.clone());
        }
    }
}

/// Appends `peer` to `X-Forwarded-For` (all its lines joined into one).
pub(crate) fn append_forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    let name = ratekeeper_tower::client::X_FORWARDED_FOR;
    let mut value = Vec::new();
    for line in headers.get_all(&name) {
        value.extend_from_slice(line.as_bytes());
        value.extend_from_slice(b", ");
    }
    value.extend_from_slice(peer.to_string().as_bytes());
    // The lines were header values, so joined they are one too; the
    // fallback (the peer alone) only guards against the impossible.
    let value =
        HeaderValue::from_bytes(&value).or_else(|_| HeaderValue::from_str(&peer.to_string()));
    if let Ok(value) = value {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret , bad header"),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic eA=="),
            ("x-kept", "yes"),
            ("accept", "*/*"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        assert!(connection_has(&headers, "CLOSE"));
        assert!(!connection_has(&headers, "upgrade"));
        remove_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept", "accept"]);
    }

    #[test]
    fn the_peer_is_appended_to_x_forwarded_for() {
        let mut headers = HeaderMap::new();
        append_forwarded_for(&mut headers, "192.0.2.1".parse().unwrap());
        assert_eq!(headers["x-forwarded-for"], "192.0.2.1");
        headers.append("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        append_forwarded_for(&mut headers, "2001:db8::1".parse().unwrap());
        assert_eq!(
            headers["x-forwarded-for"],
            "192.0.2.1, 10.0.0.1, 2001:db8::1"
        );
        assert_eq!(headers.get_all("x-forwarded-for").iter().count(), 1);
    }

    fn sent() -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "spoofed.example"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
        ] {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        headers
    }

    #[test]
    fn an_untrusted_peers_forwarding_headers_are_replaced_by_what_the_proxy_saw() {
        let mut headers = sent();
        let host = HeaderValue::from_static("app.example:8000");
        let hop = Hop {
            peer: Some("192.0.2.7".parse().unwrap()),
            trusted: false,
            proto: "http",
            host: Some(&host),
        };
        set_forwarding(&mut headers, &hop);
        assert_eq!(headers["x-forwarded-for"], "192.0.2.7");
        assert_eq!(headers["x-forwarded-proto"], "http");
        assert_eq!(headers["x-forwarded-host"], "app.example:8000");
        assert!(!headers.contains_key("forwarded"));
        assert!(!headers.contains_key("x-real-ip"));
    }

    #[test]
    fn a_trusted_proxys_forwarding_headers_are_kept_and_extended() {
        let mut headers = sent();
        let host = HeaderValue::from_static("app.example:8000");
        let hop = Hop {
            peer: Some("10.0.0.2".parse().unwrap()),
            trusted: true,
            proto: "http",
            host: Some(&host),
        };
        set_forwarding(&mut headers, &hop);
        assert_eq!(headers["x-forwarded-for"], "6.6.6.6, 10.0.0.2");
        assert_eq!(headers["x-forwarded-proto"], "https");
        assert_eq!(headers["x-forwarded-host"], "spoofed.example");
        assert_eq!(headers["forwarded"], "for=6.6.6.6");
        let mut bare = HeaderMap::new();
        set_forwarding(&mut bare, &hop);
        assert_eq!(bare["x-forwarded-proto"], "http");
        assert_eq!(bare["x-forwarded-host"], "app.example:8000");
    }
}
