//! nginx `auth_request`: `GET /v1/auth` decides the request nginx is about
//! to serve.
//!
//! nginx's [`auth_request`] module sends a subrequest before each request
//! it guards; the original request travels in headers:
//!
//! | header | what | when missing |
//! |---|---|---|
//! | `X-Original-URI` | the path and query (`$request_uri`); the query is dropped for matching and for the `route` key part | `400 Bad Request` |
//! | `X-Original-Method` | the method (`$request_method`) | `GET` |
//! | `X-Real-IP` | the client (`$remote_addr`) | see below |
//! | `X-Forwarded-For` | the proxies' list (`$proxy_add_x_forwarded_for`) | |
//!
//! The limits are those whose `match` fits the original method and path
//! ([`LimitSet::for_http_request`](crate::engine::LimitSet::for_http_request)), each
//! keyed from the original request:
//!
//! - The original request's peer is `X-Real-IP` when the socket peer,
//!   nginx, is one of the limit's `trusted_proxies` (nginx's own address:
//!   `trusted_proxies = ["127.0.0.1"]` when it runs on the same host) and
//!   the header holds one address; otherwise the socket peer. Like any
//!   forwarding header, `X-Real-IP` and `X-Forwarded-For` are believed
//!   only from a trusted proxy: with no `trusted_proxies` (the default)
//!   every request counts as nginx's, and the first is logged and all are
//!   counted in `/metrics` (`ratekeeper_untrusted_forwarding_headers_total`).
//! - `client_ip` is the limit's rule (`client_ip_from`, `trusted_proxies`,
//!   `trusted_hops`) applied to that peer and the subrequest's headers: the
//!   original peer, unless it is itself a trusted proxy naming a client in
//!   `X-Forwarded-For` (nginx appends its `$remote_addr`, which is skipped
//!   as trusted). `peer` is that original peer; a limit keyed by `peer`
//!   alone trusts no proxy, so its peer is nginx.
//! - `route` is the original method and path; `header:NAME` reads the
//!   subrequest's headers, which are the original request's (nginx passes
//!   them on) plus the ones set for the subrequest.
//! - A part that cannot be found (`descriptor:KEY`, an absent header, no
//!   client) is the shared value `unknown`: such requests are limited
//!   together, never let through unlimited.
//!
//! The answer:
//!
//! - **allowed**: `204 No Content` with the draft's `RateLimit-Policy` and
//!   `RateLimit` fields (none when no limit applies);
//! - **refused**: `429 Too Many Requests` with the fields, `Retry-After`
//!   (whole seconds, rounded up) and `Cache-Control: no-store`;
//! - **the store failed and fails closed**: `503 Service Unavailable`
//!   (with `Retry-After: 1`).
//!
//! When a limit's in-memory table had no room for the key, either answer
//! also carries `X-RateKeeper-Saturated` with the limits' names: refused
//! (`on_saturated = "deny"`, the default) or let through uncounted
//! (`"allow"`); `auth_request_set` can copy it like the other fields.
//!
//! # Making nginx answer 429
//!
//! nginx only understands three answers to an auth subrequest: 2xx lets the
//! request through, 401 and 403 refuse it with that status, and anything
//! else, 429 included, is an error that becomes a 500 for the client. So
//! ask with `?deny_status=403` (any status from 400 to 499 is accepted;
//! 401 or 403 for nginx) and turn that refusal back into a real 429 with
//! `error_page 403 = @ratelimited`, copying the fields over with
//! `auth_request_set`. A 503 (or ratekeeper being unreachable) reaches nginx
//! as a 500, which `error_page 500 = @...` can turn into a 503 (fail
//! closed) or into a pass (fail open).
//!
//! The shipped example, `examples/nginx/nginx.conf`, does all of this and
//! is what the `nginx` integration test runs with a real nginx:
//!
//! ```nginx
#![doc = include_str!("../../../../examples/nginx/nginx.conf")]
//! ```
//!
//! Its companion, `examples/nginx/ratekeeper.toml`, trusts nginx on
//! loopback:
//!
//! ```toml
#![doc = include_str!("../../../../examples/nginx/ratekeeper.toml")]
//! ```
//!
//! A trusted nginx's `X-Real-IP` and `X-Forwarded-For` are believed as they
//! arrive, so nginx must set them itself, as the example does, rather than
//! pass on the client's own.
//!
//! [`auth_request`]: https://nginx.org/en/docs/http/ngx_http_auth_request_module.html

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ratekeeper_tower::client::{ClientIp, X_REAL_IP};
use thiserror::Error;

