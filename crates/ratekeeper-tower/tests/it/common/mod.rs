//! A real HTTP client over loopback for the end-to-end tests.

#![allow(dead_code)]

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// What came back.
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// A client for one server.
pub(crate) struct Http {
    client: Client<HttpConnector, Empty<Bytes>>,
    base: String,
}

impl Http {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Http {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: format!("http://{addr}"),
        }
    }

    pub(crate) async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(request.body(Empty::new()).unwrap())
            .await
            .expect("the server answers");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("a whole body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(Method::GET, path, headers).await
    }
}

/// A store that never decides at once, so the layer takes its
/// asynchronous path.
#[derive(Clone)]
pub(crate) struct Waiting<C: ratekeeper::Clock + Clone = ratekeeper::clock::ManualClock>(
    pub(crate) ratekeeper::MemoryStore<C>,
);

impl<C: ratekeeper::Clock + Clone + 'static> ratekeeper::Store for Waiting<C> {
    async fn check(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<ratekeeper::Outcome, ratekeeper::store::StoreError> {
        self.0.check(limit, key, cost).await
    }
    async fn peek(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
    ) -> Result<ratekeeper::Decision, ratekeeper::store::StoreError> {
        self.0.peek(limit, key).await
    }
    async fn refund(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
        units: u64,
    ) -> Result<(), ratekeeper::store::StoreError> {
        self.0.refund(limit, key, units).await
    }
}

/// Serves `app` on a free loopback port, with the socket peer available
/// (`into_make_service_with_connect_info`, as the README does).
pub(crate) async fn serve(app: axum::Router) -> Http {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    Http::new(addr)
}

/// The in-memory store, whose refunds and slot releases must be waited
/// for once: a store across a network, which the layer cannot ask from a
/// `Drop`.
#[derive(Clone)]
pub(crate) struct Remote<C = ratekeeper::clock::MonotonicClock>(
    pub(crate) ratekeeper::MemoryStore<C>,
);

/// Pending once, then ready: one wait, as for a network's answer.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

impl<C: ratekeeper::Clock + Clone + Send + Sync + 'static> ratekeeper::Store for Remote<C> {
    async fn check(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<ratekeeper::Outcome, ratekeeper::store::StoreError> {
        self.0.check(limit, key, cost).await
    }

    async fn peek(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
    ) -> Result<ratekeeper::Decision, ratekeeper::store::StoreError> {
        self.0.peek(limit, key).await
    }

    async fn refund(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<(), ratekeeper::store::StoreError> {
        YieldOnce(false).await;
        self.0.refund(limit, key, cost).await
    }

    async fn report(
        &self,
        limit: &ratekeeper::Limit,
        key: &[u8],
        units: u64,
    ) -> Result<ratekeeper::Outcome, ratekeeper::store::StoreError> {
        self.0.report(limit, key, units).await
    }

    async fn take_slot(
        &self,
        limit: &ratekeeper::store::in_flight::InFlight,
        key: &[u8],
        id: ratekeeper::store::reservation::ReservationId,
    ) -> Result<ratekeeper::Outcome, ratekeeper::store::StoreError> {
        self.0.take_slot(limit, key, id).await
    }

    async fn free_slot(
        &self,
        limit: &ratekeeper::store::in_flight::InFlight,
        key: &[u8],
        id: ratekeeper::store::reservation::ReservationId,
    ) -> Result<(), ratekeeper::store::StoreError> {
        YieldOnce(false).await;
        self.0.free_slot(limit, key, id).await
    }
}
