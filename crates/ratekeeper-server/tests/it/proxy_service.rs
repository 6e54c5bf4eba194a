//! The proxy as a door of the service (what `ratekeeper proxy` runs):
//! beside the admin port, with its health checks, metrics and reloads,
//! over real sockets before a real upstream.

use crate::common::upstream::{self, Speaks};

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::proxy::{ProxyDoor, ProxyOptions};
use ratekeeper_server::serve::Service;
use ratekeeper_server::Config;
use serde_json::Value;

/// How long any one step may take before the test fails.
pub(crate) const STEP: Duration = Duration::from_secs(10);

/// `[listen]` for a proxy: the admin port on a free port, the decision
/// doors off.
pub(crate) const LISTEN: &str =
    "[listen]\nhttp = \"off\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n";

/// The service with a proxy door before `upstream`, on a manual clock.
pub(crate) struct ProxyService {
    pub(crate) service: Service,
    pub(crate) proxy: SocketAddr,
    pub(crate) admin: SocketAddr,
}

impl ProxyService {
    /// `toml` (after [`LISTEN`]) and the proxy's options as `options` sets
    /// them.
    pub(crate) async fn start(
        toml: &str,
        upstream: &str,
        options: impl FnOnce(&mut ProxyOptions),
    ) -> ProxyService {
        Self::start_with(toml, upstream, options, None).await
    }

    /// With the configuration file `path` watched every 50 ms.
    pub(crate) async fn start_with(
        toml: &str,
        upstream: &str,
        options: impl FnOnce(&mut ProxyOptions),
        path: Option<std::path::PathBuf>,
    ) -> ProxyService {
        let config = Config::from_toml_str(&format!("{LISTEN}{toml}"), "proxy-door.toml")
            .expect("a valid config");
        let mut door = ProxyDoor::new(
            "127.0.0.1:0".parse().unwrap(),
            upstream.parse().expect("an upstream URI"),
        );
        options(&mut door.options);
        let mut builder = Service::builder(config)
            .clock(Arc::new(ManualClock::new(Timestamp::from_secs(1_000))))
            .watch_interval(path.as_ref().map(|_| Duration::from_millis(50)))
            .proxy(door);
        if let Some(path) = path {
            builder = builder.config_file(path);
        }
        let service = builder.start().await.expect("the service starts");
        let addrs = service.addrs();
        ProxyService {
            proxy: addrs.proxy.expect("the proxy listens"),
            admin: addrs.admin.expect("the admin port listens"),
            service,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }

    pub(crate) fn admin(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub(crate) async fn stop(self) {
        self.service.shutdown();
        tokio::time::timeout(STEP, self.service.wait())
            .await
            .expect("the service stops")
            .expect("a clean shutdown");
    }
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(STEP)
        .build()
        .expect("a client")
}

const GLOBAL_TWO: &str = "[[limits]]\nname = \"everyone\"\nrate = \"2/hour\"\nkey = [\"global\"]\n";

/// The value of the first `/metrics` line that starts with `prefix`.
fn metric(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_serves_beside_an_admin_port_with_health_metrics_and_stats() {
    let upstream = upstream::start(Speaks::Http1).await;
    let proxy = ProxyService::start(GLOBAL_TWO, &format!("http://{}", upstream.addr), |_| {}).await;
    let client = client();

    for expected in [200, 200, 429] {
        let response = client
            .get(proxy.url("/info"))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), expected);
    }
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 2);

    for path in ["/healthz", "/readyz"] {
        let response = client
            .get(proxy.admin(path))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), 200, "{path}");
    }
    let metrics = client
        .get(proxy.admin("/metrics"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("the metrics");
    assert_eq!(
        metric(
            &metrics,
            "ratekeeper_decisions_total{limit=\"everyone\",decision=\"allowed\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            "ratekeeper_decisions_total{limit=\"everyone\",decision=\"denied\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    let accepted = metric(
        &metrics,
        "ratekeeper_connections_accepted_total{door=\"proxy\"}",
    );
    assert!(accepted.is_some_and(|n| n >= 1.0), "{metrics}");
    let stats: Value = client
        .get(proxy.admin("/v1/stats"))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON stats");
    assert!(stats.to_string().contains("everyone"), "{stats}");

    // The proxy's own port forwards everything, health paths included:
    // the app's /healthz is the app's (here a 404), not ratekeeper's.
    let before = upstream.requests.load(Ordering::SeqCst);
    let limits_off = ProxyService::start(
        "[[limits]]\nname = \"other\"\nrate = \"1/hour\"\nkey = [\"global\"]\n\
         [limits.match]\npath_prefix = \"/limited\"\n",
        &format!("http://{}", upstream.addr),
        |_| {},
    )
    .await;
    let health = client
        .get(limits_off.url("/healthz"))
        .send()
        .await
        .expect("answered");
    assert_eq!(health.status(), 404);
    assert_eq!(health.text().await.expect("a body"), "not here");
    assert_eq!(upstream.requests.load(Ordering::SeqCst), before + 1);
    limits_off.stop().await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_limits_reload_when_the_file_is_rewritten() {
    let upstream = upstream::start(Speaks::Http1).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    let limit = |rate: &str| {
        format!("{LISTEN}[[limits]]\nname = \"everyone\"\nrate = \"{rate}\"\nkey = [\"global\"]\n")
    };
    std::fs::write(&path, limit("2/hour")).expect("the file written");
    let toml = limit("2/hour");
    let toml = toml.strip_prefix(LISTEN).unwrap();
    let proxy = ProxyService::start_with(
        toml,
        &format!("http://{}", upstream.addr),
        |_| {},
        Some(path.clone()),
    )
    .await;
    let client = client();
    let policy = || async {
        let response = client
            .get(proxy.url("/info"))
            .send()
            .await
            .expect("answered");
        response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(policy().await, "\"everyone\";q=2;w=3600");
    std::fs::write(&path, limit("7/hour")).expect("the file rewritten");
    let deadline = std::time::Instant::now() + STEP;
    while policy().await != "\"everyone\";q=7;w=3600" {
        assert!(
            std::time::Instant::now() < deadline,
            "the rewritten file was not reloaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.stop().await;
}

#[tokio::test]
async fn a_service_refuses_a_proxy_upstream_it_cannot_reach_before_binding() {
    let config = Config::from_toml_str(&format!("{LISTEN}{GLOBAL_TWO}"), "t.toml").unwrap();
    let door = ProxyDoor::new(
        "127.0.0.1:0".parse().unwrap(),
        "ftp://example.com".parse().unwrap(),
    );
    let error = Service::builder(config)
        .proxy(door)
        .start()
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the upstream must be an http:// or https:// URL"),
        "{error}"
    );
}