use crate::config::KeyPart;
use crate::engine::headers::verdict_headers;
use crate::engine::{DecisionDoor, Engine, HttpRequest, HttpSource, MissingPart};

/// `X-Original-URI`: the original request's path and query.
const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
/// `X-Original-Method`: the original request's method.
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");

/// The `auth_request` route, `GET /v1/auth` (and `HEAD`), before the engine
/// is given.
pub(crate) fn routes() -> Router<Engine> {
    Router::new().route("/v1/auth", get(auth))
}

/// Why a subrequest could not be decided: answered `400` (nginx turns it
/// into a 500, so a misconfigured location shows at once).
#[derive(Debug, Error, PartialEq, Eq)]
enum AuthError {
    /// No `X-Original-URI`.
    #[error("X-Original-URI is missing: set it to $request_uri in the auth location")]
    MissingUri,
    /// `X-Original-URI` is not a path.
    #[error("X-Original-URI is not a request target: {0:?}")]
    BadUri(String),
    /// `X-Original-Method` is not a method.
    #[error("X-Original-Method is not an HTTP method: {0:?}")]
    BadMethod(String),
    /// `deny_status` is not a status from 400 to 499.
    #[error("deny_status must be a status from 400 to 499 (403 for nginx), not {0:?}")]
    BadDenyStatus(String),
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("{self}\n")).into_response()
    }
}

/// `GET /v1/auth`.
async fn auth(State(engine): State<Engine>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let original = match Original::read(parts.uri.query(), &parts.headers) {
        Ok(original) => original,
        Err(error) => return error.into_response(),
    };
    let limits = engine.limits();
    let asked = HttpRequest {
        door: DecisionDoor::AuthRequest,
        method: Some(&original.method),
        path: Some(&original.path),
        names: None,
        cost: 1,
        // A part that cannot be found is the shared `unknown`: nginx
        // cannot be asked again.
        missing: MissingPart::Unknown,
    };
    let planned = engine.plan_http(&limits, &asked, |limit| {
        engine.watch_forwarding(limit, &parts.headers, peer, &[X_REAL_IP]);
        HttpSource {
            method: &original.method,
            path: &original.path,
            headers: &parts.headers,
            peer: original_peer(limit.key_parts(), &parts.headers, peer),
        }
    });
    // With `MissingPart::Unknown` and no names, planning cannot fail; if
    // it ever did, nginx must not let the request through unlimited.
    let checks = match planned {
        Ok(checks) => checks,
        Err(error) => {
            tracing::error!(%error, "auth_request: the request could not be planned");
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response();
        }
    };
    let verdict = match engine.check(checks).await {
        Ok(verdict) => verdict,
        Err(error) => {
            tracing::warn!(%error, "auth_request: the rate-limit store failed closed");
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the rate limiter cannot decide right now\n",
            )
                .into_response();
            let headers = response.headers_mut();
            headers.insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static("1"),
            );
            headers.insert(
                axum::http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-store"),
            );
            return response;
        }
    };
    let headers = verdict_headers(&verdict);
    if verdict.is_allowed() {
        (StatusCode::NO_CONTENT, headers).into_response()
    } else {
        (original.deny_status, headers, "Too Many Requests\n").into_response()
    }
}

/// The original request, as nginx describes it.
#[derive(Debug, PartialEq, Eq)]
struct Original {
    method: Method,
    /// The path, without the query.
    path: String,
    /// The status of a refusal.
    deny_status: StatusCode,
}

