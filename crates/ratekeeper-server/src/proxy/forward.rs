//! Forwarding a request to the upstream and its response back, both bodies
//! streamed.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE};
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderMap, Response, StatusCode, Uri, Version};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::ProxyError;
use crate::config::redact_url;

/// How long connecting to the upstream may take before the request fails
/// with a 502.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The upstream: where requests go, and the client pool that takes them.
#[derive(Clone, Debug)]
pub(crate) struct Upstream {
    authority: Authority,
    /// The upstream URL's path without its trailing `/`, put before every
    /// request's path (empty for `http://host:port`).
    prefix: String,
    client: Client<HttpConnector, Body>,
    /// How long the upstream may take to start its response.
    response_timeout: Duration,
}

impl Upstream {
    /// The upstream at `uri`: `http://host[:port][/prefix]`, without query.
    pub(crate) fn new(uri: &Uri, response_timeout: Duration) -> Result<Upstream, ProxyError> {
        let invalid = |reason: &str| ProxyError::InvalidUpstream {
            uri: redact_url(&uri.to_string()),
            reason: reason.to_owned(),
        };
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(invalid("the upstream must be an http:// URL"));
        }
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
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Upstream {
            authority,
            prefix,
            client,
            response_timeout,
        })
    }

    /// The upstream URI of a request for `uri` (whose path and query are
    /// kept, its scheme and authority, if any, replaced).
    fn target(&self, uri: &Uri) -> Option<Uri> {
        let path_and_query = match uri.query() {
            Some(query) => format!("{}{}?{query}", self.prefix, uri.path()),
            None => format!("{}{}", self.prefix, uri.path()),
        };
        Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(PathAndQuery::try_from(path_and_query).ok()?)
            .build()
            .ok()
    }
}

/// Sends the request to the upstream and its response back: method,
/// headers (but the hop-by-hop ones), status and bodies as they are, the
/// bodies streamed; the peer appended to `X-Forwarded-For`. An upstream
/// that cannot be reached or breaks off before its response is a 502; one
/// that does not start its response in time, a 504.
pub(crate) async fn forward(State(upstream): State<Upstream>, request: Request) -> Response<Body> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let (parts, body) = request.into_parts();
    let Some(target) = upstream.target(&parts.uri) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: cannot forward this request target\n",
        );
    };
    let mut outgoing = Request::new(body);
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = target;
    *outgoing.version_mut() = Version::HTTP_11;
    *outgoing.headers_mut() = parts.headers;
    remove_hop_by_hop(outgoing.headers_mut());
    if let Some(peer) = peer {
        append_forwarded_for(outgoing.headers_mut(), peer);
    }
    let response =
        tokio::time::timeout(upstream.response_timeout, upstream.client.request(outgoing)).await;
    let Ok(response) = response else {
        tracing::warn!(
            timeout = ?upstream.response_timeout,
            "proxy: the upstream did not start its response in time"
        );
        return plain(
            StatusCode::GATEWAY_TIMEOUT,
            "Gateway Timeout: the upstream did not answer in time\n",
        );
    };
    match response {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(error) => {
            tracing::warn!(error = %error_chain(&error), "proxy: the upstream failed");
            plain(
                StatusCode::BAD_GATEWAY,
                "Bad Gateway: the upstream did not answer\n",
            )
        }
    }
}

/// A short text response.
fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// An error and its sources, for the log.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

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

    #[test]
    fn upstream_urls_are_checked_and_joined() {
        let upstream = |s: &str| Upstream::new(&s.parse().unwrap(), Duration::from_secs(60));
        for bad in [
            "https://example.com",
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
}
