//! The upstream: its address, and the client pools that reach it over
//! HTTP/1.1 or HTTP/2, in plaintext or over TLS (rustls on the ring
//! provider; the system's CA certificates, or those of one file).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::Uri;
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::{ProxyError, ProxyOptions};
use crate::config::redact_url;

/// How long connecting to the upstream may take before the request fails
/// with a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of connections to the upstream.
pub(crate) type Pool = Client<HttpsConnector<HttpConnector>, Body>;

/// The upstream: where requests go, and the client pools that take them.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    scheme: Scheme,
    authority: Authority,
    /// The upstream URL's path without its trailing `/`, put before every
    /// request's path (empty for `http://host:port`).
    prefix: String,
    /// Requests: HTTP/1.1, or HTTP/2 as the options and ALPN say.
    pub(crate) client: Pool,
    /// Upgrades (WebSocket): HTTP/1.1 only, since an HTTP/2 connection
    /// cannot be upgraded.
    pub(crate) upgrade_client: Pool,
    /// How long the upstream may take to start its response.
    pub(crate) response_timeout: Duration,
}

impl Upstream {
    /// The upstream at `uri`: `http[s]://host[:port][/prefix]`, without
    /// query or user information.
    pub(crate) fn new(uri: &Uri, options: &ProxyOptions) -> Result<Upstream, ProxyError> {
        let invalid = |reason: &str| ProxyError::InvalidUpstream {
            uri: redact_url(&uri.to_string()),
            reason: reason.to_owned(),
        };
        let scheme = match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS => scheme.clone(),
            _ => return Err(invalid("the upstream must be an http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("the URL has no host"))?
            .clone();
        if authority.as_str().contains('@') {
            return Err(invalid("user information is not supported in the URL"));
        }
        if uri.query().is_some() {
            return Err(invalid("the URL must not have a query"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        let tls = tls_config(scheme == Scheme::HTTPS, options.upstream_ca.as_deref())?;
        let client = pool(tls.clone(), options.upstream_http2, true);
        let upgrade_client = pool(tls, false, false);
        Ok(Upstream {
            scheme,
            authority,
            prefix,
            client,
            upgrade_client,
            response_timeout: options.response_timeout,
        })
    }

    /// The upstream URI of a request for `uri` (whose path and query are
    /// kept, its scheme and authority, if any, replaced).
    pub(crate) fn target(&self, uri: &Uri) -> Option<Uri> {
        let path_and_query = match uri.query() {
            Some(query) => format!("{}{}?{query}", self.prefix, uri.path()),
            None => format!("{}{}", self.prefix, uri.path()),
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(PathAndQuery::try_from(path_and_query).ok()?)
            .build()
            .ok()
    }
}

/// A client pool: HTTP/2 only (`h2c` on plaintext) when `http2_only`,
/// else HTTP/1.1, or HTTP/2 where TLS's ALPN agrees on it and `alpn_h2`.
fn pool(tls: ClientConfig, http2_only: bool, alpn_h2: bool) -> Pool {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    // The connector takes both schemes; which one a request uses is the
    // upstream URL's.
    http.enforce_http(false);
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let connector = match (http2_only, alpn_h2) {
        (true, _) => builder.enable_http2().wrap_connector(http),
        (false, true) => builder.enable_all_versions().wrap_connector(http),
        (false, false) => builder.enable_http1().wrap_connector(http),
    };
    let mut client = Client::builder(TokioExecutor::new());
    client.http2_only(http2_only);
    client.build(connector)
}

/// The TLS client configuration: the CA certificates of `ca`, or the
/// system's. A plaintext upstream gets one that trusts nothing, never
/// used.
fn tls_config(https: bool, ca: Option<&Path>) -> Result<ClientConfig, ProxyError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| ProxyError::UpstreamTls {
            reason: error.to_string(),
        })?;
    let builder = match (https, ca) {
        (_, Some(path)) => builder.with_root_certificates(roots(path)?),
        (true, None) => builder
            .with_native_roots()
            .map_err(|error| ProxyError::UpstreamTls {
                reason: format!(
                    "no CA certificate found on this system ({error}); name a CA file (--upstream-ca)"
                ),
            })?,
        (false, None) => builder.with_root_certificates(RootCertStore::empty()),
    };
    Ok(builder.with_no_client_auth())
}

/// The certificates of the PEM file at `path`.
fn roots(path: &Path) -> Result<RootCertStore, ProxyError> {
    let invalid = |reason: String| ProxyError::UpstreamCa {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|error| invalid(error.to_string()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|error| invalid(format!("not a PEM certificate: {error}")))?;
        roots
            .add(cert)
            .map_err(|error| invalid(format!("not a CA certificate: {error}")))?;
    }
    if roots.is_empty() {
        return Err(invalid("the file holds no certificate".to_owned()));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked_and_joined() {
        let upstream = |s: &str| Upstream::new(&s.parse().unwrap(), &ProxyOptions::default());
        for bad in [
            "ftp://example.com",
            "/relative",
            "http://example.com/?q=1",
            "http://user@example.com",
        ] {
            assert!(
                matches!(upstream(bad), Err(ProxyError::InvalidUpstream { .. })),
                "{bad}"
            );
        }
        let with_password = upstream("http://user:S3cret@example.com").unwrap_err();
        assert!(
            !with_password.to_string().contains("S3cret"),
            "{with_password}"
        );
        let plain = upstream("http://127.0.0.1:3000").unwrap();
        let uri: Uri = "/a/b?c=d&e".parse().unwrap();
        assert_eq!(
            plain.target(&uri).unwrap(),
            "http://127.0.0.1:3000/a/b?c=d&e"
        );
        let prefixed = upstream("http://app.internal:80/base/").unwrap();
        assert_eq!(
            prefixed.target(&uri).unwrap(),
            "http://app.internal:80/base/a/b?c=d&e"
        );
        let absolute: Uri = "http://elsewhere/x".parse().unwrap();
        assert_eq!(plain.target(&absolute).unwrap(), "http://127.0.0.1:3000/x");
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let options = ProxyOptions {
            upstream_ca: Some(path.clone()),
            ..ProxyOptions::default()
        };
        let error = Upstream::new(&"https://app.internal".parse().unwrap(), &options).unwrap_err();
        assert!(
            matches!(&error, ProxyError::UpstreamCa { path: at, .. } if *at == path),
            "{error}"
        );
        let missing = ProxyOptions {
            upstream_ca: Some(dir.path().join("missing.pem")),
            ..ProxyOptions::default()
        };
        let error = Upstream::new(&"https://app.internal".parse().unwrap(), &missing).unwrap_err();
        assert!(error.to_string().contains("missing.pem"), "{error}");
    }
}
