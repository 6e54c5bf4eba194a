//! What looks wrong in a layer's configuration: warned about when it is
//! built.

use std::collections::HashSet;
use std::fmt;

use super::key::{Key, WithoutPeer, DEFAULT_IPV6_PREFIX};
use super::rule::Rule;

/// A configuration that works but is probably not what was meant; logged
/// when the layer is built (as express-rate-limit's validations do) and
/// kept for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayerWarning {
    /// A trusted proxy network covers every address (a /0), so any client
    /// can name its own key in the header the key reads.
    TrustsEveryProxy {
        /// The limit concerned.
        limit: String,
        /// The header the key reads the client from (`X-Forwarded-For`,
        /// `Forwarded`, or the named header).
        header: String,
    },
    /// A limit is keyed by a header a client can send itself. Fine behind a
    /// proxy that always overwrites it; otherwise each client picks its own
    /// key.
    SpoofableHeader {
        /// The limit concerned.
        limit: String,
        /// The header.
        header: String,
    },
    /// The layer believes forwarding headers on requests that carry no
    /// socket peer
    /// ([`trust_headers_without_peer`](crate::RateLimitLayerBuilder::trust_headers_without_peer)),
    /// and this limit reads them: right only where the platform's edge
    /// strips and sets those headers on every request.
    TrustsHeadersWithoutPeer {
        /// The limit concerned.
        limit: String,
    },
    /// A rule's plan header ([`PlanSource::header`](crate::PlanSource::header))
    /// is believed from a network that covers every address: any client
    /// can choose its own plan.
    PlanFromEveryPeer {
        /// The limit concerned.
        limit: String,
        /// The plan header.
        header: String,
    },
    /// A rule's plan header is believed from no peer: every request gets
    /// the limit's own numbers, whatever the header says.
    PlanFromNoPeer {
        /// The limit concerned.
        limit: String,
        /// The plan header.
        header: String,
    },
    /// An allow-listed key is a single IPv6 address, but client keys hold
    /// an IPv6 client as its /64: it never matches; `network` would.
    Ipv6AllowKey {
        /// The allow-listed key.
        key: String,
        /// The key an IPv6 client of that address has.
        network: String,
    },
}

impl fmt::Display for LayerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerWarning::TrustsEveryProxy { limit, header } => write!(
                f,
                "limit {limit} trusts every address as a proxy (a /0 network among its trusted proxies): \
                 any client can choose its own key with {header}"
            ),
            LayerWarning::SpoofableHeader { limit, header } => write!(
                f,
                "limit {limit} is keyed by the {header} header, which any client can set unless a proxy overwrites it"
            ),
            LayerWarning::Ipv6AllowKey { key, network } => write!(
                f,
                "allow key {key:?} is one IPv6 address, but IPv6 clients are keyed by their /64: allow-list {network:?} instead"
            ),
            LayerWarning::PlanFromEveryPeer { limit, header } => write!(
                f,
                "limit {limit} believes its plan header {header} from every address (a /0 network): any client can choose its own plan"
            ),
            LayerWarning::PlanFromNoPeer { limit, header } => write!(
                f,
                "limit {limit} believes its plan header {header} from no peer: every request gets the limit's own numbers"
            ),
            LayerWarning::TrustsHeadersWithoutPeer { limit } => write!(
                f,
                "limit {limit} believes the forwarding headers of requests without a socket peer (trust_headers_without_peer): any client can choose its key unless the platform's edge strips and sets them"
            ),
        }
    }
}

/// Headers any client can set, which only a proxy that overwrites them
/// makes trustworthy.
const SPOOFABLE: &[&str] = &[
    "x-forwarded-for",
    "x-real-ip",
    "forwarded",
    "cf-connecting-ip",
    "true-client-ip",
    "fly-client-ip",
    "x-client-ip",
];

/// Allow keys written as one IPv6 address, which a client key (an IPv6
/// client's /64) never equals, sorted so the warnings come in one order.
pub(crate) fn ipv6_allow_key_warnings(allow_keys: &HashSet<Vec<u8>>) -> Vec<LayerWarning> {
    let mut warnings: Vec<LayerWarning> = allow_keys
        .iter()
        .filter_map(|key| std::str::from_utf8(key).ok())
        .filter_map(|key| {
            let ip = key.parse::<std::net::Ipv6Addr>().ok()?;
            // A mapped address is keyed as its IPv4 address.
            ip.to_ipv4_mapped()
                .is_none()
                .then(|| LayerWarning::Ipv6AllowKey {
                    key: key.to_owned(),
                    network: crate::client::network(ip.into(), 32, DEFAULT_IPV6_PREFIX).to_string(),
                })
        })
        .collect();
    warnings.sort_by_key(ToString::to_string);
    warnings
}

pub(crate) fn warnings_for(rule: &Rule, without_peer: WithoutPeer) -> Vec<LayerWarning> {
    let mut warnings = key_warnings(rule.limit().name(), rule.key(), without_peer);
    let from = rule.plan_from();
    if let Some(header) = from.and_then(|from| from.header_name()) {
        let (limit, header) = (rule.limit().name().to_owned(), header.as_str().to_owned());
        let peers = from.map_or(&[][..], |from| from.peers());
        if peers.iter().any(|net| net.prefix_len() == 0) {
            warnings.push(LayerWarning::PlanFromEveryPeer { limit, header });
        } else if peers.is_empty() && without_peer == WithoutPeer::Unknown {
            warnings.push(LayerWarning::PlanFromNoPeer { limit, header });
        }
    }
    warnings
}

/// What looks wrong in the key of the limit (or cap) called `name`.
pub(crate) fn key_warnings(name: &str, key: &Key, without_peer: WithoutPeer) -> Vec<LayerWarning> {
    let limit = name.to_owned();
    let mut warnings = Vec::new();
    if let Some(header) = key.header_trusting_everyone() {
        warnings.push(LayerWarning::TrustsEveryProxy {
            limit: limit.clone(),
            header,
        });
    }
    if without_peer == WithoutPeer::TrustHeaders && key.reads_forwarding_headers() {
        warnings.push(LayerWarning::TrustsHeadersWithoutPeer {
            limit: limit.clone(),
        });
    }
    if let Some(header) = key.spoofable_header() {
        if SPOOFABLE.contains(&header.as_str()) {
            warnings.push(LayerWarning::SpoofableHeader {
                limit,
                header: header.as_str().to_owned(),
            });
        }
    }
    warnings
}