impl Original {
    /// Reads the subrequest's query (`deny_status`) and headers.
    fn read(query: Option<&str>, headers: &HeaderMap) -> Result<Original, AuthError> {
        let deny_status = deny_status(query)?;
        let uri = headers.get(X_ORIGINAL_URI).ok_or(AuthError::MissingUri)?;
        let path = original_path(uri.as_bytes())?;
        let method = match headers.get(X_ORIGINAL_METHOD) {
            None => Method::GET,
            Some(value) => Method::from_bytes(value.as_bytes()).map_err(|_| {
                AuthError::BadMethod(String::from_utf8_lossy(value.as_bytes()).into_owned())
            })?,
        };
        Ok(Original {
            method,
            path,
            deny_status,
        })
    }
}

/// The status of a refusal: `deny_status` in the query, else 429.
fn deny_status(query: Option<&str>) -> Result<StatusCode, AuthError> {
    let Some(value) = query
        .into_iter()
        .flat_map(|query| query.split('&'))
        .find_map(|pair| pair.strip_prefix("deny_status="))
    else {
        return Ok(StatusCode::TOO_MANY_REQUESTS);
    };
    value
        .parse::<u16>()
        .ok()
        .filter(|code| (400..=499).contains(code))
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or_else(|| AuthError::BadDenyStatus(value.to_owned()))
}

/// The path of a request target: an origin-form `/path?query` (what nginx's
/// `$request_uri` holds) loses its query, an absolute-form
/// `http://host/path?query` keeps only its path. Bytes that are not UTF-8
/// are replaced, never refused: any target nginx accepted is decided.
fn original_path(target: &[u8]) -> Result<String, AuthError> {
    let text = String::from_utf8_lossy(target);
    if text.starts_with('/') {
        let end = text.find(['?', '#']).unwrap_or(text.len());
        return Ok(text[..end].to_owned());
    }
    match text.parse::<axum::http::Uri>() {
        Ok(uri) if uri.scheme().is_some() => Ok(uri.path().to_owned()),
        _ => Err(AuthError::BadUri(text.into_owned())),
    }
}

