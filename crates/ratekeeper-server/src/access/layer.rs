//! [`RequireToken`]: the tower layer that lets through only the requests
//! showing a token of their door, on any router or service (an axum
//! `Router`, a tonic service) and so under any server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{header, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::{Access, Door, Refused};

/// What a door answers a request it refuses, by the body type of its
/// responses: axum's gets a `401` problem detail, tonic's the gRPC status
/// `UNAUTHENTICATED`.
pub trait Challenge: Sized {
    /// The refusal of a request at `door`, for `why`.
    fn challenge(door: Door, why: Refused) -> Response<Self>;
}

impl Challenge for axum::body::Body {
    /// `401 Unauthorized`, an RFC 9457 problem detail, with
    /// `WWW-Authenticate: Bearer` (RFC 6750; `error="invalid_token"` for a
    /// wrong token).
    fn challenge(door: Door, why: Refused) -> Response<Self> {
        let status = StatusCode::UNAUTHORIZED;
        let body = serde_json::json!({
            "type": "about:blank",
            "title": "Unauthorized",
            "status": status.as_u16(),
            "detail": why.message(door),
        });
        let mut response = Response::new(axum::body::Body::from(body.to_string()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(match why {
                Refused::Missing => "Bearer realm=\"ratekeeper\"",
                Refused::Wrong => "Bearer realm=\"ratekeeper\", error=\"invalid_token\"",
            }),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

impl Challenge for tonic::body::Body {
    /// The gRPC status `UNAUTHENTICATED`, in a trailers-only response.
    fn challenge(door: Door, why: Refused) -> Response<Self> {
        tonic::Status::unauthenticated(why.message(door)).into_http()
    }
}

/// The layer checking every request for a token of `door` (see the
/// [module](super)); requests without one are answered by [`Challenge`]
/// and never reach the service.
///
/// ```
/// use std::sync::Arc;
/// use ratekeeper_server::access::{Access, Door, TokenSet, TokenSource};
/// use ratekeeper_server::config::AccessConfig;
///
/// let mut config = AccessConfig::default();
/// config.decisions = Some(TokenSet::new(
///     TokenSource::Env("TOKEN".into()),
///     ["0123456789abcdef"],
/// ));
/// let access = Arc::new(Access::new(&config));
/// let app: axum::Router = axum::Router::new()
///     .route("/v1/check", axum::routing::post(|| async { "decided" }))
///     .layer(access.layer(Door::Http));
/// # drop(app);
/// ```
#[derive(Clone, Debug)]
pub struct RequireToken {
    access: Arc<Access>,
    door: Door,
}

impl RequireToken {
    /// The layer of `door`, checking against `access`'s tokens in force
    /// (so a reload's tokens apply at once).
    pub fn new(access: Arc<Access>, door: Door) -> RequireToken {
        RequireToken { access, door }
    }
}

impl<S> Layer<S> for RequireToken {
    type Service = RequireTokenService<S>;

    fn layer(&self, inner: S) -> RequireTokenService<S> {
        RequireTokenService {
            inner,
            access: Arc::clone(&self.access),
            door: self.door,
        }
    }
}

/// A service behind [`RequireToken`].
#[derive(Clone, Debug)]
pub struct RequireTokenService<S> {
    inner: S,
    access: Arc<Access>,
    door: Door,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequireTokenService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Challenge,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Guarded<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        match self
            .access
            .check(self.door, request.uri().path(), request.headers())
        {
            Ok(()) => Guarded {
                state: State::Passed {
                    future: self.inner.call(request),
                },
            },
            Err(why) => Guarded {
                state: State::Refused {
                    door: self.door,
                    why,
                },
            },
        }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for RequireTokenService<S> {
    const NAME: &'static str = S::NAME;
}

pin_project! {
    /// The response of a [`RequireTokenService`]: the service's, or the
    /// refusal.
    #[derive(Debug)]
    pub struct Guarded<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProject]
    #[derive(Debug)]
    enum State<F> {
        // The request showed a token: the service answers.
        Passed {
            #[pin]
            future: F,
        },
        // It did not: the door's challenge.
        Refused {
            door: Door,
            why: Refused,
        },
    }
}

impl<F, B, E> Future for Guarded<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Challenge,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProject::Passed { future } => future.poll(cx),
            StateProject::Refused { door, why } => Poll::Ready(Ok(B::challenge(*door, *why))),
        }
    }
}
