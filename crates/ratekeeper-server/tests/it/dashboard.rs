//! The dashboard at `/` on the admin port, loaded by a real headless
//! Chromium against a running service with traffic: the DOM it leaves
//! (after the page's script fetched `/v1/stats` and drew) holds the chart
//! and the numbers the test sent.
//!
//! Without Chromium the tests say so loudly and pass, except under
//! `CI=true`, where they fail (CI installs it). With
//! `RATEKEEPER_UPDATE_SCREENSHOT=1` the screenshot is also written to
//! `docs/dashboard.png`.

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestService, LISTEN_ANY};
use ratekeeper::Timestamp;
use serde_json::json;

/// Monday 2026-01-05 09:00:00 UTC: the traffic below runs from 09:01 to
/// 09:40.
const WALL: u64 = 1_767_603_600;

const LIMITS: &str = r#"
[[limits]]
name = "per-user"
rate = "20/minute"
policy = "sliding_window"
key = ["header:x-user"]

[[limits]]
name = "global"
rate = "25/minute"
policy = "fixed_window"
key = ["global"]
"#;

/// Chromium, if this machine has it; otherwise the test is a
/// [`skip`](ratekeeper_test_support::skip), a failure under `CI=true`.
pub(crate) fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|path| path.is_file())
            })
        });
    if found.is_none() {
        ratekeeper_test_support::skip::program_missing("chromium", "apt-get install -y chromium");
    }
    found
}

/// A desktop window: three cards a row.
pub(crate) const DESKTOP: (u32, u32) = (1280, 900);

/// Runs headless Chromium on `url` with `args` in a window of `window`
/// (width, height) pixels, for at most a minute; its standard output.
fn run_chromium(chromium: &Path, url: &str, window: (u32, u32), args: &[String]) -> String {
    let profile = tempfile::tempdir().expect("a profile directory");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Virtual time runs the page's timers without waiting, and
            // stops when this much has passed with no fetch in flight.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--window-size={},{}", window.0, window.1))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium exited with {status}");
    reader.join().expect("the reader finishes")
}

/// The page's DOM once its script has drawn, in a desktop window.
async fn dump_dom(chromium: PathBuf, url: String) -> String {
    dump_dom_at(chromium, url, DESKTOP).await
}

/// The page's DOM once its script has drawn, in a window of `window`
/// pixels.
pub(crate) async fn dump_dom_at(chromium: PathBuf, url: String, window: (u32, u32)) -> String {
    tokio::task::spawn_blocking(move || {
        run_chromium(&chromium, &url, window, &["--dump-dom".into()])
    })
    .await
    .expect("chromium ran")
}

/// A screenshot of the page in a desktop window, as PNG bytes.
async fn screenshot(chromium: PathBuf, url: String) -> Vec<u8> {
    screenshot_at(chromium, url, DESKTOP).await
}

/// A screenshot of the page in a window of `window` pixels, as PNG bytes.
pub(crate) async fn screenshot_at(chromium: PathBuf, url: String, window: (u32, u32)) -> Vec<u8> {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("dashboard.png");
        run_chromium(
            &chromium,
            &url,
            window,
            &[format!("--screenshot={}", path.display())],
        );
        std::fs::read(&path).expect("chromium wrote the screenshot")
    })
    .await
    .expect("chromium ran")
}

/// What the traffic did, counted from the decision API's answers.
#[derive(Debug, Default)]
struct Sent {
    per_user_allowed: u64,
    per_user_denied: u64,
    alice_denied: u64,
    global_denied: u64,
    requests: u64,
}