/// The peer of the original request, for a limit keyed by `parts`:
/// `X-Real-IP` (nginx's `$remote_addr`) when the socket peer, nginx, is one
/// of the proxies the limit's `client_ip` trusts, and the socket peer
/// otherwise: like any forwarding header, `X-Real-IP` is believed only
/// from a trusted proxy (a trusted nginx that sends none is the client).
fn original_peer(parts: &[KeyPart], headers: &HeaderMap, peer: Option<IpAddr>) -> Option<IpAddr> {
    let trusted = parts.iter().find_map(|part| match part {
        KeyPart::ClientIp(rule, _) => Some(rule.trusted()),
        _ => None,
    });
    match trusted {
        Some(trusted) if !trusted.is_empty() => ClientIp::Header {
            name: X_REAL_IP,
            trusted: trusted.to_vec(),
        }
        .find(headers, peer),
        _ => peer,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use ratekeeper::{clock::ManualClock, Timestamp};
    use tower::ServiceExt;

    use super::*;
    use crate::Config;

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

    #[test]
    fn the_original_request_is_read_from_the_headers() {
        let read = Original::read(
            Some("deny_status=403"),
            &headers(&[
                ("x-original-uri", "/api/items?page=2&x=/y"),
                ("x-original-method", "POST"),
            ]),
        )
        .unwrap();
        assert_eq!(
            read,
            Original {
                method: Method::POST,
                path: "/api/items".into(),
                deny_status: StatusCode::FORBIDDEN,
            }
        );
        let read = Original::read(None, &headers(&[("x-original-uri", "/")])).unwrap();
        assert_eq!(read.method, Method::GET);
        assert_eq!(read.deny_status, StatusCode::TOO_MANY_REQUESTS);
        let read = Original::read(
            Some("a=b&deny_status=401"),
            &headers(&[("x-original-uri", "http://example.com/p/q?r")]),
        )
        .unwrap();
        assert_eq!(read.path, "/p/q");
        assert_eq!(read.deny_status, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn bad_input_is_a_named_error_never_a_panic() {
        let uri = |value: &str| headers(&[("x-original-uri", value)]);
        assert_eq!(
            Original::read(None, &HeaderMap::new()),
            Err(AuthError::MissingUri)
        );
        assert_eq!(
            Original::read(None, &uri("no-slash")),
            Err(AuthError::BadUri("no-slash".into()))
        );
        assert_eq!(
            Original::read(None, &uri("")),
            Err(AuthError::BadUri(String::new()))
        );
        for bad in ["200", "500", "abc", "", "4031", "-403"] {
            assert_eq!(
                Original::read(Some(&format!("deny_status={bad}")), &uri("/")),
                Err(AuthError::BadDenyStatus(bad.into())),
                "{bad}"
            );
        }
        let mut map = uri("/");
        map.insert(X_ORIGINAL_METHOD, HeaderValue::from_static("GE T"));
        assert_eq!(
            Original::read(None, &map),
            Err(AuthError::BadMethod("GE T".into()))
        );
        // Bytes that are not UTF-8 are still a path.
        let mut map = HeaderMap::new();
        map.insert(
            X_ORIGINAL_URI,
            HeaderValue::from_bytes(b"/caf\xe9?q").unwrap(),
        );
        assert_eq!(Original::read(None, &map).unwrap().path, "/caf\u{fffd}");
    }

    async fn engine(toml: &str) -> Engine {
        let config = Config::from_toml_str(toml, "test.toml").unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
        Engine::builder(&config).clock(clock).start().await.unwrap()
    }

    async fn ask(engine: &Engine, uri: &str, pairs: &[(&str, &str)]) -> Response {
        ask_from(engine, [127, 0, 0, 1], uri, pairs).await
    }

    async fn ask_from(
        engine: &Engine,
        peer: [u8; 4],
        uri: &str,
        pairs: &[(&str, &str)],
    ) -> Response {
        let mut request = axum::http::Request::get(uri).body(Body::empty()).unwrap();
        *request.headers_mut() = headers(pairs);
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((peer, 40000))));
        routes()
            .with_state(engine.clone())
            .oneshot(request)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_request_no_limit_applies_to_is_allowed_and_counted_as_unmatched() {
        let engine = engine(
            "[[limits]]\nname = \"api\"\nrate = \"1/minute\"\nkey = [\"global\"]\n\
             match = { path_prefix = \"/api\" }\n",
        )
        .await;
        let response = ask(&engine, "/v1/auth", &[("x-original-uri", "/home")]).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        ask(&engine, "/v1/auth", &[("x-original-uri", "/api/x")]).await;
        let door = crate::engine::DecisionDoor::AuthRequest;
        assert_eq!(engine.unmatched().total(door), 1);
        let sample = engine.unmatched().sample(door).unwrap();
        assert_eq!(sample.request, "GET /home");
    }

    #[tokio::test]
    async fn allowed_then_refused_with_the_fields() {
        let engine = engine(
            "[[limits]]\nname = \"per-client\"\nrate = \"2/minute\"\npolicy = \"gcra\"\nkey = [\"client_ip\"]\n\
             trusted_proxies = [\"127.0.0.1\"]\n",
        )
        .await;
        let client = [("x-original-uri", "/a?b"), ("x-real-ip", "198.51.100.7")];
        for remaining in ["1", "0"] {
            let response = ask(&engine, "/v1/auth", &client).await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT);
            assert_eq!(
                response.headers()["ratelimit-policy"],
                "\"per-client\";q=2;w=60"
            );
            let field = response.headers()["ratelimit"].to_str().unwrap();
            assert!(
                field.starts_with(&format!("\"per-client\";r={remaining};")),
                "{field}"
            );
            assert!(response.headers().get("retry-after").is_none());
        }
        let refused = ask(&engine, "/v1/auth?deny_status=403", &client).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(refused.headers()["retry-after"], "30");
        assert_eq!(refused.headers()["cache-control"], "no-store");
        assert!(refused.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"per-client\";r=0;"));
        let refused = ask(&engine, "/v1/auth", &client).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

        // Another client, by X-Real-IP, by X-Forwarded-For through a
        // trusted peer, or by the peer itself, has its own count.
        for other in [
            vec![("x-original-uri", "/a"), ("x-real-ip", "198.51.100.8")],
            vec![("x-original-uri", "/a"), ("x-forwarded-for", "203.0.113.9")],
            vec![("x-original-uri", "/a")],
        ] {
            let response = ask(&engine, "/v1/auth", &other).await;
            assert_eq!(response.status(), StatusCode::NO_CONTENT, "{other:?}");
            let field = response.headers()["ratelimit"].to_str().unwrap();
            assert!(
                field.starts_with("\"per-client\";r=1;"),
                "{other:?}: {field}"
            );
        }
        // The peer's count is the one with neither header.
        let response = ask(&engine, "/v1/auth", &[("x-original-uri", "/b")]).await;
        assert!(response.headers()["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"per-client\";r=0;"));
    }

    #[tokio::test]
    async fn client_headers_from_a_peer_that_is_not_trusted_are_ignored_and_counted() {
        // No trusted proxies (the default), or some that the peer is not
        // one of: X-Real-IP and X-Forwarded-For name nobody, the peer is
        // the client.
        for trust in ["", "trusted_proxies = [\"10.0.0.0/8\"]\n"] {
            let engine = engine(&format!(
                "[[limits]]\nname = \"per-client\"\nrate = \"2/minute\"\nkey = [\"client_ip\"]\n{trust}"
            ))
            .await;
            for (n, client) in ["198.51.100.7", "198.51.100.8", "198.51.100.9"]
                .into_iter()
                .enumerate()
            {
                let response = ask_from(
                    &engine,
                    [192, 0, 2, 1],
                    "/v1/auth",
                    &[
                        ("x-original-uri", "/a"),
                        ("x-real-ip", client),
                        ("x-forwarded-for", client),
                    ],
                )
                .await;
                let expected = if n < 2 {
                    StatusCode::NO_CONTENT
                } else {
                    StatusCode::TOO_MANY_REQUESTS
                };
                assert_eq!(response.status(), expected, "{trust:?}, {client}");
            }
            assert_eq!(
                engine.decision_metrics().untrusted_forwarding("per-client"),
                3,
                "{trust:?}"
            );
            // Another peer is another client.
            let other = ask_from(
                &engine,
                [192, 0, 2, 2],
                "/v1/auth",
                &[("x-original-uri", "/a"), ("x-real-ip", "198.51.100.7")],
            )
            .await;
            assert_eq!(other.status(), StatusCode::NO_CONTENT, "{trust:?}");
        }
    }

    #[tokio::test]
    async fn limits_are_chosen_by_the_original_method_and_path() {
        let engine = engine(
            "[[limits]]\nname = \"login\"\nrate = \"1/minute\"\nkey = [\"route\"]\n\
             [limits.match]\nmethods = [\"POST\"]\npath_prefix = \"/login\"\n",
        )
        .await;
        let get = [("x-original-uri", "/login")];
        let response = ask(&engine, "/v1/auth", &get).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        assert!(response.headers().get("ratelimit").is_none());

        let post = [
            ("x-original-uri", "/login?next=/"),
            ("x-original-method", "POST"),
        ];
        assert_eq!(
            ask(&engine, "/v1/auth", &post).await.status(),
            StatusCode::NO_CONTENT
        );
        // The query is not part of the route: same key, refused.
        let again = [
            ("x-original-uri", "/login?next=/other"),
            ("x-original-method", "POST"),
        ];
        assert_eq!(
            ask(&engine, "/v1/auth", &again).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        // Another route under the prefix is another key.
        let other = [
            ("x-original-uri", "/login/sso"),
            ("x-original-method", "POST"),
        ];
        assert_eq!(
            ask(&engine, "/v1/auth", &other).await.status(),
            StatusCode::NO_CONTENT
        );
    }

    #[tokio::test]
    async fn a_subrequest_without_the_original_uri_is_a_400() {
        let engine =
            engine("[[limits]]\nname = \"g\"\nrate = \"1/minute\"\nkey = [\"global\"]\n").await;
        let response = ask(&engine, "/v1/auth", &[]).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let response = ask(
            &engine,
            "/v1/auth?deny_status=200",
            &[("x-original-uri", "/")],
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
}
