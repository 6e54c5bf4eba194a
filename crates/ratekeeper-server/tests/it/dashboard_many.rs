//! The dashboard with many limits: envoyproxy/ratelimit's example files
//! (16 limits, siblings such as `rl.source_cluster_proxy.destination_cluster_mock`
//! and `..._bkthomps`) beside a native limit keyed by the client's address,
//! 17 in all, loaded by headless Chromium on a desktop and on a phone. The limits that
//! denied come first, then the busy ones; the idle ones are folded into
//! rows; every name is shown whole; the page never scrolls sideways; and
//! the card of the limit keyed by address shows that every request came
//! under one (what a proxy that is not trusted looks like).
//!
//! With `RATEKEEPER_SCREENSHOT_DIR` set, screenshots of both widths are
//! written there, to look at.

use std::path::{Path, PathBuf};

use ratekeeper::Timestamp;
use ratekeeper_server::envoy::proto::RateLimitRequest;
use serde_json::{json, Value};

use crate::common::{self, TestService};
use crate::dashboard::{card, chromium, dump_dom_at, screenshot_at, DESKTOP};
use crate::phone_frame::{self, PHONE};

/// The window around the phone's frame: Chromium's narrowest.
const FRAME: (u32, u32) = (500, 844);

/// Monday 2026-01-05 09:00:00 UTC.
const WALL: u64 = 1_767_603_600;

/// `shared/compat/envoy-ratelimit/examples`: under `RATEKEEPER_COMPAT_DIR`,
/// above the crate, or in /work/shared.
fn examples() -> PathBuf {
    if let Some(dir) = std::env::var_os("RATEKEEPER_COMPAT_DIR") {
        return PathBuf::from(dir).join("envoy-ratelimit/examples");
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("shared/compat"))
        .chain([PathBuf::from("/work/shared/compat")])
        .map(|compat| compat.join("envoy-ratelimit/examples"))
        .find(|candidate| candidate.is_dir())
        .expect("no shared/compat/envoy-ratelimit; set RATEKEEPER_COMPAT_DIR")
}

/// The tags of `dom` that start with `prefix`, each as the value of its
/// `data-limit`, in the page's order.
fn limits_after<'a>(dom: &'a str, prefix: &str) -> Vec<&'a str> {
    dom.match_indices(prefix)
        .map(|(at, _)| {
            let rest = &dom[at + prefix.len()..];
            &rest[..rest.find('"').expect("the attribute ends")]
        })
        .collect()
}

