//! The response bodies refusals are written in.

use bytes::Bytes;
use http_body_util::{Either, Full};

/// A response body the layer can write its refusals in.
///
/// A rate-limited service answers with its inner service's own body type,
/// so frameworks take its responses as they are: axum, for one, boxes every
/// body that is not its own `Body`, which would cost every allowed request
/// an allocation. Implemented for axum's `Body` (feature `axum`), tonic's
/// `Body` (feature `tonic`), [`Full<Bytes>`], http-body-util's boxed bodies,
/// and [`Either<B, Full<Bytes>>`](Either) for any `B`: wrap an inner
/// service whose body is none of these with
/// `map_response(|response| response.map(Either::Left))`.
///
/// ```
/// use std::convert::Infallible;
///
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::{Either, Empty, Full};
/// use ratekeeper::{Gcra, Limit, MemoryStore};
/// use ratekeeper_tower::{Key, RateLimitLayer};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // An inner service whose body (`Empty`) cannot hold a refusal.
/// let empty = service_fn(|_: Request<()>| async {
///     Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
/// });
/// let layer = RateLimitLayer::builder(MemoryStore::new())
///     .limit(Limit::new("everyone", Gcra::per_minute(1)?)?, Key::global())
///     .build()?;
/// let service = ServiceBuilder::new()
///     .layer(layer)
///     .map_response(|response: Response<Empty<Bytes>>| response.map(Either::Left))
///     .service(empty);
/// let response: Response<Either<Empty<Bytes>, Full<Bytes>>> =
///     service.oneshot(Request::new(())).await?;
/// assert_eq!(response.status(), 200);
/// # Ok(())
/// # }
/// ```
pub trait RefusalBody: Sized {
    /// This body type holding a refusal's `body`.
    fn from_refusal(body: Full<Bytes>) -> Self;
}

impl RefusalBody for Full<Bytes> {
    fn from_refusal(body: Full<Bytes>) -> Self {
        body
    }
}

impl<B> RefusalBody for Either<B, Full<Bytes>> {
    fn from_refusal(body: Full<Bytes>) -> Self {
        Either::Right(body)
    }
}

impl<E> RefusalBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn from_refusal(body: Full<Bytes>) -> Self {
        use http_body_util::BodyExt;
        body.map_err(|never| match never {}).boxed()
    }
}

impl<E> RefusalBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_refusal(body: Full<Bytes>) -> Self {
        use http_body_util::BodyExt;
        body.map_err(|never| match never {}).boxed_unsync()
    }
}

#[cfg(feature = "axum")]
impl RefusalBody for axum::body::Body {
    fn from_refusal(body: Full<Bytes>) -> Self {
        axum::body::Body::new(body)
    }
}

#[cfg(feature = "tonic")]
impl RefusalBody for tonic::body::Body {
    fn from_refusal(body: Full<Bytes>) -> Self {
        tonic::body::Body::new(body)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
    use http_body_util::{BodyExt, Either, Empty, Full};

    use super::RefusalBody;

    async fn text<B>(body: B) -> Bytes
    where
        B: BodyExt<Data = Bytes>,
        B::Error: std::fmt::Debug,
    {
        body.collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn every_body_holds_the_refusal_it_is_given() {
        let refusal = || Full::new(Bytes::from_static(b"Too Many Requests"));
        let want = Bytes::from_static(b"Too Many Requests");
        assert_eq!(text(Full::from_refusal(refusal())).await, want);
        let either: Either<Empty<Bytes>, Full<Bytes>> = RefusalBody::from_refusal(refusal());
        assert!(matches!(either, Either::Right(_)));
        assert_eq!(text(either).await, want);
        let boxed: BoxBody<Bytes, std::io::Error> = RefusalBody::from_refusal(refusal());
        assert_eq!(text(boxed).await, want);
        let unsync: UnsyncBoxBody<Bytes, std::io::Error> = RefusalBody::from_refusal(refusal());
        assert_eq!(text(unsync).await, want);
        #[cfg(feature = "axum")]
        assert_eq!(text(axum::body::Body::from_refusal(refusal())).await, want);
        #[cfg(feature = "tonic")]
        assert_eq!(text(tonic::body::Body::from_refusal(refusal())).await, want);
    }
}