/// Forty minutes of traffic, 09:01 to 09:40, spread over each minute on
/// both clocks: alice in waves that go past her 20 a minute, bob and carol
/// steady below theirs, and all three together at times past the global
/// 25 a minute.
async fn traffic(service: &TestService) -> Sent {
    let wall = service.wall_clock.clone().expect("a manual wall clock");
    let advance = |by: Duration| {
        wall.advance(by);
        service.clock.advance(by);
    };
    let mut sent = Sent::default();
    advance(Duration::from_secs(60));
    for minute in 0..40u64 {
        let wave = [6, 12, 22, 30, 26, 14][(minute % 6) as usize];
        let bob = 5 + (minute % 4) as usize;
        let users: Vec<&str> = (0..wave)
            .flat_map(|i| {
                [(i < wave, "alice"), (i < bob, "bob"), (i < 3, "carol")]
                    .into_iter()
                    .filter_map(|(sends, user)| sends.then_some(user))
            })
            .collect();
        let step = Duration::from_millis(59_000 / users.len() as u64);
        let mut spent = Duration::ZERO;
        for user in users {
            let body = json!({"limits": ["per-user", "global"], "key": {"header:x-user": user}});
            let (status, _, answer) = service.post("/v1/check", body).await;
            assert_eq!(status, 200, "{answer}");
            sent.requests += 1;
            for limit in answer["limits"].as_array().expect("the limits' results") {
                let allowed = limit["allowed"] == true;
                match limit["name"].as_str() {
                    Some("per-user") if allowed => sent.per_user_allowed += 1,
                    Some("per-user") => {
                        sent.per_user_denied += 1;
                        sent.alice_denied += u64::from(user == "alice");
                    }
                    Some("global") if !allowed => sent.global_denied += 1,
                    _ => {}
                }
            }
            advance(step);
            spent += step;
        }
        if minute < 39 {
            advance(Duration::from_secs(60) - spent);
        }
    }
    sent
}

