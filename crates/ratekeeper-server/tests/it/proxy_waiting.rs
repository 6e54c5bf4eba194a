//! A limit's `max_wait` in the reverse proxy: a request the limit refuses
//! but will allow by then is held and sent on, over loopback HTTP; what
//! the loader refuses, and what `check` warns of under `serve`.

use crate::common;

use ratekeeper_server::config::ConfigWarning;
use ratekeeper_server::Config;

/// 1,000 a second one at a time (the engine's clock stands still: a
/// request's token is due in a millisecond per request before it), held
/// up to a millisecond.
const SMOOTHED: &str = r#"
[[limits]]
name = "smooth"
policy = "gcra"
rate = "1000/second burst 1"
max_wait = "1ms"
key = ["header:x-team"]
"#;

#[tokio::test]
async fn the_proxy_holds_a_request_until_its_token_is_due() {
    let upstream = common::serve_app(
        axum::Router::new().route("/", axum::routing::get(|| async { "upstream" })),
    )
    .await;
    let (addr, engine, _stop) = common::start_proxy(SMOOTHED, upstream).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let get = || {
        client
            .get(format!("http://{addr}/"))
            .header("x-team", "a")
            .send()
    };
    // The first passes; the second is due in 1 ms: held, then sent on.
    for _ in 0..2 {
        let answer = get().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), "upstream");
    }
    let queue = engine.wait_queue();
    assert_eq!((queue.waited(), queue.waiting()), (1, 0));
    // The third would be due in 2 ms, past max_wait: refused at once.
    let refused = get().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(queue.waited(), 1);
}

fn error(toml: &str) -> String {
    Config::from_toml_str(toml, "ratekeeper.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn max_wait_is_for_a_bucket_on_http_requests() {
    let limit = "[[limits]]\nname = \"l\"\nkey = [\"global\"]\n";
    let window =
        format!("{limit}rate = \"5/minute\"\npolicy = \"fixed_window\"\nmax_wait = \"1s\"\n");
    assert!(
        error(&window).contains("limits[0].max_wait: max_wait holds a request until a token bucket's or GCRA's units are due; a fixed_window"),
        "{}",
        error(&window)
    );
    let long = format!("{limit}rate = \"5/minute\"\nmax_wait = \"2m\"\n");
    assert!(
        error(&long).contains("max_wait is at most \"1m\""),
        "{}",
        error(&long)
    );
    let envoy = format!(
        "{limit}rate = \"5/minute\"\nmax_wait = \"1s\"\nmatch = {{ domain = \"d\", descriptors = [{{ key = \"k\" }}] }}\n"
    );
    assert!(error(&envoy).contains("a limit on Envoy descriptors is answered at once"));
    let bad = format!("{limit}rate = \"5/minute\"\nmax_wait = \"soon\"\n");
    assert!(
        error(&bad).contains("limits[0].max_wait"),
        "{}",
        error(&bad)
    );
    let cap = "[[limits]]\nname = \"c\"\npolicy = \"concurrency\"\nmax_in_flight = 2\nkey = [\"global\"]\nmax_wait = \"1s\"\n";
    assert!(
        error(cap).contains("limits[0].max_wait: max_wait is for rate limits"),
        "{}",
        error(cap)
    );
    let caps = "[requests]\nmax_waiting = 0\n";
    assert!(
        error(caps).contains("requests.max_waiting"),
        "{}",
        error(caps)
    );

    let config = Config::from_toml_str(SMOOTHED, "ratekeeper.toml").unwrap();
    assert_eq!(
        config.limits[0].max_wait,
        Some(std::time::Duration::from_millis(1))
    );
    assert_eq!(
        (
            config.requests.max_waiting,
            config.requests.max_waiting_per_key
        ),
        (1024, 16)
    );
    // Only the proxy holds requests: serve's doors answer at once.
    assert!(config.warnings_when_serving(true).is_empty());
    let served = config.warnings_when_serving(false);
    let told = ConfigWarning::MaxWaitNotApplied {
        limit: "smooth".to_owned(),
    };
    assert!(served.contains(&told), "{served:?}");
    assert!(told.to_string().contains("only ratekeeper proxy applies"));
}
