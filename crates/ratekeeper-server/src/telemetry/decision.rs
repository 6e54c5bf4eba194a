//! The span of one decision, and what it says of the verdict.

use opentelemetry::trace::Status;
use opentelemetry::{Array, StringValue, Value};
use ratekeeper::store::StoreError;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// One limit's part in a decided request, as its span tells it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LimitTrace<'a> {
    /// The limit's name.
    pub(crate) name: &'a str,
    /// Whether it only reports (shadow mode).
    pub(crate) shadow: bool,
    /// Whether it refused the request.
    pub(crate) refused: bool,
    /// Whether its store had no room for the key.
    pub(crate) saturated: bool,
}

/// What a decision decided, for its span: whether the request passed, and
/// each limit's part (iterated only when the span records).
#[derive(Clone, Debug)]
pub(crate) struct Decided<I> {
    /// Whether the request may proceed.
    pub(crate) allowed: bool,
    /// Each limit's part, in the order checked.
    pub(crate) limits: I,
}

/// The span of a decision with the store `store` on `checks` (each
/// limit's name and what the request costs under it), a child of the
/// caller's span when the request carried one; a disabled span (made
/// without allocating, `checks` unread) when traces are not exported.
pub(crate) fn decision_span<'a, I>(store: &'static str, checks: I) -> Span
where
    I: Iterator<Item = (&'a str, u64)> + Clone,
{
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
        strings(checks.clone().map(|(name, _)| name)),
    );
    span.set_attribute(
        "ratekeeper.costs",
        Value::Array(Array::I64(
            checks
                .map(|(_, cost)| i64::try_from(cost).unwrap_or(i64::MAX))
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

/// Records what was decided on `span`, or that the store failed (nothing
/// for a disabled span, whose `decided` is not read).
pub(crate) fn record_verdict<'a, I>(span: &Span, decided: Result<Decided<I>, &StoreError>)
where
    I: Iterator<Item = LimitTrace<'a>> + Clone,
{
    if span.is_disabled() {
        return;
    }
    let decided = match decided {
        Ok(decided) => decided,
        Err(error) => {
            span.set_attribute("ratekeeper.decision", "error");
            // The error and its causes, as the logs give them.
            span.set_status(Status::error(crate::error_chain::error_chain(error)));
            return;
        }
    };
    let decision = if decided.allowed { "allowed" } else { "denied" };
    span.set_attribute("ratekeeper.decision", decision);
    let names = |pick: fn(&LimitTrace<'_>) -> bool| {
        strings(
            decided
                .limits
                .clone()
                .filter(move |limit| pick(limit))
                .map(|limit| limit.name),
        )
    };
    span.set_attribute(
        "ratekeeper.denied_by",
        names(|limit| !limit.shadow && limit.refused),
    );
    span.set_attribute(
        "ratekeeper.shadow_denied_by",
        names(|limit| limit.shadow && limit.refused),
    );
    span.set_attribute("ratekeeper.saturated", names(|limit| limit.saturated));
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
        let span = decision_span("memory", [("all", 1)].into_iter());
        assert!(span.is_disabled());
        assert!(span.id().is_none());
        let limits = [LimitTrace {
            name: "all",
            shadow: false,
            refused: false,
            saturated: false,
        }];
        record_verdict(
            &span,
            Ok(Decided {
                allowed: true,
                limits: limits.into_iter(),
            }),
        );
    }
}
