//! A decision's span (see `crate::telemetry`), told from the engine's
//! checks and verdict: telemetry takes plain data and names no engine type.

use ratekeeper::store::StoreError;
use tracing::Span;

use super::{LimitCheck, Verdict};
use crate::telemetry::{self, Decided, LimitTrace};

/// [`telemetry::decision_span`] of a decision on `checks` with the store
/// `store`: disabled, and `checks` unread, when traces are not exported.
pub(super) fn decision_span(store: &'static str, checks: &[LimitCheck]) -> Span {
    telemetry::decision_span(
        store,
        checks.iter().map(|check| (check.limit.name(), check.cost)),
    )
}

/// Records what `verdict` decided on `span` ([`telemetry::record_verdict`];
/// nothing for a disabled span).
pub(super) fn record_verdict(span: &Span, verdict: &Result<Verdict, StoreError>) {
    let decided = verdict.as_ref().map(|verdict| Decided {
        allowed: verdict.is_allowed(),
        limits: verdict.results.iter().map(|result| LimitTrace {
            name: result.check.limit.name(),
            shadow: result.check.limit.is_shadow(),
            refused: result.refused(),
            saturated: result.saturated(),
        }),
    });
    telemetry::record_verdict(span, decided);
}
