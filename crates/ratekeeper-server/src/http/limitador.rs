//! Kuadrant Limitador's HTTP API on the HTTP door, for the limits of
//! `[limitador]`, so that its callers need no change:
//!
//! ```text
//! POST /check             {"namespace": "ns", "values": {"k": "v"}, "delta": 1}
//! POST /report            same body
//! POST /check_and_report  same body, and optionally "response_headers": "DraftVersion03"
//! GET  /limits/{namespace}
//! ```
//!
//! `values` are one descriptor's entries: Limitador's expressions read
//! them as `descriptors[0]`. As Limitador answers:
//!
//! - `/check` takes nothing and answers 200 with the JSON `null`, or 429
//!   with the text `Too many requests` when a limit that applies has less
//!   than `delta` left;
//! - `/report` adds `delta` to every limit that applies, whatever they
//!   have left (a counter may pass its `max_value`, and then refuses until
//!   its window ends, as Limitador's does), and answers 200 `null`;
//! - `/check_and_report` adds `delta` to every limit that applies when
//!   none of them is over, and to none when one is; it answers 200 `null`
//!   or 429 `null`, with `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//!   `X-RateLimit-Reset` of the limit with the least left when
//!   `response_headers` is `"DraftVersion03"` (the limit field lists every
//!   limit that applied, as `, MAX;w=SECONDS;name="NAME"`);
//! - an answer the store's failure policy made (`on_failure = "open"`, or
//!   the `fallback`) carries `X-RateKeeper-Store: fail-open` (or
//!   `fallback`), as on the other doors;
//! - `/limits/{namespace}` lists the namespace's limits as Limitador's
//!   JSON (`id`, `namespace`, `max_value`, `seconds`, `name`, `conditions`,
//!   `variables`), `[]` for an unknown one.
//!
//! The bodies are capped as the other JSON routes' (`[requests]`: the body,
//! the number of `values`, each key and value, the namespace), and the
//! routes are behind the same `[access.decisions]` tokens. A body that is
//! not this JSON is answered 400 as the other routes answer it (problem
//! details, where Limitador answers a text).

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::{HeaderValue, StatusCode};
use ratekeeper::store::AnsweredBy;
use ratekeeper_formats::limitador::Descriptors;
use serde::{Deserialize, Serialize};

use super::body::JsonBody;
use super::error::ApiError;
use crate::engine::headers::insert_store_header;
use crate::engine::{Engine, LimitCheck, LimitadorCheck};

/// Limitador's routes.
pub(super) fn routes() -> Router<Engine> {
    Router::new()
        .route("/check", post(check))
        .route("/report", post(report))
        .route("/check_and_report", post(check_and_report))
        .route("/limits/{namespace}", get(limits))
}

/// The body of `/check`, `/report` and `/check_and_report`, as Limitador
/// reads it (fields it does not know are ignored, as there).
#[derive(Debug, Deserialize)]
struct Info {
    namespace: String,
    values: HashMap<String, String>,
    delta: u64,
    #[serde(default)]
    response_headers: Option<String>,
}

type Body = Result<JsonBody<Info>, axum::extract::rejection::JsonRejection>;

/// The body, within the caps of `[requests]`.
fn read(engine: &Engine, body: Body) -> Result<Info, ApiError> {
    let caps = engine.request_caps();
    let info = match body {
        Ok(JsonBody(info)) => info,
        Err(rejection) => return Err(ApiError::from_json(rejection, caps.max_body_bytes)),
    };
    caps.check_descriptors(std::iter::once(
        info.values.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ))?;
    caps.value(&info.namespace, || "namespace".to_owned())?;
    Ok(info)
}

/// `values` as Limitador's one descriptor.
fn descriptors(info: &Info) -> Descriptors<'_> {
    Descriptors::new(std::iter::once(
        info.values.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    ))
}

/// 200 with the JSON `null`.
fn ok_null() -> Response {
    (StatusCode::OK, Json(())).into_response()
}

/// Whether any limit that applies has less than `delta` left; takes
/// nothing.
async fn check(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let info = read(&engine, body)?;
    let limits = engine.limits();
    let descriptors = descriptors(&info);
    let applying = limits
        .limitador()
        .checks(&info.namespace, &descriptors, info.delta);
    let (checks, zero) = split(applying);
    // In shadow mode the answer is always yes; the question still costs
    // nothing, so it is not asked.
    let shadow = limits.limitador().shadow();
    let mut limited = !shadow && zero && info.delta > 0;
    let mut answered_by = AnsweredBy::Store;
    if !shadow && !limited && !checks.is_empty() {
        let verdict = engine.peek(checks).await?;
        answered_by = verdict.answered_by();
        limited = verdict
            .results
            .iter()
            .any(|result| result.decision().remaining() < info.delta);
    }
    let mut response = if limited {
        // Limitador's error answer: its text, not JSON.
        (StatusCode::TOO_MANY_REQUESTS, "Too many requests").into_response()
    } else {
        ok_null()
    };
    insert_store_header(response.headers_mut(), answered_by);
    Ok(response)
}

