//! The configuration file as written: serde structs for the TOML document,
//! every value wrapped in [`Spanned`] so validation can say where it is.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::store_tls::FileStoreTls;

/// A list of strings, each with its place.
pub(crate) type Strings = Spanned<Vec<Spanned<String>>>;

/// The whole document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) store: Option<Spanned<FileStore>>,
    pub(crate) listen: Option<Spanned<FileListen>>,
    pub(crate) requests: Option<Spanned<FileRequests>>,
    pub(crate) limits: Option<Spanned<Vec<Spanned<FileLimit>>>>,
    pub(crate) access: Option<Spanned<super::access::FileAccess>>,
    pub(crate) runtime: Option<Spanned<super::runtime::FileRuntime>>,
    pub(crate) envoy: Option<Spanned<super::envoy_door::FileEnvoy>>,
    pub(crate) limitador: Option<Spanned<super::limitador_file::FileLimitador>>,
    pub(crate) enforcement: Option<Spanned<super::enforcement::FileEnforcement>>,
}

/// `[store]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileStore {
    pub(crate) kind: Option<Spanned<String>>,
    pub(crate) max_keys: Option<Spanned<u64>>,
    pub(crate) on_failure: Option<Spanned<String>>,
    pub(crate) fallback: Option<Spanned<bool>>,
    pub(crate) path: Option<Spanned<String>>,
    pub(crate) url: Option<Spanned<String>>,
    pub(crate) urls: Option<Strings>,
    pub(crate) sentinels: Option<Strings>,
    pub(crate) master_name: Option<Spanned<String>>,
    pub(crate) master_username: Option<Spanned<String>>,
    pub(crate) master_password: Option<Spanned<String>>,
    pub(crate) prefix: Option<Spanned<String>>,
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    pub(crate) start_wait_ms: Option<Spanned<u64>>,
    pub(crate) batch_in_flight: Option<Spanned<u64>>,
    pub(crate) batch_max_calls: Option<Spanned<u64>>,
    pub(crate) lease: Option<Spanned<bool>>,
    pub(crate) lease_max_chunk: Option<Spanned<u64>>,
    pub(crate) lease_chunk_ms: Option<Spanned<u64>>,
    pub(crate) lease_lifetime_ms: Option<Spanned<u64>>,
    pub(crate) lease_spend_while_down: Option<Spanned<bool>>,
    pub(crate) tls: Option<Spanned<FileStoreTls>>,
}

/// `[listen]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileListen {
    pub(crate) http: Option<Spanned<String>>,
    pub(crate) grpc: Option<Spanned<String>>,
    pub(crate) admin: Option<Spanned<String>>,
    pub(crate) connections: Option<Spanned<super::connections::FileConnections>>,
    pub(crate) http2: Option<Spanned<super::connections::FileHttp2>>,
    pub(crate) tls: Option<Spanned<super::tls::FileTls>>,
}

/// `[requests]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRequests {
    pub(crate) max_descriptors: Option<Spanned<u64>>,
    pub(crate) max_entries: Option<Spanned<u64>>,
    pub(crate) max_value_bytes: Option<Spanned<u64>>,
    pub(crate) max_override_rates: Option<Spanned<u64>>,
    pub(crate) max_body_bytes: Option<Spanned<u64>>,
    pub(crate) max_waiting: Option<Spanned<u64>>,
    pub(crate) max_waiting_per_key: Option<Spanned<u64>>,
}

/// One `[[limits]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileLimit {
    pub(crate) name: Spanned<String>,
    pub(crate) rate: Option<Spanned<String>>,
    pub(crate) policy: Option<Spanned<String>>,
    pub(crate) max_in_flight: Option<Spanned<u64>>,
    pub(crate) lease: Option<Spanned<String>>,
    pub(crate) key: Strings,
    pub(crate) trusted_proxies: Option<Spanned<FileTrust>>,
    pub(crate) trusted_hops: Option<Spanned<u64>>,
    pub(crate) client_ip_from: Option<Spanned<String>>,
    pub(crate) ipv4_prefix: Option<Spanned<u64>>,
    pub(crate) ipv6_prefix: Option<Spanned<u64>>,
    pub(crate) shadow: Option<Spanned<bool>>,
    pub(crate) on_saturated: Option<Spanned<String>>,
    pub(crate) allow_overrides: Option<Spanned<bool>>,
    pub(crate) allow_refunds: Option<Spanned<bool>>,
    pub(crate) allow_reports: Option<Spanned<bool>>,
    pub(crate) count_refused: Option<Spanned<bool>>,
    pub(crate) after_response: Option<Spanned<FileAfterResponse>>,
    pub(crate) max_wait: Option<Spanned<String>>,
    pub(crate) block_for: Option<Spanned<String>>,
    pub(crate) block_max: Option<Spanned<String>>,
    pub(crate) block_forget: Option<Spanned<String>>,
    pub(crate) plan_from: Option<Spanned<String>>,
    pub(crate) plan_from_peers: Option<Spanned<FileTrust>>,
    pub(crate) plans: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    #[serde(rename = "match")]
    pub(crate) matcher: Option<Spanned<FileMatch>>,
}

/// `trusted_proxies`: one word (`"private"`) or a list of networks, each
/// entry with its place.
#[derive(Debug)]
pub(crate) enum FileTrust {
    /// A word instead of a list.
    Word(String),
    /// A list of networks (or words).
    List(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for FileTrust {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<FileTrust, D::Error> {
        deserializer.deserialize_any(TrustVisitor)
    }
}

/// Reads [`FileTrust`] by hand: an untagged enum would buffer the value and
/// lose the places of the list's entries.
struct TrustVisitor;

impl<'de> Visitor<'de> for TrustVisitor {
    type Value = FileTrust;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"private\" or a list of networks such as [\"10.0.0.0/8\"]")
    }

    fn visit_str<E: de::Error>(self, word: &str) -> Result<FileTrust, E> {
        Ok(FileTrust::Word(word.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FileTrust, A::Error> {
        let mut list = Vec::new();
        while let Some(entry) = seq.next_element::<Spanned<String>>()? {
            list.push(entry);
        }
        Ok(FileTrust::List(list))
    }
}

/// `[limits.after_response]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileAfterResponse {
    pub(crate) cost: Spanned<String>,
    pub(crate) estimate: Option<Spanned<u64>>,
    pub(crate) ttl: Option<Spanned<String>>,
}

/// `[limits.match]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMatch {
    pub(crate) domain: Option<Spanned<String>>,
    pub(crate) descriptors: Option<Spanned<Vec<Spanned<FileDescriptor>>>>,
    pub(crate) methods: Option<Strings>,
    pub(crate) path_prefix: Option<Spanned<String>>,
}

/// One entry of `descriptors`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileDescriptor {
    pub(crate) key: Spanned<String>,
    pub(crate) value: Option<Spanned<String>>,
    pub(crate) except: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) share_threshold: Option<Spanned<bool>>,
}
