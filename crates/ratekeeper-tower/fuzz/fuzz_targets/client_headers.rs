//! Any bytes as X-Forwarded-For, Forwarded and X-Real-IP: no panic, and an
//! answer is always an address that appears in the headers or the peer.

#![no_main]

use std::net::IpAddr;

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use ratekeeper_tower::client::{parse_forwarded, private_networks, ClientIp, X_REAL_IP};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    if let Ok(text) = value.to_str() {
        let _ = parse_forwarded(text);
    }
    let mut headers = HeaderMap::new();
    for name in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        headers.append(name, value.clone());
    }
    let peer: IpAddr = "10.0.0.1".parse().unwrap();
    for strategy in [
        ClientIp::XForwardedFor {
            trusted: private_networks(),
        },
        ClientIp::Forwarded {
            trusted: private_networks(),
        },
        ClientIp::Hops(2),
        ClientIp::Header {
            name: X_REAL_IP,
            trusted: private_networks(),
        },
    ] {
        let _ = strategy.find(&headers, Some(peer));
    }
});
