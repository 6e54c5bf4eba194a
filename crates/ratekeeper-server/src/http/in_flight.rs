//! `POST /v1/acquire` and `/v1/release`: a request's slots on the caps on
//! requests in flight (`policy = "concurrency"`), taken before it runs
//! with its rate limits decided alike, and given back when it ends. A
//! request of descriptors takes the slots of the caps on descriptors, as
//! the gRPC door does.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use ratekeeper::store::in_flight::{Slot, RETRY_AFTER_FULL};
use ratekeeper_tower::headers::insert_retry_after;

use super::api::{
    descriptor_request, descriptors_answer, method, plan_http, read, respond, within_caps,
    ApiSource, Body, Read,
};
use super::error::ApiError;
use super::json::{
    DecisionRequest, DecisionResponse, LimitStatus, ReleaseRequest, ReleaseResponse,
};
use crate::engine::headers::verdict_headers;
use crate::engine::{slot_tokens, Engine, LimitSet, SlotCheck, Verdict, SLOT_SEPARATOR};

/// Takes a slot of every cap on requests in flight that applies to the
/// request (by the caps it names in `limits`, or its method and path) and
/// decides its rate limits as `/v1/check` does, all or nothing: a full
/// cap takes nothing from the rate limits, and a rate limit's refusal
/// gives the slots back. When allowed, the answer's `slot` is the token
/// to give to `/v1/release` when the request ends.
pub(super) async fn acquire(
    State(engine): State<Engine>,
    body: Body,
) -> Result<Response, ApiError> {
    let mut request = read(&engine, body)?;
    // Before any work on it, as every door: a body over `[requests]`.
    within_caps(&engine.request_caps(), &request)?;
    if let Some(descriptors) = &request.descriptors {
        let mut asked = descriptor_request(&request, descriptors)?;
        asked.in_flight = true;
        let verdict = engine.decide_descriptors(&asked).await?;
        let (headers, mut body) = descriptors_answer(&verdict);
        let mut statuses: Vec<LimitStatus> = verdict
            .caps
            .iter()
            .map(|cap| LimitStatus::of_slot(&cap.result))
            .collect();
        statuses.append(&mut body.limits);
        body.limits = statuses;
        if !verdict.slots.is_empty() {
            body.slot = Some(slot_tokens(&verdict.slots));
        }
        return Ok(respond(&verdict.taken, headers, Some(body)));
    }
    let limits = engine.limits();
    let named = request
        .limits
        .as_ref()
        .is_some_and(|names| !names.is_empty());
    let caps = slot_checks(&limits, &mut request)?;
    let acquired = engine.acquire(caps).await?;
    if let Some(refused) = acquired.refused_by() {
        let mut headers = http::HeaderMap::new();
        let wait = refused.decision().retry_after();
        insert_retry_after(&mut headers, wait);
        let verdict = Verdict::default();
        let mut body = DecisionResponse::new(&verdict, BTreeMap::new());
        body.allowed = false;
        body.denied_by = Some(refused.check.cap.name().to_owned());
        body.retry_after =
            ratekeeper_tower::headers::retry_after_secs(wait).or(Some(RETRY_AFTER_FULL.as_secs()));
        body.limits = acquired.results.iter().map(LimitStatus::of_slot).collect();
        return Ok(respond(&verdict, headers, Some(body)));
    }
    let checks = match &request.limits {
        // Only caps were named: no rate limit to decide.
        Some(names) if named && names.is_empty() => Vec::new(),
        _ => match plan_http(&engine, &limits, &request) {
            Ok(checks) => checks,
            Err(error) => {
                let _ = engine.release(&acquired.slots).await;
                return Err(error);
            }
        },
    };
    let verdict = match engine.check(checks).await {
        Ok(verdict) => verdict,
        Err(error) => {
            let _ = engine.release(&acquired.slots).await;
            return Err(error.into());
        }
    };
    let mut body = DecisionResponse::new(&verdict, BTreeMap::new());
    let mut statuses: Vec<LimitStatus> =
        acquired.results.iter().map(LimitStatus::of_slot).collect();
    statuses.append(&mut body.limits);
    body.limits = statuses;
    if verdict.is_allowed() {
        if !acquired.slots.is_empty() {
            body.slot = Some(slot_tokens(&acquired.slots));
        }
    } else {
        // A rate limit refused: the request will not run.
        let _ = engine.release(&acquired.slots).await;
    }
    Ok(respond(&verdict, verdict_headers(&verdict), Some(body)))
}

/// Gives back the slots a `/v1/acquire` answer named in `slot`.
pub(super) async fn release(
    State(engine): State<Engine>,
    body: Read<ReleaseRequest>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    let request = read(&engine, body)?;
    let tokens: Vec<&str> = request.slot.split(SLOT_SEPARATOR).collect();
    engine.request_caps().limit_names(tokens.len())?;
    let slots = tokens
        .into_iter()
        .map(Slot::from_token)
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::Slot)?;
    engine
        .release(&slots)
        .await
        .map_err(ApiError::from_release)?;
    Ok(Json(ReleaseResponse {
        released: slots.len(),
    }))
}

/// The caps `request` meets, with its key under each; the caps it names
/// are taken out of its `limits`, which keeps the rate limits' names.
fn slot_checks(
    limits: &LimitSet,
    request: &mut DecisionRequest,
) -> Result<Vec<SlotCheck>, ApiError> {
    let method = method(request)?;
    let caps: Vec<_> = match &mut request.limits {
        Some(names) => take_caps_named(limits, names),
        None => limits
            .in_flight_for_http(method.as_ref(), request.path.as_deref())
            .cloned()
            .collect(),
    };
    let source = ApiSource::new(&request.key, method.as_ref(), request.path.as_deref());
    caps.into_iter()
        .map(|cap| {
            let key = cap.key(&source).map_err(|part| ApiError::MissingPart {
                limit: cap.name().to_owned(),
                part: part.to_string(),
            })?;
            Ok(SlotCheck { cap, key })
        })
        .collect()
}

/// The caps among `names`, taken out of it.
fn take_caps_named(
    limits: &LimitSet,
    names: &mut Vec<String>,
) -> Vec<std::sync::Arc<crate::engine::ActiveInFlight>> {
    let mut caps = Vec::new();
    names.retain(|name| match limits.in_flight(name) {
        Some(cap) => {
            caps.push(std::sync::Arc::clone(cap));
            false
        }
        None => true,
    });
    caps
}
