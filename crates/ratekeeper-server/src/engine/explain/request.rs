//! What `POST /v1/explain` and `ratekeeper explain` take: one shape for
//! both, read into a [`Probe`] within the request caps.

use std::collections::BTreeMap;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::{Probe, ProbeEntry};
use crate::config::{CapError, RequestCaps};

/// A request to explain, as JSON: either an HTTP request
///
/// ```json
/// {"method": "GET", "path": "/login", "headers": {"x-api-key": "k"}, "peer": "10.0.0.1"}
/// ```
///
/// or descriptors in a domain, each a list of entries or, as Envoy users
/// write them, an object with `entries`:
///
/// ```json
/// {"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "10.0.0.1"}],
///                                   {"entries": [{"key": "path", "value": "/login"}]}]}
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    /// The HTTP method (default `GET`).
    #[serde(default)]
    pub method: Option<String>,
    /// The HTTP path (default `/`).
    #[serde(default)]
    pub path: Option<String>,
    /// HTTP headers, by name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The client's address as the door would see it (the socket peer).
    #[serde(default)]
    pub peer: Option<IpAddr>,
    /// Envoy's domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// Envoy's descriptors.
    #[serde(default)]
    pub descriptors: Option<Vec<DescriptorInput>>,
}

/// One descriptor: its entries, bare or inside `entries`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum DescriptorInput {
    /// `[{"key": …, "value": …}, …]`
    Entries(Vec<ProbeEntry>),
    /// `{"entries": [{"key": …, "value": …}, …]}`, Envoy's shape.
    Envoy {
        /// The entries.
        entries: Vec<ProbeEntry>,
    },
}

impl DescriptorInput {
    fn entries(&self) -> &[ProbeEntry] {
        match self {
            DescriptorInput::Entries(entries) | DescriptorInput::Envoy { entries } => entries,
        }
    }
}

/// Why a request cannot be explained.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// Both an HTTP request's fields and descriptors.
    #[error("give an HTTP request (method, path, headers, peer) or Envoy descriptors (domain, descriptors), not both")]
    Both,
    /// Descriptors without a domain, or a domain without descriptors.
    #[error("\"domain\" and \"descriptors\" go together")]
    Incomplete,
    /// A method that is not a token.
    #[error("invalid method {0:?}")]
    Method(String),
    /// A path that does not start with `/`.
    #[error("the path {0:?} must start with \"/\"")]
    Path(String),
    /// A header that HTTP cannot carry.
    #[error("invalid header {0:?}")]
    Header(String),
    /// Over a cap of `[requests]`.
    #[error(transparent)]
    Cap(#[from] CapError),
}

impl ExplainRequest {
    /// The request as a [`Probe`], within `caps` (the same the decision
    /// doors apply).
    pub(crate) fn into_probe(self, caps: &RequestCaps) -> Result<Probe, ExplainError> {
        let http = self.method.is_some()
            || self.path.is_some()
            || !self.headers.is_empty()
            || self.peer.is_some();
        match (self.domain, self.descriptors) {
            (Some(_), Some(_)) if http => Err(ExplainError::Both),
            (Some(domain), Some(descriptors)) => {
                caps.check_descriptors(descriptors.iter().map(|descriptor| {
                    descriptor
                        .entries()
                        .iter()
                        .map(|entry| (entry.key.as_str(), entry.value.as_str()))
                }))?;
                caps.value(&domain, || "domain".to_owned())?;
                let descriptors = descriptors
                    .into_iter()
                    .map(|descriptor| match descriptor {
                        DescriptorInput::Entries(entries) | DescriptorInput::Envoy { entries } => {
                            entries
                        }
                    })
                    .collect();
                Ok(Probe::Descriptors {
                    domain,
                    descriptors,
                })
            }
            (Some(_), None) | (None, Some(_)) => Err(ExplainError::Incomplete),
            (None, None) => {
                let method_text = self.method.unwrap_or_else(|| "GET".to_owned());
                caps.value(&method_text, || "method".to_owned())?;
                let method = Method::from_bytes(method_text.to_ascii_uppercase().as_bytes())
                    .map_err(|_| ExplainError::Method(method_text.clone()))?;
                let path = self.path.unwrap_or_else(|| "/".to_owned());
                caps.value(&path, || "path".to_owned())?;
                if !path.starts_with('/') {
                    return Err(ExplainError::Path(path));
                }
                caps.key_parts(self.headers.len())?;
                let mut headers = HeaderMap::with_capacity(self.headers.len());
                for (name, value) in &self.headers {
                    caps.value(value, || format!("headers[{name:?}]"))?;
                    let parsed = HeaderName::from_bytes(name.as_bytes())
                        .ok()
                        .zip(HeaderValue::from_str(value).ok());
                    let (name, value) = parsed.ok_or_else(|| ExplainError::Header(name.clone()))?;
                    headers.append(name, value);
                }
                Ok(Probe::Http {
                    method,
                    path,
                    headers,
                    peer: self.peer,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Probe, ExplainError> {
        serde_json::from_str::<ExplainRequest>(json)
            .unwrap()
            .into_probe(&RequestCaps::default())
    }

    #[test]
    fn both_descriptor_shapes_are_read() {
        let probe = read(
            r#"{"domain": "edge", "descriptors": [[{"key": "a", "value": "1"}],
                {"entries": [{"key": "b", "value": "2"}]}]}"#,
        )
        .unwrap();
        let Probe::Descriptors {
            domain,
            descriptors,
        } = probe
        else {
            panic!("descriptors expected");
        };
        assert_eq!(domain, "edge");
        assert_eq!(descriptors[0][0].key, "a");
        assert_eq!(descriptors[1][0].value, "2");
    }

    #[test]
    fn an_http_request_has_defaults() {
        let Probe::Http { method, path, .. } = read("{}").unwrap() else {
            panic!("an HTTP request expected");
        };
        assert_eq!((method, path.as_str()), (Method::GET, "/"));
    }

    #[test]
    fn mixed_or_bad_requests_are_named_errors() {
        let both = r#"{"path": "/", "domain": "d", "descriptors": []}"#;
        assert!(matches!(read(both), Err(ExplainError::Both)));
        assert!(matches!(
            read(r#"{"domain": "d"}"#),
            Err(ExplainError::Incomplete)
        ));
        assert!(matches!(
            read(r#"{"method": "G E T"}"#),
            Err(ExplainError::Method(_))
        ));
        assert!(matches!(
            read(r#"{"path": "login"}"#),
            Err(ExplainError::Path(_))
        ));
        assert!(matches!(
            read(r#"{"headers": {"bad name": "v"}}"#),
            Err(ExplainError::Header(_))
        ));
        let many: Vec<String> = (0..300).map(|_| "[]".to_owned()).collect();
        let over = format!(r#"{{"domain": "d", "descriptors": [{}]}}"#, many.join(","));
        assert!(matches!(read(&over), Err(ExplainError::Cap(_))));
    }
}
