//! Finding the client behind proxies: tables of real-world headers, and
//! properties that hold for any header.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;
use proptest::prelude::*;
use ratekeeper_tower::client::{
    nth_from_right_xff, parse_forwarded, private_networks, rightmost_untrusted_forwarded,
    rightmost_untrusted_xff, ClientIp, ForwardedError, Node, X_REAL_IP,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn trusted() -> Vec<IpNet> {
    private_networks()
}

#[test]
fn x_forwarded_for_takes_the_rightmost_untrusted_address() {
    let cases: &[(&[&str], Option<&str>)] = &[
        (&["203.0.113.7"], Some("203.0.113.7")),
        (&["203.0.113.7, 10.0.0.2"], Some("203.0.113.7")),
        // The client wrote the leftmost entry: never believed.
        (&["1.1.1.1, 203.0.113.7, 10.0.0.2"], Some("203.0.113.7")),
        (&["1.1.1.1", "203.0.113.7, 10.0.0.2"], Some("203.0.113.7")),
        (&["2001:db8::7, 10.0.0.2"], Some("2001:db8::7")),
        (&["[2001:db8::7]:4711, 10.0.0.2"], Some("2001:db8::7")),
        (&["203.0.113.7:5555,10.0.0.2"], Some("203.0.113.7")),
        (&["::ffff:203.0.113.7, 10.0.0.2"], Some("203.0.113.7")),
        // Garbage, or an empty entry, stops the walk.
        (&["203.0.113.7, garbage, 10.0.0.2"], None),
        (&["203.0.113.7, , 10.0.0.2"], None),
        (&["unknown, 10.0.0.2"], None),
        // All trusted: an internal client, the furthest address.
        (&["10.0.0.9, 10.0.0.2"], Some("10.0.0.9")),
        // No header from a trusted peer: the peer is the client.
        (&[], Some("10.0.0.1")),
    ];
    for (lines, expected) in cases {
        let map = headers(
            &lines
                .iter()
                .map(|line| ("x-forwarded-for", *line))
                .collect::<Vec<_>>(),
        );
        let found = ClientIp::XForwardedFor { trusted: trusted() }.find(&map, Some(ip("10.0.0.1")));
        assert_eq!(found, expected.map(ip), "{lines:?}");
    }
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_the_headers_say() {
    let map = headers(&[("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=1.2.3.4")]);
    let peer = ip("198.51.100.9");
    assert_eq!(
        ClientIp::XForwardedFor { trusted: trusted() }.find(&map, Some(peer)),
        Some(peer)
    );
    assert_eq!(
        ClientIp::Forwarded { trusted: trusted() }.find(&map, Some(peer)),
        Some(peer)
    );
    assert_eq!(ClientIp::Peer.find(&map, Some(peer)), Some(peer));
    assert_eq!(ClientIp::Peer.find(&map, None), None);
}

#[test]
fn forwarded_takes_the_rightmost_untrusted_for_node() {
    let cases: &[(&str, Option<&str>)] = &[
        ("for=203.0.113.7", Some("203.0.113.7")),
        (
            "for=192.0.2.60;proto=http;by=203.0.113.43, for=10.0.0.2",
            Some("192.0.2.60"),
        ),
        (
            r#"for="[2001:db8:cafe::17]:4711", for=10.0.0.2"#,
            Some("2001:db8:cafe::17"),
        ),
        (r#"For="203.0.113.7:80";Proto=https"#, Some("203.0.113.7")),
        (
            "for=1.1.1.1, for=203.0.113.7, for=10.0.0.2",
            Some("203.0.113.7"),
        ),
        ("for=unknown, for=10.0.0.2", None),
        ("for=_hidden, for=10.0.0.2", None),
        (r#"for="_gazonk:_port""#, None),
        ("proto=https", None),
        ("for=203.0.113.7;for=198.51.100.1", None),
        ("for=[2001:db8::1]", None),
        (r#"for="unterminated"#, None),
    ];
    for (value, expected) in cases {
        let map = headers(&[("forwarded", value)]);
        let found = ClientIp::Forwarded { trusted: trusted() }.find(&map, Some(ip("10.0.0.1")));
        assert_eq!(found, expected.map(ip), "{value}");
    }
}

#[test]
fn forwarded_elements_parse_in_full() {
    let elements = parse_forwarded(r#"for=192.0.2.43, for="[2001:db8:cafe::17]", for=unknown;by=_proxy1;host="example.com:8080""#).unwrap();
    assert_eq!(elements.len(), 3);
    assert_eq!(elements[0].for_node, Some(Node::Ip(ip("192.0.2.43"), None)));
    assert_eq!(
        elements[1].for_node,
        Some(Node::Ip(ip("2001:db8:cafe::17"), None))
    );
    assert_eq!(elements[2].for_node, Some(Node::Unknown));
    assert_eq!(
        elements[2].by_node,
        Some(Node::Obfuscated("_proxy1".into()))
    );
    assert_eq!(elements[2].host.as_deref(), Some("example.com:8080"));
    assert_eq!(
        parse_forwarded(r#"for="\"1.2.3.4""#),
        Err(ForwardedError::BadNode("\"1.2.3.4".into()))
    );
    assert_eq!(parse_forwarded("for"), Err(ForwardedError::MissingValue));
    assert_eq!(
        parse_forwarded("for=1.2.3.4 x"),
        Err(ForwardedError::UnexpectedCharacter('x'))
    );
    assert!(parse_forwarded(&"for=1.2.3.4,".repeat(2_000)).is_err());
}

#[test]
fn a_fixed_hop_count_counts_from_the_right() {
    let map = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.7, 10.0.0.2")]);
    assert_eq!(nth_from_right_xff(&map, 1), Some(ip("10.0.0.2")));
    assert_eq!(nth_from_right_xff(&map, 2), Some(ip("203.0.113.7")));
    assert_eq!(nth_from_right_xff(&map, 3), Some(ip("1.1.1.1")));
    assert_eq!(
        nth_from_right_xff(&map, 4),
        None,
        "fewer entries than proxies: unknown, not the leftmost"
    );
    let peer = Some(ip("10.0.0.9"));
    assert_eq!(ClientIp::Hops(2).find(&map, peer), Some(ip("203.0.113.7")));
}

#[test]
fn a_single_header_counts_only_once_and_only_from_a_trusted_peer() {
    let real_ip = || ClientIp::Header {
        name: X_REAL_IP,
        trusted: trusted(),
    };
    let proxy = Some(ip("10.0.0.1"));
    let one = headers(&[("x-real-ip", "203.0.113.7")]);
    assert_eq!(real_ip().find(&one, proxy), Some(ip("203.0.113.7")));
    let two = headers(&[("x-real-ip", "203.0.113.7"), ("x-real-ip", "1.1.1.1")]);
    assert_eq!(real_ip().find(&two, proxy), None);
    let mapped = headers(&[("x-real-ip", "::ffff:203.0.113.7")]);
    assert_eq!(real_ip().find(&mapped, proxy), Some(ip("203.0.113.7")));
    // A client that connects directly names itself, whatever it sends.
    let direct = Some(ip("198.51.100.20"));
    assert_eq!(real_ip().find(&one, direct), direct);
    // The proxy calling on its own behalf, without the header, is the client.
    assert_eq!(real_ip().find(&HeaderMap::new(), proxy), proxy);
}

#[test]
fn without_a_peer_no_header_is_believed() {
    let map = headers(&[
        ("x-forwarded-for", "203.0.113.7, 10.0.0.2"),
        ("forwarded", "for=203.0.113.7"),
        ("x-real-ip", "203.0.113.7"),
    ]);
    for strategy in [
        ClientIp::Peer,
        ClientIp::XForwardedFor { trusted: trusted() },
        ClientIp::Forwarded { trusted: trusted() },
        ClientIp::Hops(2),
        ClientIp::Header {
            name: X_REAL_IP,
            trusted: trusted(),
        },
    ] {
        assert_eq!(strategy.find(&map, None), None, "{strategy:?}");
        if strategy != ClientIp::Peer {
            // The explicit opt-in reads them as a trusted proxy's.
            assert_eq!(
                strategy.find_trusting_headers(&map),
                Some(ip("203.0.113.7")),
                "{strategy:?}"
            );
        }
    }
    assert_eq!(ClientIp::Peer.find_trusting_headers(&map), None);
}

#[test]
fn non_text_header_values_stop_the_walk() {
    let mut map = HeaderMap::new();
    map.append(
        "x-forwarded-for",
        HeaderValue::from_bytes(b"203.0.113.7\xff").unwrap(),
    );
    assert_eq!(rightmost_untrusted_xff(&map, &trusted()), None);
    let mut map = HeaderMap::new();
    map.append(
        "forwarded",
        HeaderValue::from_bytes(b"for=203.0.113.7\xff").unwrap(),
    );
    assert_eq!(rightmost_untrusted_forwarded(&map, &trusted()), None);
}

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// No header value, however broken, panics any strategy.
    #[test]
    fn no_header_panics(value in any::<Vec<u8>>(), peer in proptest::option::of(address())) {
        let Ok(value) = HeaderValue::from_bytes(&value) else { return Ok(()) };
        let mut map = HeaderMap::new();
        for name in ["x-forwarded-for", "forwarded", "x-real-ip"] {
            map.append(name, value.clone());
        }
        for strategy in [
            ClientIp::Peer,
            ClientIp::XForwardedFor { trusted: trusted() },
            ClientIp::Forwarded { trusted: trusted() },
            ClientIp::Hops(2),
            ClientIp::Header { name: X_REAL_IP, trusted: trusted() },
        ] {
            let _ = strategy.find(&map, peer);
        }
        let _ = value.to_str().map(parse_forwarded);
    }

    /// With a trusted proxy last, the leftmost entry is never the answer
    /// unless everything after it is trusted.
    #[test]
    fn never_the_leftmost_entry(spoofed in address(), client in address(), proxies in 1usize..4) {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        prop_assume!(!trusted[0].contains(&ratekeeper_tower::client::canonical(client)));
        prop_assume!(ratekeeper_tower::client::canonical(spoofed) != ratekeeper_tower::client::canonical(client));
        let mut entries = vec![spoofed.to_string(), client.to_string()];
        entries.extend((0..proxies).map(|i| format!("10.0.0.{}", i + 2)));
        let map = headers(&[("x-forwarded-for", &entries.join(", "))]);
        let found = ClientIp::XForwardedFor { trusted: trusted.clone() }.find(&map, Some(ip("10.0.0.1")));
        prop_assert_eq!(found, Some(ratekeeper_tower::client::canonical(client)));

        let nodes: Vec<String> = entries.iter().map(|e| match e.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("for=\"[{v6}]\""),
            _ => format!("for={e}"),
        }).collect();
        let map = headers(&[("forwarded", &nodes.join(", "))]);
        let found = ClientIp::Forwarded { trusted }.find(&map, Some(ip("10.0.0.1")));
        prop_assert_eq!(found, Some(ratekeeper_tower::client::canonical(client)));
    }
}
