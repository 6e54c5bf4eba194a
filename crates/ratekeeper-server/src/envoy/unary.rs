//! The gRPC door's service: `ShouldRateLimit` read and answered here, in
//! one buffer each way; any other method goes to tonic's generated server.
//!
//! tonic's generic unary path sets up a streaming decoder and encoder per
//! call (an 8 KiB buffer each, boxed bodies and futures, the trailers built
//! from a `Status`); answering here instead saved 2,300 of the 59,100
//! instructions a call cost (callgrind, BENCHMARKS.md), 4%, on the door
//! Envoy asks for every request it proxies. A unary call is one
//! length-prefixed message each way: read the body (at most
//! `requests.max_body_bytes`), check the prefix, decode with prost, decide,
//! and answer the encoded message then `grpc-status: 0` trailers. Errors
//! are tonic's own [`Status`] responses, with the codes and messages its
//! decoder gives, so a client cannot tell the two paths apart.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use prost::Message;
use tonic::Status;

use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;

use super::proto::rate_limit_service_server::RateLimitServiceServer;
use super::proto::RateLimitRequest;
use super::service::EnvoyService;

/// The method this module answers itself.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// gRPC's message prefix: a compressed flag and a 4-byte length.
const PREFIX: usize = 5;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Envoy's rate limit service as a gRPC server, from
/// [`EnvoyService::into_server`].
#[derive(Clone, Debug)]
pub struct EnvoyServer {
    service: EnvoyService,
    max_message: usize,
    tonic: RateLimitServiceServer<EnvoyService>,
    /// `grpc.health.v1.Health` (see [`super::health`]).
    health: HealthServer<HealthService>,
}

impl EnvoyServer {
    /// `service`, taking messages of at most `max_message` bytes.
    pub(super) fn new(service: EnvoyService, max_message: usize) -> EnvoyServer {
        let tonic =
            RateLimitServiceServer::new(service.clone()).max_decoding_message_size(max_message);
        let health = super::health::service(service.engine());
        EnvoyServer {
            service,
            max_message,
            tonic,
            health,
        }
    }
}

impl tonic::server::NamedService for EnvoyServer {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl<B> tower::Service<Request<B>> for EnvoyServer
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError> + Send,
{
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.uri().path().starts_with(super::health::PATH_PREFIX) {
            let mut health = self.health.clone();
            return Box::pin(async move {
                let response = tower::Service::call(&mut health, request).await;
                Ok(response.unwrap_or_else(|never| match never {}))
            });
        }
        if request.method() != Method::POST || request.uri().path() != SHOULD_RATE_LIMIT {
            return tower::Service::call(&mut self.tonic, request);
        }
        let service = self.service.clone();
        let max = self.max_message;
        Box::pin(async move {
            Ok(match answer(&service, request.into_body(), max).await {
                Ok(response) => response,
                Err(status) => status.into_http(),
            })
        })
    }
}

/// One `ShouldRateLimit` call.
async fn answer<B>(
    service: &EnvoyService,
    body: B,
    max: usize,
) -> Result<Response<tonic::body::Body>, Status>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let request = read_message(body, max).await?;
    let (answer, answered_by) = service
        .decide_answered(&request)
        .await
        .map_err(Status::from)?;
    let len = answer.encoded_len();
    let mut message = BytesMut::with_capacity(PREFIX + len);
    message.put_u8(0);
    // A response grows with its request, whose size is capped far below
    // the 4 GiB a prefix can say; the check only keeps this panic-free.
    let Ok(prefix) = u32::try_from(len) else {
        return Err(Status::resource_exhausted("the response is over 4 GiB"));
    };
    message.put_u32(prefix);
    answer
        .encode(&mut message)
        .map_err(|error| Status::internal(error.to_string()))?;
    let mut response = Response::new(tonic::body::Body::new(Unary {
        message: Some(message.freeze()),
        trailers: true,
    }));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    // The failure policy's answers say so in the response metadata.
    if answered_by.is_failover() {
        response.headers_mut().insert(
            crate::engine::STORE_HEADER,
            HeaderValue::from_static(answered_by.as_str()),
        );
    }
    Ok(response)
}