/// The part of `dom` that is the card of `limit`.
pub(crate) fn card<'a>(dom: &'a str, limit: &str) -> &'a str {
    let start = dom
        .find(&format!(r#"<section class="card" data-limit="{limit}""#))
        .unwrap_or_else(|| panic!("no card for {limit} in the DOM:\n{dom}"));
    let rest = &dom[start..];
    let end = rest.find("</section>").expect("the card ends");
    &rest[..end]
}

/// The `d` of the chart's path of `class` in `card`.
fn path<'a>(card: &'a str, class: &str) -> &'a str {
    let marker = format!(r#"<path class="{class}" d=""#);
    let start = card
        .find(&marker)
        .unwrap_or_else(|| panic!("no {class} path in {card}"))
        + marker.len();
    let end = card[start..].find('"').expect("the d attribute ends");
    &card[start..start + end]
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[tokio::test]
async fn the_dashboard_draws_the_last_hour_and_the_numbers_of_a_running_service() {
    let Some(chromium) = chromium() else { return };
    let service = TestService::start_with_wall_clock(
        &format!("{LISTEN_ANY}{LIMITS}"),
        Timestamp::from_secs(WALL),
    )
    .await;
    let sent = traffic(&service).await;
    assert!(
        sent.per_user_denied > 0 && sent.global_denied > 0,
        "{sent:?}"
    );

    let dom = dump_dom(chromium.clone(), service.admin("/")).await;
    assert!(
        dom.contains(r#"data-loaded="true">"#),
        "the script ran:\n{dom}"
    );
    assert!(dom.contains(r#"data-field="store-ready" data-value="true">store up<"#));
    assert!(dom.contains(r#"<b data-field="store-kind">memory</b>"#));
    assert!(dom.contains(&format!(
        r#"<b data-field="decisions">{}</b>"#,
        thousands(sent.requests)
    )));
    assert!(
        dom.contains(r#"id="banner" role="alert" hidden="">"#),
        "no error banner"
    );

    let per_user = card(&dom, "per-user");
    let number = |field: &str, value: u64| {
        format!(
            r#"data-field="{field}" data-value="{value}">{}</div>"#,
            thousands(value)
        )
    };
    assert!(
        per_user.contains(&number("denied-total", sent.per_user_denied)),
        "denied {} in {per_user}",
        sent.per_user_denied
    );
    assert!(per_user.contains(&number("allowed-total", sent.per_user_allowed)));
    assert!(per_user.contains("20/minute"));

    // The chart: 60 minutes, allowed and denied, the denials not flat.
    assert!(per_user.contains(r#"<svg class="chart" viewBox="#));
    assert!(per_user.contains(r#"data-points="60""#));
    for class in ["allowed-line", "denied-line"] {
        let d = path(per_user, class);
        assert_eq!(d.matches('L').count(), 59, "{class}: {d}");
    }
    let ys: Vec<f64> = path(per_user, "denied-line")
        .split(['M', 'L'])
        .filter_map(|point| point.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(ys.len(), 60);
    assert!(ys.iter().any(|&y| y != ys[0]), "the denials show: {ys:?}");
    assert_eq!(per_user.matches(r#"<rect class="hit""#).count(), 60);

    // The windows: the traffic ran from 09:01 to 09:40 on a Monday, so
    // this hour, today and this week hold all of it.
    let cell = |window: &str, which: &str, field: &str, value: u64| {
        format!(
            r#"data-window="{window}" data-which="{which}" data-field="{field}" data-value="{value}">{}</td>"#,
            thousands(value)
        )
    };
    let total = sent.per_user_allowed + sent.per_user_denied;
    assert_eq!(total, sent.requests);
    for window in ["hour", "day", "week"] {
        assert!(
            per_user.contains(&cell(window, "current", "requests", total)),
            "{window} in {per_user}"
        );
        assert!(per_user.contains(&cell(window, "current", "denied", sent.per_user_denied)));
    }
    // The last minute (09:40, minute 39): alice 30, bob 5 + 3, carol 3.
    assert!(per_user.contains(&cell("minute", "current", "requests", 30 + 8 + 3)));

    // Only alice went over: she heads the top denied keys.
    assert!(per_user.contains(r#"<td class="key" title="alice">alice</td>"#));
    assert!(per_user.contains(&format!(
        r#"data-field="key-denied" data-value="{}">"#,
        sent.alice_denied
    )));
    assert!(!per_user.contains(r#"title="bob""#));

    let global = card(&dom, "global");
    assert!(global.contains(&number("denied-total", sent.global_denied)));

    // The key counts are /v1/stats's, each under its own name: the store's
    // keys (alice, bob and carol under per-user, one under global), and
    // per limit the keys whose denials the statistics keep.
    let stats = service.get_json(service.admin("/v1/stats")).await;
    assert_eq!(stats["store"]["keys_in_memory"], 4);
    assert!(dom.contains(r#"data-field="store-keys" data-value="4">4</b> keys in memory"#));
    for (name, in_memory) in [("per-user", 3), ("global", 1)] {
        let limit = stats["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|limit| limit["name"] == name)
            .expect("the limit's stats");
        assert_eq!(limit["keys_in_memory"], in_memory, "{name}");
        let tracked = limit["keys_tracked"].as_u64().expect("keys_tracked");
        let card = card(&dom, name);
        assert!(
            card.contains(&format!(
                r#"data-field="keys-in-memory" data-value="{in_memory}">{in_memory}</b> of 100,000 keys in memory"#
            )),
            "{name}: {card}"
        );
        let with_denials = if tracked == 1 { "key" } else { "keys" };
        assert!(card.contains(&format!(
            r#"data-field="keys-tracked" data-value="{tracked}">{tracked}</b> {with_denials} with denials tracked"#
        )));
    }
    // "Near limit" says what it counts, with the service's own threshold.
    assert_eq!(stats["near_limit_percent"], 10);
    assert!(
        per_user.contains(r#"<abbr title="allowed requests that left at most 10% of the quota"#)
    );
    assert!(dom.contains(r#"<span id="near-limit-note">Near limit: allowed requests that left at most 10% of the quota"#));
    assert!(!dom.contains(r#"data-field="shadow-mode""#));

    let png = screenshot(chromium, service.admin("/")).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(
        png.len() > 20_000,
        "a page, not a blank: {} bytes",
        png.len()
    );
    if std::env::var("RATEKEEPER_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        std::fs::create_dir_all(&docs).expect("docs/");
        std::fs::write(docs.join("dashboard.png"), &png).expect("docs/dashboard.png written");
    }
    service.stop().await;
}

/// A reload refused: the page says so with the error `/v1/stats` gives,
/// and stops saying it once a reload applies again.
#[tokio::test]
async fn the_dashboard_shows_a_refused_reload_until_one_applies() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("ratekeeper.toml");
    let good = format!("{LISTEN_ANY}{LIMITS}");
    std::fs::write(&file, &good).expect("the file");
    let service = TestService::start_with(&good, Some(file.clone()), None).await;

    let dom = dump_dom(chromium.clone(), service.admin("/")).await;
    assert!(
        dom.contains(r#"<div class="banner" id="reload-refused" role="alert" hidden="">"#),
        "{dom}"
    );

    std::fs::write(&file, good.replace("20/minute", "20/fortnight")).expect("a broken file");
    let error = service
        .service
        .reload()
        .await
        .expect_err("the reload is refused");
    let stats = service.get_json(service.admin("/v1/stats")).await;
    assert_eq!(stats["reloads"]["last_successful"], false);
    assert_eq!(stats["reloads"]["refused"], 1);
    let said = stats["reloads"]["last_refusal"]["error"]
        .as_str()
        .expect("the refusal's error");
    assert_eq!(said, error.to_string());
    assert!(said.contains("fortnight"), "{said}");

    let dom = dump_dom(chromium.clone(), service.admin("/")).await;
    let banner = &dom[dom.find(r#"id="reload-refused""#).expect("the banner")..];
    let banner = &banner[..banner.find("</div>").expect("its end")];
    assert!(!banner.contains("hidden"), "{banner}");
    assert!(banner.contains("Configuration refused"), "{banner}");
    // The error as the page shows it: HTML-escaped text of the same string.
    let shown = said
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    assert!(
        banner.contains(&format!(
            r#"<code data-field="reload-error">{shown}</code>"#
        )),
        "{banner}"
    );
    // The running limits are the last good ones.
    // (No traffic yet: the limit is folded among the idle ones.)
    let idle = &dom[dom
        .find(r#"<details class="idle" data-limit="per-user""#)
        .expect("per-user's row")..];
    assert!(idle[..idle.find("</details>").expect("its end")].contains("20/minute"));

    std::fs::write(&file, &good).expect("the file fixed");
    service.service.reload().await.expect("the reload applies");
    let dom = dump_dom(chromium, service.admin("/")).await;
    assert!(dom.contains(r#"<div class="banner" id="reload-refused" role="alert" hidden="">"#));
    service.stop().await;
}

/// The store's state during an outage, as `/v1/stats` has it: down since
/// when, why, where, and whether decisions are still answered (fail-open)
/// or refused (fail-closed).
#[tokio::test]
async fn the_dashboard_shows_the_store_down_and_what_the_failure_policy_does() {
    use ratekeeper_test_support::redis::RedisServer;
    let Some(chromium) = chromium() else { return };
    for (policy, serving, says) in [
        ("open", true, "answering by its failure policy"),
        ("closed", false, "refusing decisions (503)"),
    ] {
        let Some(mut redis) = RedisServer::start() else {
            return;
        };
        let service = TestService::start(&format!(
            "{LISTEN_ANY}[store]\nkind = \"redis\"\nurl = \"{}\"\non_failure = \"{policy}\"\n{LIMITS}",
            redis.url()
        ))
        .await;
        let dom = dump_dom(chromium.clone(), service.admin("/")).await;
        assert!(dom.contains(r#"data-field="store-ready" data-value="true">store up<"#));
        assert!(!dom.contains(r#"data-field="serving""#));

        redis.kill();
        let body = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
        service.post("/v1/check", body).await;
        // The store's monitor notices within its probe interval.
        let deadline = Instant::now() + Duration::from_secs(30);
        let stats = loop {
            let stats = service.get_json(service.admin("/v1/stats")).await;
            if stats["store"]["ready"] == false && stats["store"]["state"]["up"] == false {
                break stats;
            }
            assert!(
                Instant::now() < deadline,
                "{policy}: the store still up: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(stats["store"]["serving"], serving, "{policy}");

        let dom = dump_dom(chromium.clone(), service.admin("/")).await;
        let header = &dom[dom.find(r#"id="store""#).expect("the store's line")..];
        let header = &header[..header.find("</header>").expect("the header's end")];
        assert!(
            header.contains(r#"data-field="store-ready" data-value="false">store down since "#),
            "{policy}: {header}"
        );
        let pill = &header[header
            .find(r#"data-field="serving""#)
            .expect("the serving pill")..];
        let pill = &pill[..pill.find("</span>").expect("its end")];
        assert!(
            pill.contains(&format!(r#"data-value="{serving}""#)) && pill.ends_with(says),
            "{policy}: {pill}"
        );
        let address = stats["store"]["address"].as_str().expect("the address");
        assert!(address.contains(&redis.port().to_string()), "{address}");
        assert!(header.contains(&format!(r#"data-field="store-address">{address}<"#)));
        // The page may have read a later failure than the stats did: each
        // names the store and its cause.
        assert!(header.contains(r#"data-field="store-error""#), "{header}");
        assert!(
            header.contains(&format!("(store: {address})")),
            "{policy}: {header}"
        );
        service.stop().await;
    }
}

/// With leasing, the store's line and each leased limit's card say how
/// many store calls it saved, as `/v1/stats` counts them.
#[tokio::test]
async fn the_dashboard_shows_the_store_calls_leasing_saved() {
    use ratekeeper_test_support::redis::RedisServer;
    let Some(chromium) = chromium() else { return };
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let service = TestService::start(&format!(
        "{LISTEN_ANY}[store]\nkind = \"redis\"\nurl = \"{}\"\nlease = true\nlease_lifetime_ms = 3600000\n\
         [[limits]]\nname = \"busy\"\nrate = \"1000/day\"\npolicy = \"fixed_window\"\nkey = [\"global\"]\n",
        redis.url()
    ))
    .await;
    for _ in 0..100 {
        let (_, _, answer) = service.post("/v1/check", json!({"limits": ["busy"]})).await;
        assert_eq!(answer["allowed"], true, "{answer}");
    }
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let saved = stats["store"]["leasing"]["calls_saved"].as_u64().unwrap();
    assert!(saved > 50, "{stats}");
    assert_eq!(stats["limits"][0]["leasing"]["calls_saved"], saved);

    let dom = dump_dom(chromium, service.admin("/")).await;
    for field in ["store-calls-saved", "calls-saved"] {
        assert!(
            dom.contains(&format!(
                r#"data-field="{field}" data-value="{saved}">{}</b> store calls saved ("#,
                thousands(saved)
            )),
            "{field}: {dom}"
        );
    }
    service.stop().await;
}

#[tokio::test]
async fn the_dashboard_says_when_no_limit_is_configured() {
    let Some(chromium) = chromium() else { return };
    let mut config =
        ratekeeper_server::Config::from_toml_str(&format!("{LISTEN_ANY}{LIMITS}"), "test.toml")
            .expect("a valid config");
    config.limits.clear();
    let service = ratekeeper_server::serve::Service::builder(config)
        .start()
        .await
        .expect("the service starts");
    let url = format!("http://{}/", service.addrs().admin.expect("admin is on"));
    let dom = dump_dom(chromium, url).await;
    assert!(dom.contains(r#"data-loaded="true">"#), "{dom}");
    assert!(dom.contains("No limits configured."), "{dom}");
    assert!(!dom.contains(r#"<section class="card""#));
    service.shutdown();
    service.wait().await.expect("a clean shutdown");
}

#[tokio::test]
async fn the_dashboard_asks_for_the_admin_token_and_shows_the_limits_with_it() {
    let Some(chromium) = chromium() else { return };
    const TOKEN: &str = "admin-token-0123456789abcdef";
    let dir = tempfile::tempdir().expect("a directory");
    let tokens = dir.path().join("admin");
    std::fs::write(&tokens, format!("{TOKEN}\n")).expect("the token file");
    let service = TestService::start(&format!(
        "{LISTEN_ANY}[access.admin]\ntoken_file = {:?}\n{LIMITS}",
        tokens.display()
    ))
    .await;
    let body = json!({"limits": ["per-user"], "key": {"header:x-user": "erin"}});
    service.post("/v1/check", body).await;

    // Without the token: the page asks for it and shows no data.
    let dom = dump_dom(chromium.clone(), service.admin("/")).await;
    assert!(dom.contains(r#"data-needs-token="true""#), "{dom}");
    assert!(
        dom.contains(r#"<form class="token" id="token-form">"#),
        "{dom}"
    );
    assert!(!dom.contains(r#"<section class="card""#));
    assert!(!dom.contains(r#"data-loaded="true""#));

    // Given once in the fragment (never sent to the server), the token
    // goes with the page's requests, and leaves the address.
    let dom = dump_dom(chromium, service.admin(&format!("/#token={TOKEN}"))).await;
    assert!(dom.contains(r#"data-loaded="true""#), "{dom}");
    assert!(dom.contains(r#"<form class="token" id="token-form" hidden="">"#));
    let per_user = card(&dom, "per-user");
    assert!(per_user.contains(r#"data-field="allowed-total" data-value="1">1</div>"#));
    assert!(!dom.contains(TOKEN), "the token is not in the page");
    service.stop().await;
}

/// A limit charged after the fact says how many units, reports and
/// overdrafts, as `/v1/stats` counts them.
#[tokio::test]
async fn the_dashboard_shows_units_charged_after_the_fact() {
    let Some(chromium) = chromium() else { return };
    let service = TestService::start(&format!(
        "{LISTEN_ANY}[[limits]]\nname = \"llm-tokens\"\nrate = \"10000/minute\"\nkey = [\"header:x-api-key\"]\n"
    ))
    .await;
    // A request, so that the limit is not idle and has its card.
    let check = json!({"limits": ["llm-tokens"], "key": {"header:x-api-key": "k-0"}});
    service.post("/v1/check", check).await;
    for cost in [4_000, 9_000] {
        let body =
            json!({"limits": ["llm-tokens"], "key": {"header:x-api-key": "k-1"}, "cost": cost});
        service.post("/v1/report", body).await;
    }
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let after = &stats["limits"][0]["after_the_fact"];
    assert_eq!(after["reports"], 2, "{stats}");
    assert_eq!(after["units"], 13_000);
    assert_eq!(after["overdrafts"], 1);

    let dom = dump_dom(chromium, service.admin("/")).await;
    assert!(
        dom.contains(r#"data-field="units-after" data-value="13000">13,000</b> units charged after the fact (2 reports, 1 overdraft)"#),
        "{dom}"
    );
    service.stop().await;
}

/// A limit with a penalty lists the keys it blocked, the longest first.
#[tokio::test]
async fn the_dashboard_lists_blocked_keys() {
    let Some(chromium) = chromium() else { return };
    let service = TestService::start(&format!(
        "{LISTEN_ANY}[[limits]]\nname = \"logins\"\nrate = \"1/minute\"\nkey = [\"header:x-user\"]\nblock_for = \"15m\"\n"
    ))
    .await;
    let login = json!({"limits": ["logins"], "key": {"header:x-user": "mallory"}});
    for _ in 0..2 {
        service.post("/v1/check", login.clone()).await;
    }
    let stats = service.get_json(service.admin("/v1/stats")).await;
    assert_eq!(
        stats["limits"][0]["blocks"]["keys"][0]["key"], "mallory",
        "{stats}"
    );

    let dom = dump_dom(chromium, service.admin("/")).await;
    assert!(
        dom.contains(
            r#"data-field="blocked-keys" data-value="1">1</b> key blocked (mallory 15 min)"#
        ),
        "{dom}"
    );
    service.stop().await;
}
