//! Reloading the limits: under load, nothing is lost and counts are kept;
//! an invalid file is refused and the running limits stay; a changed file
//! is picked up without a signal.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestService, LISTEN_ANY};
use serde_json::json;

fn file_text(extra_rate: Option<&str>) -> String {
    let mut text = format!(
        "{LISTEN_ANY}\n[[limits]]\nname = \"steady\"\nrate = \"200/minute\"\npolicy = \"gcra\"\nkey = [\"global\"]\n"
    );
    if let Some(rate) = extra_rate {
        text.push_str(&format!(
            "\n[[limits]]\nname = \"extra\"\nrate = \"{rate}\"\nkey = [\"header:x-user\"]\n[limits.match]\npath_prefix = \"/never\"\n"
        ));
    }
    text
}

async fn limit_names(service: &TestService) -> Vec<String> {
    let answer = service.get_json(service.http("/v1/limits")).await;
    answer["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_loses_no_request_and_keeps_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, file_text(None)).unwrap();
    let service = std::sync::Arc::new(
        TestService::start_with(&file_text(None), Some(path.clone()), None).await,
    );

    // 8 clients send 50 checks each (400 in all) on one global limit of
    // 200 while the file is rewritten and reloaded; the manual clock does
    // not move, so exactly 200 pass.
    let mut clients = Vec::new();
    for _ in 0..8 {
        let service = std::sync::Arc::clone(&service);
        clients.push(tokio::spawn(async move {
            let (mut allowed, mut refused) = (0, 0);
            for _ in 0..50 {
                let (status, _, answer) = service
                    .post("/v1/check", json!({"limits": ["steady"]}))
                    .await;
                assert_eq!(status, 200, "{answer}");
                if answer["allowed"] == true {
                    allowed += 1;
                } else {
                    refused += 1;
                }
            }
            (allowed, refused)
        }));
    }
    // Reload for as long as the clients run, so reloads land between
    // their requests.
    let mut reloads = 0;
    while clients.iter().any(|client| !client.is_finished()) {
        let extra = ["5/minute", "7/minute", "9/second"][reloads % 3];
        let text = file_text((reloads % 2 == 0).then_some(extra));
        std::fs::write(&path, text).unwrap();
        service
            .service
            .reload()
            .await
            .expect("a valid file reloads");
        reloads += 1;
        tokio::task::yield_now().await;
    }
    assert!(reloads >= 2, "only {reloads} reloads while the clients ran");
    // End on the file without "extra".
    std::fs::write(&path, file_text(None)).unwrap();
    service.service.reload().await.unwrap();
    let (mut allowed, mut refused) = (0, 0);
    for client in clients {
        let (a, r) = client.await.unwrap();
        allowed += a;
        refused += r;
    }
    assert_eq!((allowed, refused), (200, 200));
    assert_eq!(limit_names(&service).await, ["steady"]);

    let service = std::sync::Arc::into_inner(service).unwrap();
    service.stop().await;
}

#[tokio::test]
async fn an_invalid_file_is_refused_and_the_running_limits_stay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, file_text(Some("2/minute"))).unwrap();
    // Only explicit reloads in this test: no watching.
    let service =
        TestService::start_with(&file_text(Some("2/minute")), Some(path.clone()), None).await;

    let body = json!({"limits": ["extra"], "key": {"header:x-user": "erin"}});
    assert_eq!(
        service.post("/v1/check", body.clone()).await.2["allowed"],
        true
    );

    std::fs::write(&path, file_text(Some("2/fortnight"))).unwrap();
    let error = service.service.reload().await.unwrap_err().to_string();
    assert!(
        error.starts_with(&format!("{}:", path.display())) && error.contains("limits[1].rate"),
        "{error}"
    );
    assert!(error.contains("fortnight"), "{error}");
    assert_eq!(limit_names(&service).await, ["steady", "extra"]);
    // The count taken before the refused reload is still there.
    assert_eq!(
        service.post("/v1/check", body.clone()).await.2["allowed"],
        true
    );
    assert_eq!(service.post("/v1/check", body).await.2["allowed"], false);
    service.stop().await;
}

#[tokio::test]
async fn a_changed_file_is_picked_up_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, file_text(None)).unwrap();
    let watch = Some(Duration::from_millis(50));
    let service = TestService::start_with(&file_text(None), Some(path.clone()), watch).await;
    assert_eq!(limit_names(&service).await, ["steady"]);

    std::fs::write(&path, file_text(Some("3/minute"))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit_names(&service).await != ["steady", "extra"] {
        assert!(Instant::now() < deadline, "the change was not picked up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    service.stop().await;
}
