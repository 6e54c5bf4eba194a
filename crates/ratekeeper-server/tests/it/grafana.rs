//! `examples/grafana/ratekeeper.json`, the Grafana dashboard: every
//! metric its queries name is one the service exports, checked against
//! `/metrics` of running services (the in-memory store, and SQLite for the
//! store-only series), so that a renamed metric cannot leave a panel
//! silently empty.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{TestService, LISTEN_ANY};
use serde_json::{json, Value};

fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grafana/ratekeeper.json");
    let text = std::fs::read_to_string(&path).expect("examples/grafana/ratekeeper.json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every `expr` in `value`, however deep.
fn queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query", Value::String(expr)) => out.push(expr.clone()),
                    _ => queries(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| queries(item, out)),
        _ => {}
    }
}

/// The `ratekeeper_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("ratekeeper_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The metric families a scrape declares (`# TYPE name kind`), with the
/// series names each gives: `name_total` for a counter, `_bucket`, `_sum`
/// and `_count` for a histogram, the name itself for a gauge.
fn declared(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            match kind {
                "counter" => {
                    names.insert(format!("{}_total", name.trim_end_matches("_total")));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    names
}

async fn scrape(service: &TestService) -> String {
    service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("a text body")
}

const LIMIT: &str =
    "[[limits]]\nname = \"per-user\"\nrate = \"1/minute\"\nkey = [\"header:x-user\"]\n";

#[tokio::test]
async fn every_metric_the_grafana_dashboard_names_is_exported() {
    let dashboard = dashboard();
    let mut exprs = Vec::new();
    queries(&dashboard["panels"], &mut exprs);
    queries(&dashboard["templating"], &mut exprs);
    assert!(exprs.len() >= 20, "{} queries", exprs.len());
    let named: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(named.len() >= 20, "{named:?}");

    // The in-memory store, and SQLite with the failure policy: between
    // them, every series the service has.
    let memory = TestService::start(&format!("{LISTEN_ANY}{LIMIT}")).await;
    let dir = tempfile::tempdir().unwrap();
    let sqlite = TestService::start(&format!(
        "{LISTEN_ANY}[store]\nkind = \"sqlite\"\npath = {:?}\non_failure = \"open\"\n{LIMIT}",
        dir.path().join("counts.db").display().to_string()
    ))
    .await;
    let mut exported = BTreeSet::new();
    for service in [&memory, &sqlite] {
        let body = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
        service.post("/v1/check", body).await;
        exported.extend(declared(&scrape(service).await));
    }
    // The check can fail: a name no scrape declares is found missing.
    assert!(!exported.contains("ratekeeper_no_such_metric_total"));
    assert!(
        exported.contains("ratekeeper_decisions_total"),
        "{exported:?}"
    );

    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics /metrics does not export: {missing:?}"
    );

    // A dashboard Grafana imports: unique panel ids, each panel placed on
    // the 24-column grid, each with a title, and a query for each target.
    let panels = dashboard["panels"].as_array().expect("panels");
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels {
        let title = panel["title"].as_str().expect("a title");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{title}: x {x} + w {w}");
        if panel["type"] != "row" {
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{title}");
            assert!(targets.iter().all(|t| t["expr"].is_string()), "{title}");
            assert!(
                panel["description"].is_string(),
                "{title} says what it shows"
            );
        }
    }
    memory.stop().await;
    sqlite.stop().await;
}

/// The variables a string refers to: `$name` and `${name}` (Grafana's own,
/// `$__interval` and the like, included).
fn variables(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        let tail = rest[at + 1..].strip_prefix('{').unwrap_or(&rest[at + 1..]);
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if end > 0 {
            out.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
}

/// Every variable any string of `value` refers to.
fn referred(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(text) => variables(text, out),
        Value::Object(map) => map.values().for_each(|v| referred(v, out)),
        Value::Array(items) => items.iter().for_each(|v| referred(v, out)),
        _ => {}
    }
}

#[test]
fn the_grafana_dashboard_defines_every_variable_it_uses_and_uses_every_one() {
    let dashboard = dashboard();
    let mut used = BTreeSet::new();
    referred(&dashboard, &mut used);
    // An import's inputs (`__inputs`, such as DS_PROMETHEUS) and the
    // dashboard's own variables.
    let inputs = dashboard["__inputs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let templating = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let defined: BTreeSet<String> = inputs
        .iter()
        .chain(&templating)
        .map(|v| v["name"].as_str().expect("a named variable").to_owned())
        .collect();
    assert!(defined.contains("datasource"), "{defined:?}");
    let undefined: Vec<&String> = used
        .iter()
        .filter(|name| !name.starts_with("__") && !defined.contains(*name))
        .collect();
    assert!(undefined.is_empty(), "used, never defined: {undefined:?}");
    let unused: Vec<&String> = defined
        .iter()
        .filter(|name| !used.contains(*name))
        .collect();
    assert!(unused.is_empty(), "defined, never used: {unused:?}");
}