/// Adds `delta` to each limit that applies, each on its own.
async fn report(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let info = read(&engine, body)?;
    let limits = engine.limits();
    let descriptors = descriptors(&info);
    let checks: Vec<LimitCheck> = limits
        .limitador()
        .checks(&info.namespace, &descriptors, info.delta)
        .into_iter()
        .filter_map(|applying| applying.check)
        .collect();
    // Each limit charged whatever it has left, past its max_value.
    let verdict = engine.report(checks).await?;
    let mut response = ok_null();
    insert_store_header(response.headers_mut(), verdict.answered_by());
    Ok(response)
}

/// All or nothing: adds `delta` to every limit that applies unless one is
/// over.
async fn check_and_report(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let info = read(&engine, body)?;
    let limits = engine.limits();
    let descriptors = descriptors(&info);
    let applying = limits
        .limitador()
        .checks(&info.namespace, &descriptors, info.delta);
    // What each limit reports: (max_value, seconds, name, remaining, reset).
    let mut counters: Vec<Counter> = Vec::with_capacity(applying.len());
    let mut checks = Vec::with_capacity(applying.len());
    let mut zero = false;
    for applying in &applying {
        match &applying.check {
            Some(check) => checks.push(check.clone()),
            None => {
                zero = true;
                counters.push(Counter::of(applying, 0, applying.limit.seconds()));
            }
        }
    }
    let blocked = zero && info.delta > 0 && !limits.limitador().shadow();
    let verdict = if checks.is_empty() {
        None
    } else if blocked {
        Some(engine.peek(checks).await?)
    } else {
        Some(engine.check(checks).await?)
    };
    let limited = blocked || verdict.as_ref().is_some_and(|v| !v.is_allowed());
    if let Some(verdict) = &verdict {
        let with_check = applying.iter().filter(|a| a.check.is_some());
        for (applying, result) in with_check.zip(&verdict.results) {
            let decision = result.decision();
            counters.push(Counter::of(
                applying,
                decision.remaining(),
                decision.reset().as_secs(),
            ));
        }
    }
    let status = if limited {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let mut response = (status, Json(())).into_response();
    if info.response_headers.as_deref() == Some("DraftVersion03") {
        draft_03_headers(&mut counters, response.headers_mut());
    }
    if let Some(verdict) = &verdict {
        insert_store_header(response.headers_mut(), verdict.answered_by());
    }
    Ok(response)
}

/// The checks of the limits that apply, and whether one of them has
/// `max_value: 0`.
fn split(applying: Vec<LimitadorCheck<'_>>) -> (Vec<LimitCheck>, bool) {
    let zero = applying.iter().any(|a| a.check.is_none());
    (applying.into_iter().filter_map(|a| a.check).collect(), zero)
}

/// One limit's counter, as the headers show it.
struct Counter {
    max_value: u64,
    seconds: u64,
    name: Option<String>,
    remaining: u64,
    reset_secs: u64,
}

impl Counter {
    fn of(applying: &LimitadorCheck<'_>, remaining: u64, reset_secs: u64) -> Counter {
        Counter {
            max_value: applying.limit.max_value(),
            seconds: applying.limit.seconds(),
            name: applying.limit.name().map(str::to_owned),
            remaining,
            reset_secs,
        }
    }
}

/// Limitador's draft-03 headers: the limit with the least left first.
fn draft_03_headers(counters: &mut [Counter], headers: &mut http::HeaderMap) {
    counters.sort_by_key(|counter| counter.remaining);
    let Some(first) = counters.first() else {
        return;
    };
    let mut limit = first.max_value.to_string();
    for counter in counters.iter() {
        limit.push_str(&format!(", {};w={}", counter.max_value, counter.seconds));
        if let Some(name) = &counter.name {
            limit.push_str(&format!(";name=\"{}\"", name.replace('"', "'")));
        }
    }
    let fields = [
        ("x-ratelimit-limit", limit),
        ("x-ratelimit-remaining", first.remaining.to_string()),
        ("x-ratelimit-reset", first.reset_secs.to_string()),
    ];
    for (name, value) in fields {
        // A name from the file that is no header value leaves the field out.
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

/// One limit as Limitador's `GET /limits/{namespace}` lists it.
#[derive(Debug, Serialize)]
struct LimitJson<'a> {
    id: Option<&'a str>,
    namespace: &'a str,
    max_value: u64,
    seconds: u64,
    name: Option<&'a str>,
    conditions: Vec<&'a str>,
    variables: Vec<&'a str>,
}

/// The limits of a namespace.
async fn limits(State(engine): State<Engine>, Path(namespace): Path<String>) -> Response {
    let limits = engine.limits();
    let listed: Vec<LimitJson<'_>> = limits
        .limitador()
        .limits(&namespace)
        .map(|limit| LimitJson {
            id: limit.id(),
            namespace: limit.namespace(),
            max_value: limit.max_value(),
            seconds: limit.seconds(),
            name: limit.name(),
            conditions: limit.conditions().iter().map(|c| c.source()).collect(),
            variables: limit.variables().iter().map(|v| v.source()).collect(),
        })
        .collect();
    Json(listed).into_response()
}
