//! `POST /v1/check`, `/v1/peek`, `/v1/refund`, `/v1/report`,
//! `/v1/reserve`, `/v1/commit`, `/v1/cancel` and `GET /v1/limits`
//! (`/v1/acquire` and `/v1/release` are in [`super::in_flight`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::Method;

use ratekeeper::store::Reservation;
use ratekeeper::RetryAfter;

use super::body::JsonBody;
use super::error::ApiError;
use super::json::{
    DecisionRequest, DecisionResponse, DescriptorEntry, RefundResponse, Refunded, SettleRequest,
    DEFAULT_RESERVATION_TTL,
};
use crate::config::{CapError, KeyPart, RequestCaps};
use crate::engine::headers::verdict_headers;
use crate::engine::{
    DecisionDoor, Descriptor, DescriptorRequest, DescriptorVerdict, DoorRules, Engine, HttpRequest,
    KeySource, LimitCheck, LimitSet, MissingPart, NamedParts,
};
use crate::engine::{LimitDescription, MatchDescription};
use ratekeeper_tower::headers::insert_retry_after;

/// A descriptor of the JSON API, read in place by the engine's plan: it
/// costs the request's `cost`.
impl Descriptor for Vec<DescriptorEntry> {
    type Entry = DescriptorEntry;

    fn entries(&self) -> &[DescriptorEntry] {
        self
    }
}

/// A body as axum's extractor read it: the JSON, or why not.
pub(super) type Read<T> = Result<JsonBody<T>, axum::extract::rejection::JsonRejection>;

pub(super) type Body = Read<DecisionRequest>;

/// The request in `body`, or the error axum's extractor found, as the API
/// answers it.
pub(super) fn read<T>(engine: &Engine, body: Read<T>) -> Result<T, ApiError> {
    match body {
        Ok(JsonBody(request)) => Ok(request),
        Err(rejection) => Err(ApiError::from_json(
            rejection,
            engine.request_caps().max_body_bytes,
        )),
    }
}

/// Decides a request and records it where allowed.
pub(super) async fn check(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    if let Some(descriptors) = &request.descriptors {
        within_caps(&engine.request_caps(), &request)?;
        let asked = descriptor_request(&request, descriptors)?;
        let verdict = engine.decide_descriptors(&asked).await?;
        return Ok(answer_descriptors(&verdict));
    }
    let checks = checks(&engine, &request)?;
    let verdict = engine.check(checks).await?;
    Ok(answer(&verdict))
}

/// The status the request would get, taking nothing.
pub(super) async fn peek(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    let checks = checks(&engine, &request)?;
    let verdict = engine.peek(checks).await?;
    Ok(answer(&verdict))
}

/// Gives `cost` units back to the request's key under each limit.
pub(super) async fn refund(
    State(engine): State<Engine>,
    body: Body,
) -> Result<Json<RefundResponse>, ApiError> {
    let request = read(&engine, body)?;
    let checks = checks(&engine, &request)?;
    // All or nothing: a refund one limit forbids gives nothing back.
    if let Some(check) = checks.iter().find(|c| !c.limit.config().allow_refunds) {
        return Err(ApiError::RefundForbidden(check.limit.name().to_owned()));
    }
    engine.refund(&checks).await?;
    let refunded = checks
        .iter()
        .map(|check| Refunded {
            name: check.limit.name().to_owned(),
            key: String::from_utf8_lossy(&check.key).into_owned(),
            units: check.cost,
        })
        .collect();
    Ok(Json(RefundResponse { refunded }))
}

/// Charges `cost` units to the request's key under each limit whatever
/// they have left: a cost known after the fact. Each limit on its own; the
/// answer is `/v1/check`'s, refused where a limit was overdrawn.
pub(super) async fn report(State(engine): State<Engine>, body: Body) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    let checks = checks(&engine, &request)?;
    // All or nothing: a report one limit forbids charges nothing.
    if let Some(check) = checks.iter().find(|c| !c.limit.config().allow_reports) {
        return Err(ApiError::ReportForbidden(check.limit.name().to_owned()));
    }
    let verdict = engine.report(checks).await?;
    Ok(answer(&verdict))
}

/// Decides `cost` units as `/v1/check` does and holds them for `ttl` as a
/// reservation, all or nothing; the answer is `/v1/check`'s with the
/// reservation when allowed.
pub(super) async fn reserve(
    State(engine): State<Engine>,
    body: Body,
) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    let ttl = match &request.ttl {
        Some(text) => ratekeeper::duration::parse(text)
            .map_err(|error| ApiError::Body(format!("invalid ttl {text:?}: {error}")))?,
        None => DEFAULT_RESERVATION_TTL,
    };
    let checks = checks(&engine, &request)?;
    let (verdict, held) = engine.reserve(checks, ttl).await?;
    let mut body = DecisionResponse::new(&verdict, BTreeMap::new());
    if !held.is_empty() {
        let tokens: Vec<String> = held.iter().map(|r| r.to_token()).collect();
        body.reservation = Some(tokens.join(TOKEN_SEPARATOR));
    }
    Ok(respond(&verdict, verdict_headers(&verdict), Some(body)))
}

