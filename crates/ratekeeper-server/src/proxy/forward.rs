//! Forwarding a request to the upstream and its response back, both bodies
//! streamed, in the HTTP version the client speaks.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{HeaderValue, CONTENT_TYPE, HOST, RETRY_AFTER, UPGRADE};
use axum::http::{Response, StatusCode, Version};

use super::headers::{remove_hop_by_hop, set_forwarding, Hop};
use super::in_flight::Held;
use super::upgrade;
use super::Route;

/// Sends the request to the upstream and its response back: method,
/// headers (but the hop-by-hop ones), status and bodies as they are, the
/// bodies streamed; the forwarding headers set (see `headers.rs`); an
/// upgrade (WebSocket) tunnelled once the upstream accepts it. An upstream
/// that cannot be reached or breaks off before its response is a 502; one
/// that does not start its response in time, a 504.
pub(crate) async fn forward(State(route): State<Route>, mut request: Request) -> Response<Body> {
    let upstream = &route.upstream;
    let Some(place) = route.in_flight.try_take() else {
        // Counted, not logged: a flood would otherwise flood the log.
        route.engine.decision_metrics().record_upstream_overflow();
        let mut response = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable: too many requests are at the upstream\n",
        );
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let upgrade = upgrade::requested(&request).map(|protocol| {
        let on = hyper::upgrade::on(&mut request);
        (protocol, on)
    });
    let (parts, body) = request.into_parts();
    let Some(target) = upstream.target(&parts.uri) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "Bad Request: cannot forward this request target\n",
        );
    };
    let mut headers = parts.headers;
    remove_hop_by_hop(&mut headers);
    // HTTP/2 clients name the host in `:authority`; the upstream, over
    // HTTP/1.1, reads `Host`.
    if !headers.contains_key(HOST) {
        let authority = parts.uri.authority().map(|a| a.as_str());
        if let Some(host) = authority.and_then(|a| HeaderValue::from_str(a).ok()) {
            headers.insert(HOST, host);
        }
    }
    let host = headers.get(HOST).cloned();
    let hop = Hop {
        peer,
        trusted: peer.is_some_and(|peer| route.trusts(peer)),
        proto: route.client_proto,
        host: host.as_ref(),
    };
    set_forwarding(&mut headers, &hop);
    let (client, client_upgrade) = match upgrade {
        Some((protocol, on)) => {
            upgrade::restore(&mut headers, protocol);
            (&upstream.upgrade_client, Some(on))
        }
        None => (&upstream.client, None),
    };
    let mut outgoing = Request::new(body);
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = target;
    *outgoing.version_mut() = Version::HTTP_11;
    *outgoing.headers_mut() = headers;
    let response = tokio::time::timeout(upstream.response_timeout, client.request(outgoing)).await;
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
    let mut response = match response {
        Ok(response) => response,
        Err(error) => {
            tracing::warn!(error = %crate::error_chain::error_chain(&error), "proxy: the upstream failed");
            return plain(
                StatusCode::BAD_GATEWAY,
                "Bad Gateway: the upstream did not answer\n",
            );
        }
    };
    let switched = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    let upstream_upgrade = switched.then(|| hyper::upgrade::on(&mut response));
    let (mut head, body) = response.into_parts();
    let protocol = head.headers.get(UPGRADE).cloned();
    remove_hop_by_hop(&mut head.headers);
    match (client_upgrade, upstream_upgrade, protocol) {
        (Some(client), Some(upstream), Some(protocol)) => {
            upgrade::restore(&mut head.headers, protocol);
            tokio::spawn(upgrade::tunnel(client, upstream, route.tunnels.clone()));
        }
        (_, Some(_), _) => {
            tracing::warn!("proxy: the upstream switched protocols unasked");
            return plain(
                StatusCode::BAD_GATEWAY,
                "Bad Gateway: the upstream switched protocols unasked\n",
            );
        }
        _ => {}
    }
    // The client's version, never the upstream's: an HTTP/1.0 upstream
    // must not close a client's HTTP/1.1 keep-alive connection.
    head.version = parts.version;
    Response::from_parts(head, Body::new(Held::new(body, place)))
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
