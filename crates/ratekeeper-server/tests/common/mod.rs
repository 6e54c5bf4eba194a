//! Shared by the service's tests: a service started in-process on free
//! loopback ports with a manual clock, and a JSON client.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{ManualClock, Timestamp};
use ratekeeper_server::serve::{Options, Service};
use ratekeeper_server::Config;
use serde_json::Value;

/// `[listen]` on free loopback ports, to put before a test's limits.
pub const LISTEN_ANY: &str = "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n";

/// A service on `toml` (its `[listen]` should be [`LISTEN_ANY`]) whose
/// in-memory store runs on a manual clock.
pub struct TestService {
    pub service: Service,
    pub clock: Arc<ManualClock>,
    pub client: reqwest::Client,
}

impl TestService {
    pub async fn start(toml: &str) -> TestService {
        Self::start_with(toml, None).await
    }

    pub async fn start_with(toml: &str, path: Option<std::path::PathBuf>) -> TestService {
        let config = Config::from_toml_str(toml, "test.toml").expect("a valid test config");
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let mut options = Options::default();
        options.clock = clock.clone();
        options.config_path = path;
        options.watch_interval = Duration::from_millis(50);
        let service = Service::start(config, options).await.expect("the service starts");
        TestService {
            service,
            clock,
            client: reqwest::Client::new(),
        }
    }

    pub fn http(&self, path: &str) -> String {
        format!("http://{}{path}", self.service.addrs().http.expect("http is on"))
    }

    pub fn admin(&self, path: &str) -> String {
        format!("http://{}{path}", self.service.addrs().admin.expect("admin is on"))
    }

    /// POSTs `body` to `path`; the status, headers and JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let response = self
            .client
            .post(self.http(path))
            .json(&body)
            .send()
            .await
            .expect("the request is answered");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let json = response.json().await.unwrap_or(Value::Null);
        (status, headers, json)
    }

    pub async fn stop(self) {
        self.service.shutdown();
        self.service.wait().await.expect("a clean shutdown");
    }
}
