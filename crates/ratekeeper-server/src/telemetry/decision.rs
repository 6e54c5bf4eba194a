//! The span of one decision, and what it says of the verdict.

use opentelemetry::trace::Status;
use opentelemetry::{Array, StringValue, Value};
use ratekeeper::store::StoreError;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::engine::{Check, Verdict};

/// The span of a decision on `checks` with the store `store`, a child of
/// the caller's span when the request carried one; a disabled span (made
/// without allocating) when traces are not exported.
pub(crate) fn decision_span(store: &'static str, checks: &[Check]) -> Span {
    if !super::is_exporting() {
        return Span::none();
    }
    let request = super::propagation::current();
    let door = request.as_ref().map_or("unknown", |request| request.door);
    let span = tracing::info_span!(
        target: "ratekeeper::decision",
        "ratekeeper.decide",
        otel.kind = "server",
        ratekeeper.door = door,
        ratekeeper.store = store,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(request) = request {
        // A request without a (valid) traceparent starts a trace.
        let _ = span.set_parent(request.parent);
    }
    span.set_attribute(
        "ratekeeper.limits",
        strings(checks.iter().map(|check| check.limit.name())),
    );
    span.set_attribute(
        "ratekeeper.costs",
        Value::Array(Array::I64(
            checks
                .iter()
                .map(|check| i64::try_from(check.cost).unwrap_or(i64::MAX))
                .collect(),
        )),
    );
    span
}

/// The span the caller is in, to carry into a task it spawns; a disabled
/// span, without asking the subscriber, when traces are not exported.
pub(crate) fn current_span() -> Span {
    if super::is_exporting() {
        Span::current()
    } else {
        Span::none()
    }
}

/// Records what `verdict` decided on `span` (nothing for a disabled span).
pub(crate) fn record_verdict(span: &Span, verdict: &Result<Verdict, StoreError>) {
    if span.is_disabled() {
        return;
    }
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(error) => {
            span.set_attribute("ratekeeper.decision", "error");
            // The error and its causes, as the logs give them.
            span.set_status(Status::error(crate::error_chain::error_chain(error)));
            return;
        }
    };
    let decision = if verdict.is_allowed() {
        "allowed"
    } else {
        "denied"
    };
    span.set_attribute("ratekeeper.decision", decision);
    let names = |shadow: bool, pick: fn(&crate::engine::LimitResult) -> bool| {
        strings(
            verdict
                .results
                .iter()
                .filter(move |result| result.check.limit.is_shadow() == shadow && pick(result))
                .map(|result| result.check.limit.name()),
        )
    };
    span.set_attribute(
        "ratekeeper.denied_by",
        names(false, crate::engine::LimitResult::refused),
    );
    span.set_attribute(
        "ratekeeper.shadow_denied_by",
        names(true, crate::engine::LimitResult::refused),
    );
    let saturated = strings(
        verdict
            .results
            .iter()
            .filter(|result| result.saturated())
            .map(|result| result.check.limit.name()),
    );
    span.set_attribute("ratekeeper.saturated", saturated);
}

/// `names` as a string array attribute.
fn strings<'a>(names: impl Iterator<Item = &'a str>) -> Value {
    Value::Array(Array::String(
        names
            .map(|name| StringValue::from(name.to_owned()))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_exporter_the_span_is_disabled() {
        // No test of this crate starts the exporter (the binary's tests
        // do, in their own processes).
        assert!(!super::super::is_exporting());
        let span = decision_span("memory", &[]);
        assert!(span.is_disabled());
        assert!(span.id().is_none());
        record_verdict(&span, &Ok(Verdict::default()));
    }
}