/// Settles a reservation at the request's real `cost`.
pub(super) async fn commit(
    State(engine): State<Engine>,
    body: Read<SettleRequest>,
) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    let Some(cost) = request.cost else {
        return Err(ApiError::Body("a commit needs \"cost\"".to_owned()));
    };
    let reservations = reservations(&engine, &request.reservation)?;
    let verdict = engine.settle(&reservations, Some(cost)).await?;
    Ok(answer(&verdict))
}

/// Gives a reservation's units back and closes it.
pub(super) async fn cancel(
    State(engine): State<Engine>,
    body: Read<SettleRequest>,
) -> Result<Response, ApiError> {
    let request = read(&engine, body)?;
    if request.cost.is_some() {
        return Err(ApiError::Body("a cancel takes no \"cost\"".to_owned()));
    }
    let reservations = reservations(&engine, &request.reservation)?;
    let verdict = engine.settle(&reservations, None).await?;
    Ok(answer(&verdict))
}

/// Between the tokens of a reservation over several limits (never in a
/// token).
pub(super) const TOKEN_SEPARATOR: &str = ".";

/// The reservations a `/v1/reserve` answer named, one per limit, at most
/// as many as a request may name limits.
fn reservations(engine: &Engine, text: &str) -> Result<Vec<Reservation>, ApiError> {
    let tokens: Vec<&str> = text.split(TOKEN_SEPARATOR).collect();
    engine.request_caps().limit_names(tokens.len())?;
    Ok(tokens
        .into_iter()
        .map(Reservation::from_token)
        .collect::<Result<_, _>>()?)
}

/// Every limit in force, and the caps on requests in flight.
pub(super) async fn limits(State(engine): State<Engine>) -> Json<serde_json::Value> {
    let set = engine.limits();
    let limits: Vec<LimitDescription> = set
        .iter()
        .map(|limit| LimitDescription::new(limit.config()))
        .collect();
    let in_flight: Vec<serde_json::Value> = set
        .in_flight_caps()
        .iter()
        .map(|cap| {
            let config = cap.config();
            serde_json::json!({
                "name": cap.name(),
                "max_in_flight": cap.cap().max(),
                "lease_ms": u64::try_from(cap.cap().lease().as_millis()).unwrap_or(u64::MAX),
                "key": config.key.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "match": MatchDescription::new(&config.matcher),
            })
        })
        .collect();
    Json(serde_json::json!({ "limits": limits, "in_flight": in_flight }))
}

/// The answer to a request of descriptors: as [`answer`]'s, refused also
/// when a descriptor is refused outright (a limit of zero in
/// envoyproxy/ratelimit's or Limitador's files), which no limit's result
/// shows.
fn answer_descriptors(verdict: &DescriptorVerdict) -> Response {
    let (headers, body) = descriptors_answer(verdict);
    respond(&verdict.taken, headers, Some(body))
}

/// [`answer_descriptors`]' headers and body, for a door that adds to them.
pub(super) fn descriptors_answer(
    verdict: &DescriptorVerdict,
) -> (http::HeaderMap, DecisionResponse) {
    let refused_outright = verdict.over && verdict.taken.is_allowed();
    let outright = refused_outright
        .then(|| verdict.statuses.iter().find(|status| status.over))
        .flatten();
    let mut headers = verdict_headers(&verdict.taken);
    let mut body = DecisionResponse::new(&verdict.taken, BTreeMap::new());
    if let Some(status) = outright {
        let wait = status.until_reset.unwrap_or_default();
        insert_retry_after(&mut headers, RetryAfter::After(wait));
        headers.insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-store"),
        );
        body.allowed = false;
        body.denied_by = status.limit.as_ref().map(|shown| shown.name.clone());
        body.retry_after = ratekeeper_tower::headers::retry_after_secs(RetryAfter::After(wait));
    }
    (headers, body)
}

/// The JSON answer, with the verdict's headers on the response too.
fn answer(verdict: &crate::engine::Verdict) -> Response {
    respond(verdict, verdict_headers(verdict), None)
}

