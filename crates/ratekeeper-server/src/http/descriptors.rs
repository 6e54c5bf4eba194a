//! The shapes the JSON API takes a descriptor in: a list of entries, as
//! ratekeeper writes it, or the object Envoy's `RateLimitDescriptor` is in
//! JSON (`{"entries": [{"key": .., "value": ..}]}`), which Envoy users paste
//! from their logs and documentation.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::json::DescriptorEntry;

/// What an error about a descriptor shows: both shapes accepted.
pub(crate) const ACCEPTED: &str = r#"a descriptor is a list of entries, [{"key": "remote_address", "value": "203.0.113.7"}], or Envoy's object, {"entries": [{"key": "remote_address", "value": "203.0.113.7"}]}; the units a request takes go in "cost""#;

/// Envoy's `RateLimitDescriptor` as JSON, with only what the API uses.
/// `hits_addend` and `limit` are refused rather than ignored: the API's
/// `cost` is per request, and overrides come from the configuration.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvoyDescriptor {
    entries: Vec<DescriptorEntry>,
}

/// Reads `descriptors`: each one in either shape ([`ACCEPTED`]); an error
/// names the descriptor and shows both.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<Vec<DescriptorEntry>>>, D::Error> {
    let Some(values) = Option::<Vec<serde_json::Value>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    values
        .into_iter()
        .enumerate()
        .map(|(index, value)| {
            let shown = |error: serde_json::Error| {
                D::Error::custom(format!("descriptors[{index}]: {error}; {ACCEPTED}"))
            };
            match value {
                serde_json::Value::Object(_) => serde_json::from_value::<EnvoyDescriptor>(value)
                    .map(|descriptor| descriptor.entries)
                    .map_err(shown),
                _ => serde_json::from_value(value).map_err(shown),
            }
        })
        .collect::<Result<_, _>>()
        .map(Some)
}