/// The number in `data-{name}="…"` on the page's body.
fn body_number(dom: &str, name: &str) -> u64 {
    let marker = format!(r#"data-{name}=""#);
    let body = &dom[dom.find("<body").expect("a body")..];
    let at = body.find(&marker).unwrap_or_else(|| panic!("no {name}"));
    let rest = &body[at + marker.len()..];
    rest[..rest.find('"').expect("the attribute ends")]
        .parse()
        .expect("a number")
}

#[tokio::test]
async fn many_limits_put_denying_and_busy_ones_first_fold_idle_ones_and_fit_a_phone() {
    let Some(chromium) = chromium() else { return };
    let files = tempfile::tempdir().expect("a directory");
    for name in ["config.yaml", "example.yaml"] {
        std::fs::copy(examples().join(name), files.path().join(name)).expect("the fixture");
    }
    let toml = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n\
         [envoy]\nconfig_dir = {:?}\n\n\
         [[limits]]\nname = \"per-client\"\nrate = \"100/minute\"\nkey = [\"client_ip\"]\n\
         [limits.match]\npath_prefix = \"/\"\n",
        files.path().display().to_string()
    );
    let service = TestService::start_with_wall_clock(&toml, Timestamp::from_secs(WALL)).await;
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let names: Vec<String> = stats["limits"]
        .as_array()
        .expect("the limits")
        .iter()
        .map(|limit| limit["name"].as_str().expect("a name").to_owned())
        .collect();
    assert_eq!(names.len(), 17, "{names:?}");

    // Every request the app sees comes from the proxy in front, which is
    // not trusted: all under 127.0.0.1, none refused.
    for _ in 0..30 {
        let body = json!({"limits": ["per-client"], "key": {"client_ip": "127.0.0.1"}});
        let (status, _, answer) = service.post("/v1/check", body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["allowed"], true, "{answer}");
    }
    // Through Envoy's door: 4 calls to a 1-a-minute destination (3
    // denied), 6 to a 4-a-minute category (2 denied), 10 to a database
    // allowing 500 a second.
    let mut rls = common::rls_client(service.service.addrs().grpc.expect("grpc is on")).await;
    let mut ask = async |domain: &str, pairs: &[(&str, &str)], times: usize| {
        let mut denied = 0;
        for _ in 0..times {
            let request = RateLimitRequest {
                domain: domain.to_owned(),
                descriptors: vec![common::descriptor(pairs)],
                hits_addend: 1,
            };
            let answer = rls.should_rate_limit(request).await.expect("an answer");
            denied += usize::from(answer.into_inner().overall_code == 2);
        }
        denied
    };
    let mock = [("source_cluster", "proxy"), ("destination_cluster", "mock")];
    assert_eq!(ask("rl", &mock, 4).await, 3);
    assert_eq!(ask("rl", &[("category", "account")], 6).await, 2);
    assert_eq!(ask("mongo_cps", &[("database", "users")], 10).await, 0);
    // A domain no file names, as a newcomer might spell it: no limit.
    assert_eq!(ask("RL", &[("category", "account")], 1).await, 0);

    let busy = [
        "rl.source_cluster_proxy.destination_cluster_mock",
        "rl.category_account",
        "per-client",
        "mongo_cps.database_users",
    ];
    let idle: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| !busy.contains(name))
        .collect();

    let phone = phone_frame::serve(service.admin("")).await;
    for (window, width) in [(DESKTOP, "desktop"), (PHONE, "phone")] {
        let dom = if window == PHONE {
            phone_frame::framed_dom(&dump_dom_at(chromium.clone(), phone.clone(), FRAME).await)
        } else {
            dump_dom_at(chromium.clone(), service.admin("/"), window).await
        };
        assert!(dom.contains(r#"data-loaded="true""#), "{width}: {dom}");
        // Denying first (most denials first), then busy (most requests
        // first); the idle ones after them, folded, in the config's order.
        assert_eq!(
            limits_after(&dom, r#"<section class="card" data-limit=""#),
            busy,
            "{width}"
        );
        assert_eq!(
            limits_after(&dom, r#"<details class="idle" data-limit=""#),
            idle,
            "{width}"
        );
        for name in &busy[..2] {
            assert!(
                card(&dom, name).contains(r#"data-state="denying""#),
                "{name}"
            );
        }
        for name in &busy[2..] {
            assert!(card(&dom, name).contains(r#"data-state="busy""#), "{name}");
        }
        // Folded: the idle ones draw no chart until opened.
        assert_eq!(dom.matches(r#"<svg class="chart""#).count(), busy.len());
        assert!(dom.contains(r#"<section class="idle-list" data-count="13">"#));
        // Every name whole (a break allowed after each dot), with the
        // whole name on hover too.
        for name in &names {
            let shown = name.replace('.', "<wbr>.");
            assert!(
                dom.contains(&format!(
                    r#"<span class="name" title="{name}" data-field="name">{shown}</span>"#
                )),
                "{width}: {name}"
            );
        }
        // The page never scrolls sideways, and the window was the one asked.
        let viewport = body_number(&dom, "viewport-width");
        assert!(
            viewport <= u64::from(window.0) && viewport + 40 > u64::from(window.0),
            "{width}: the page is {viewport} px wide"
        );
        assert_eq!(body_number(&dom, "scroll-width"), viewport, "{width}");

        // The key per-client charged most: every request, one address.
        let per_client = card(&dom, "per-client");
        assert!(
            per_client
                .contains(r#"data-field="heaviest-key" data-value="127.0.0.1" data-count="30">"#),
            "{width}: {per_client}"
        );
        assert!(per_client.contains("<b>100%</b> of requests (30 of 30)"));
        assert!(per_client.contains(r#"data-field="one-address""#));
        // A global key says nothing about who sent the requests.
        assert!(!card(&dom, "rl.category_account").contains("heaviest-key"));
        if window == DESKTOP {
            assert!(dom.contains(r#"data-columns="3""#), "three cards a row");
        }
        // The request that matched nothing is shown above the limits.
        assert!(
            dom.contains(
                r#"<div data-door="grpc"><strong>1 gRPC request matched no limit</strong>"#
            ),
            "{width}: {dom}"
        );
        assert!(dom.contains("category=account]"), "{width}");
    }

    // /v1/stats carries the keys charged most, heaviest first.
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let per_client: &Value = stats["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|limit| limit["name"] == "per-client")
        .expect("per-client");
    assert_eq!(
        per_client["top_charged"],
        json!([{"key": "127.0.0.1", "count": 30, "error": 0}])
    );

    if let Some(dir) = std::env::var_os("RATEKEEPER_SCREENSHOT_DIR") {
        for (url, window, name) in [
            (service.admin("/"), (1280, 2000), "many-desktop.png"),
            (phone.clone(), FRAME, "many-phone.png"),
        ] {
            let png = screenshot_at(chromium.clone(), url, window).await;
            std::fs::write(Path::new(&dir).join(name), png).expect("the screenshot written");
        }
    }
    service.stop().await;
}