/// The JSON answer of `verdict` (or `body`, when given) with `headers` on
/// the response and in the body.
pub(super) fn respond(
    verdict: &crate::engine::Verdict,
    headers: http::HeaderMap,
    body: Option<DecisionResponse>,
) -> Response {
    let fields: BTreeMap<String, String> = headers
        .iter()
        .filter(|(name, _)| *name != http::header::CACHE_CONTROL)
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let body = match body {
        Some(mut body) => {
            body.headers = fields;
            body
        }
        None => DecisionResponse::new(verdict, fields),
    };
    // axum's `Json` starts from 128 bytes and grows twice for one limit's
    // answer (about 350 bytes): start where the answer ends.
    let mut json = Vec::with_capacity(512);
    if let Err(error) = serde_json::to_writer(&mut json, &body) {
        // Plain structs of strings and numbers: it cannot fail, but if
        // it did, say so as axum would.
        return (http::StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response();
    }
    let content_type = [(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    )];
    (headers, content_type, json).into_response()
}

/// The request's checks: those of its descriptors, or of the limits it
/// names or its method and path match, as the engine plans them.
fn checks(engine: &Engine, request: &DecisionRequest) -> Result<Vec<LimitCheck>, ApiError> {
    within_caps(&engine.request_caps(), request)?;
    let limits = engine.limits();
    if let Some(descriptors) = &request.descriptors {
        let asked = descriptor_request(request, descriptors)?;
        return Ok(engine.plan_descriptors(&limits, &asked)?.into_takes());
    }
    plan_http(engine, &limits, request)
}

/// The checks of a request without descriptors, of `limits`: the limits it
/// names, or those its method and path match.
pub(super) fn plan_http(
    engine: &Engine,
    limits: &LimitSet,
    request: &DecisionRequest,
) -> Result<Vec<LimitCheck>, ApiError> {
    within_caps(&engine.request_caps(), request)?;
    let method = method(request)?;
    let asked = HttpRequest {
        door: DecisionDoor::HttpApi,
        method: method.as_ref(),
        path: request.path.as_deref(),
        names: request.limits.as_deref(),
        cost: request.cost,
        missing: MissingPart::Refused,
    };
    let source = ApiSource::new(&request.key, method.as_ref(), request.path.as_deref());
    Ok(engine.plan_http(limits, &asked, |_| source)?)
}

/// The body's `method`, if it gives one.
pub(super) fn method(request: &DecisionRequest) -> Result<Option<Method>, ApiError> {
    request
        .method
        .as_ref()
        .map(|method| {
            Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .map_err(|_| ApiError::Body(format!("invalid method {method:?}")))
        })
        .transpose()
}

/// A request of Envoy-style descriptors, as the engine plans it: each
/// costs the request's `cost`, and a key part a descriptor lacks is an
/// error the caller can fix.
pub(super) fn descriptor_request<'a>(
    request: &'a DecisionRequest,
    descriptors: &'a [Vec<DescriptorEntry>],
) -> Result<DescriptorRequest<'a, Vec<DescriptorEntry>>, ApiError> {
    if request.limits.is_some() {
        return Err(ApiError::Body(
            "give \"limits\" or \"descriptors\", not both".to_owned(),
        ));
    }
    let Some(domain) = request.domain.as_deref() else {
        return Err(ApiError::Body(
            "\"descriptors\" need a \"domain\"".to_owned(),
        ));
    };
    Ok(DescriptorRequest {
        domain,
        descriptors,
        hits: request.cost,
        door: DecisionDoor::HttpApi,
        rules: DoorRules::default(),
        missing: MissingPart::Refused,
        // `/v1/acquire` takes slots; the other endpoints leave caps alone.
        in_flight: false,
    })
}

/// Refuses a request over a cap of `[requests]`, before any work on it.
pub(super) fn within_caps(caps: &RequestCaps, request: &DecisionRequest) -> Result<(), CapError> {
    if let Some(names) = &request.limits {
        caps.limit_names(names.len())?;
    }
    if let Some(descriptors) = &request.descriptors {
        caps.check_descriptors(descriptors.iter().map(|descriptor| {
            descriptor
                .iter()
                .map(|entry| (entry.key.as_str(), entry.value.as_str()))
        }))?;
    }
    caps.key_parts(request.key.len())?;
    for (name, value) in &request.key {
        caps.value(name, || "a name in \"key\"".to_owned())?;
        caps.value(value, || format!("key[{name:?}]"))?;
    }
    let texts = [
        ("domain", &request.domain),
        ("method", &request.method),
        ("path", &request.path),
    ];
    for (field, text) in texts {
        if let Some(text) = text {
            caps.value(text, || field.to_owned())?;
        }
    }
    Ok(())
}

/// Key parts from the body's `key`, and `route` from its method and path
/// when `key` does not give it.
#[derive(Clone, Copy)]
pub(super) struct ApiSource<'a> {
    parts: NamedParts<'a>,
    method: Option<&'a Method>,
    path: Option<&'a str>,
}

impl<'a> ApiSource<'a> {
    /// The parts of a body's `key`, and its method and path.
    pub(super) fn new(
        key: &'a std::collections::HashMap<String, String>,
        method: Option<&'a Method>,
        path: Option<&'a str>,
    ) -> ApiSource<'a> {
        ApiSource {
            parts: NamedParts(key),
            method,
            path,
        }
    }
}

impl KeySource for ApiSource<'_> {
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
        if let Some(value) = self.parts.part(part) {
            return Some(value);
        }
        match (part, self.method, self.path) {
            (KeyPart::Route, Some(method), Some(path)) => {
                Some(Cow::Owned(format!("{method} {path}").into_bytes()))
            }
            _ => None,
        }
    }
}
