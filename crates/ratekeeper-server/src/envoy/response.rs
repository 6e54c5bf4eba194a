//! Envoy's response: each descriptor's status, and the headers added to
//! the request and the response.

use std::collections::HashMap;
use std::time::Duration;

use ratekeeper::store::AnsweredBy;
use ratekeeper::Decision;
use ratekeeper_tower::headers::{self, PolicyReport};
use smallvec::SmallVec;

use super::proto::rate_limit_response::rate_limit::Unit;
use super::proto::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::proto::{HeaderValue, RateLimitResponse};
use crate::config::EnvoyDoorConfig;
use crate::engine::{
    slot_tokens, DescriptorAnswer, DescriptorVerdict, LimitResult, Planned, RateUnit, Shown,
    SATURATED_HEADER, SLOT_HEADER, STORE_HEADER,
};

/// The engine's verdict as Envoy's response: each descriptor's status,
/// the overall code, and the headers `door` asks for.
pub(super) fn answer(
    mut verdict: DescriptorVerdict,
    door: &EnvoyDoorConfig,
    answered_by: AnsweredBy,
) -> RateLimitResponse {
    let mut out = Vec::new();
    if door.response_headers.draft() {
        add_headers(&mut out, verdict.results());
    }
    // The statuses move into the answer: their limits' names are not
    // copied again.
    let statuses: Vec<DescriptorStatus> = std::mem::take(&mut verdict.statuses)
        .into_iter()
        .map(status)
        .collect();
    if door.response_headers.envoy_ratelimit() {
        add_envoy_ratelimit_headers(&mut out, &statuses, door);
    }
    if let Some(names) = verdict.taken.saturated_header() {
        out.push(header(SATURATED_HEADER, names));
    }
    if answered_by.is_failover() {
        out.push(header(STORE_HEADER, answered_by.as_str().to_owned()));
    }
    if verdict.over {
        if let Some(secs) = headers::retry_after_secs(verdict.retry_after()) {
            out.push(header("retry-after", secs.to_string()));
        }
    }
    // The slots the request holds: Envoy adds their tokens to the
    // request, and its stream-done call sends them back.
    let request_headers_to_add = match verdict.slots.is_empty() {
        true => Vec::new(),
        false => vec![header(SLOT_HEADER, slot_tokens(&verdict.slots))],
    };
    RateLimitResponse {
        overall_code: code(verdict.over) as i32,
        statuses,
        response_headers_to_add: out,
        request_headers_to_add,
        ..RateLimitResponse::default()
    }
}

fn code(over: bool) -> Code {
    match over {
        true => Code::OverLimit,
        false => Code::Ok,
    }
}

/// A descriptor's status as Envoy's.
fn status(status: DescriptorAnswer) -> DescriptorStatus {
    DescriptorStatus {
        code: code(status.over) as i32,
        current_limit: status.limit.map(rate_limit),
        limit_remaining: status.remaining,
        duration_until_reset: status.until_reset.map(duration),
    }
}

/// A limit as Envoy's `current_limit`.
fn rate_limit(shown: Shown) -> RateLimit {
    let unit = match shown.unit {
        RateUnit::Unknown => Unit::Unknown,
        RateUnit::Second => Unit::Second,
        RateUnit::Minute => Unit::Minute,
        RateUnit::Hour => Unit::Hour,
        RateUnit::Day => Unit::Day,
        RateUnit::Month => Unit::Month,
        RateUnit::Year => Unit::Year,
        RateUnit::Week => Unit::Week,
    };
    RateLimit {
        name: shown.name,
        requests_per_unit: shown.requests_per_unit,
        unit: unit as i32,
    }
}

/// The draft's `RateLimit-Policy` (every limit that applied, not in shadow
/// mode, once per name: its tightest key) and `RateLimit` (the tightest).
fn add_headers<'a>(
    out: &mut Vec<HeaderValue>,
    results: impl Iterator<Item = (&'a LimitResult, &'a Planned, &'a Decision)>,
) {
    /// Up to this many names, finding a name's report by looking through
    /// them costs less than hashing it.
    const SEARCHED: usize = 8;
    let mut reports: SmallVec<[PolicyReport<'_>; 4]> = SmallVec::new();
    // Where each name's report is, past SEARCHED names: overrides make as
    // many names as descriptors, so searching them all would be quadratic.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (result, _, decision) in results {
        #[cfg(test)]
        crate::engine::work::step();
        if result.check.limit.is_shadow() {
            continue;
        }
        let report = PolicyReport {
            name: result.check.limit.name(),
            window: result.check.limit.window(),
            decision,
            partition_key: None,
        };
        let found = if reports.len() <= SEARCHED {
            reports.iter().position(|kept| kept.name == report.name)
        } else {
            if seen.is_empty() {
                seen.extend(reports.iter().enumerate().map(|(at, kept)| (kept.name, at)));
            }
            seen.get(report.name).copied()
        };
        match found {
            Some(at) => {
                let kept = &mut reports[at];
                if report.decision.remaining() < kept.decision.remaining() {
                    *kept = report;
                }
            }
            None => {
                if !seen.is_empty() {
                    seen.insert(report.name, reports.len());
                }
                reports.push(report);
            }
        }
    }
    let Some(tightest) = headers::tightest(&reports) else {
        return;
    };
    out.push(header(
        headers::RATELIMIT_POLICY.as_str(),
        headers::ratelimit_policy_value(&reports),
    ));
    out.push(header(
        headers::RATELIMIT.as_str(),
        headers::ratelimit_value(tightest),
    ));
}

/// envoyproxy/ratelimit's `RateLimit-Limit`, `RateLimit-Remaining` and
/// `RateLimit-Reset` (named by `door`) of the descriptor closest to its
/// limit, as that service picks it: the last one over its limit if any,
/// else the first with the least remaining; none when no descriptor had a
/// limit. The reset is in whole seconds, rounded up.
fn add_envoy_ratelimit_headers(
    out: &mut Vec<HeaderValue>,
    statuses: &[DescriptorStatus],
    door: &EnvoyDoorConfig,
) {
    let limited = statuses
        .iter()
        .filter(|status| status.current_limit.is_some());
    let over = limited
        .clone()
        .rfind(|status| status.code == Code::OverLimit as i32);
    let chosen = over.or_else(|| limited.min_by_key(|status| status.limit_remaining));
    let Some(status) = chosen else { return };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit);
    let reset = status.duration_until_reset.as_ref().map_or(0, |reset| {
        let seconds = reset.seconds.max(0);
        match reset.nanos > 0 {
            true => seconds.saturating_add(1),
            false => seconds,
        }
    });
    out.push(header(&door.limit_header, limit.to_string()));
    out.push(header(
        &door.remaining_header,
        status.limit_remaining.to_string(),
    ));
    out.push(header(&door.reset_header, reset.to_string()));
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}

/// A protobuf duration, clamped to its range.
fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}