/// The request's one message, decoded; at most `max` bytes of it are
/// read.
async fn read_message<B>(body: B, max: usize) -> Result<RateLimitRequest, Status>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = std::pin::pin!(Limited::new(body, max.saturating_add(PREFIX)));
    // A message nearly always comes in one frame, kept as it came; only
    // one split across frames is copied together (at most `max` bytes and
    // the prefix: `Limited` stops the body past them).
    let (mut first, mut joined): (Option<Bytes>, Option<BytesMut>) = (None, None);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            if error.is::<http_body_util::LengthLimitError>() {
                too_large(max)
            } else {
                Status::unknown(format!("the request body failed: {error}"))
            }
        })?;
        // Trailers carry nothing a unary request needs.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match (&first, &mut joined) {
            (None, _) => first = Some(data),
            (Some(head), None) => {
                let mut buffer = BytesMut::with_capacity(head.len() + data.len());
                buffer.extend_from_slice(head);
                buffer.extend_from_slice(&data);
                joined = Some(buffer);
            }
            (Some(_), Some(buffer)) => buffer.extend_from_slice(&data),
        }
    }
    let mut bytes = match joined {
        Some(buffer) => buffer.freeze(),
        None => first.unwrap_or_default(),
    };
    if bytes.is_empty() {
        return Err(Status::internal("Missing request message."));
    }
    if bytes.len() < PREFIX {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    let compressed = bytes.get_u8();
    let len = bytes.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::unimplemented(
            "Message compressed, compression support not enabled.",
        ));
    }
    if len > max {
        return Err(too_large(max));
    }
    if bytes.len() < len {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    // A unary call holds one message; tonic reads the first and ignores
    // what follows, and so does this.
    RateLimitRequest::decode(bytes.split_to(len))
        .map_err(|error| Status::internal(format!("failed to decode Protobuf message: {error}")))
}

/// tonic's refusal of a message over its decoding limit.
fn too_large(max: usize) -> Status {
    Status::out_of_range(format!(
        "Error, decoded message length too large: the limit is {max} bytes (requests.max_body_bytes)"
    ))
}

/// A unary response's body: the message, then `grpc-status: 0`.
struct Unary {
    message: Option<Bytes>,
    trailers: bool,
}

impl Body for Unary {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if std::mem::take(&mut self.trailers) {
            let mut trailers = HeaderMap::with_capacity(1);
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && !self.trailers
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.message.as_ref().map_or(0, |m| m.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    /// `message` behind gRPC's prefix with the compressed `flag`.
    fn frame_bytes(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut bytes = vec![flag];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend_from_slice(message);
        bytes
    }

    fn framed(flag: u8, message: &[u8]) -> Full<Bytes> {
        Full::new(Bytes::from(frame_bytes(flag, message)))
    }

    #[tokio::test]
    async fn a_message_is_read_whole_and_decoded() {
        let request = RateLimitRequest {
            domain: "edge".to_owned(),
            ..RateLimitRequest::default()
        };
        let read = read_message(framed(0, &request.encode_to_vec()), 1024)
            .await
            .unwrap();
        assert_eq!(read, request);
    }

    /// A body of `chunks`, one frame each.
    fn chunked(chunks: Vec<Vec<u8>>) -> impl Body<Data = Bytes, Error = Infallible> {
        let frames = chunks
            .into_iter()
            .map(|chunk| Ok::<_, Infallible>(Frame::data(Bytes::from(chunk))));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_message_split_across_frames_is_read_whole() {
        let request = RateLimitRequest {
            domain: "a domain long enough to split".to_owned(),
            ..RateLimitRequest::default()
        };
        let framed = frame_bytes(0, &request.encode_to_vec());
        let chunks: Vec<Vec<u8>> = framed.chunks(3).map(<[u8]>::to_vec).collect();
        assert!(chunks.len() > 2);
        let read = read_message(chunked(chunks), 1024).await.unwrap();
        assert_eq!(read, request);
        // Split or not, a body over the cap is refused.
        let chunks = vec![framed[..4].to_vec(), framed[4..].to_vec()];
        let error = read_message(chunked(chunks), 8).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::OutOfRange);
    }

    #[tokio::test]
    async fn bad_frames_get_tonics_codes() {
        let code = |body: Full<Bytes>, max| async move {
            read_message(body, max).await.unwrap_err().code()
        };
        assert_eq!(
            code(Full::new(Bytes::new()), 1024).await,
            tonic::Code::Internal
        );
        assert_eq!(
            code(Full::new(Bytes::from_static(&[0, 0])), 1024).await,
            tonic::Code::Internal
        );
        assert_eq!(
            code(framed(1, b"xx"), 1024).await,
            tonic::Code::Unimplemented
        );
        // A prefix claiming more than was sent.
        let body = Full::new(Bytes::from_static(&[0, 0, 0, 0, 9, 1, 2]));
        assert_eq!(code(body, 1024).await, tonic::Code::Internal);
        // Over the cap, by the body or by the prefix.
        assert_eq!(
            code(framed(0, &[0; 100]), 50).await,
            tonic::Code::OutOfRange
        );
        let lying = Full::new(Bytes::from_static(&[0, 0, 1, 0, 0]));
        assert_eq!(code(lying, 50).await, tonic::Code::OutOfRange);
        // Not protobuf.
        assert_eq!(
            code(framed(0, &[0xff; 8]), 1024).await,
            tonic::Code::Internal
        );
    }
}
