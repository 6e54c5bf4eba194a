//! An HTTP request (the JSON API's method, path and key parts, or the
//! request nginx is about to serve) planned once: the limits it names, or
//! those whose `match` fits its method and path, each under its key.

use std::sync::Arc;

use http::Method;

use super::{planned_key, MissingPart, PlanError};
use crate::engine::{ActiveLimit, DecisionDoor, Engine, KeySource, LimitCheck, LimitSet};

/// An HTTP request, as a door received it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HttpRequest<'a> {
    /// The door asking, for the count of requests no limit applied to.
    pub door: DecisionDoor,
    /// The method, when the door knows it (the JSON API's is optional).
    pub method: Option<&'a Method>,
    /// The path, without the query, when the door knows it.
    pub path: Option<&'a str>,
    /// The limits the request names, instead of those its method and path
    /// match.
    pub names: Option<&'a [String]>,
    /// What the request costs under each limit.
    pub cost: u64,
    /// What a key part the request cannot give becomes.
    pub missing: MissingPart,
}

impl HttpRequest<'_> {
    /// The request in words, for the log of requests no limit applied to.
    fn describe(&self) -> String {
        describe(self.method, self.path)
    }
}

/// A method and path in words (`GET /x`), for the log of requests no limit
/// applied to.
fn describe(method: Option<&Method>, path: Option<&str>) -> String {
    let method = method.map_or("(no method)", Method::as_str);
    format!("{method} {}", path.unwrap_or("(no path)"))
}

impl Engine {
    /// Plans `request`: the limits it names (each must exist), or every
    /// limit whose `match` fits its method and path (a condition on a
    /// method or path the request does not give does not hold), each
    /// keyed from what `source` gives for that limit. A request no limit
    /// applies to is counted as unmatched.
    ///
    /// `source` is asked once per limit, so that a door may key each limit
    /// by its own rules (nginx's original peer depends on the limit's
    /// trusted proxies) and watch what the limit ignores.
    pub(crate) fn plan_http<S: KeySource>(
        &self,
        limits: &LimitSet,
        request: &HttpRequest<'_>,
        mut source: impl FnMut(&ActiveLimit) -> S,
    ) -> Result<Vec<LimitCheck>, PlanError> {
        // The check of `limit`, under its key's plan's numbers; none when
        // that plan is unlimited.
        let mut key = |limit: &Arc<ActiveLimit>| -> Result<Option<LimitCheck>, PlanError> {
            let source = source(limit);
            let Some(chosen) = self.plan_limit(limit, &source) else {
                return Ok(None);
            };
            let key = planned_key(limit, limit.key_parts(), source, request.missing)?;
            Ok(Some(LimitCheck::new(chosen, key, request.cost)))
        };
        if let Some(names) = request.names {
            let mut checks = Vec::with_capacity(names.len());
            for name in names {
                let limit = limits
                    .get(name)
                    .ok_or_else(|| PlanError::UnknownLimit(name.clone()))?;
                checks.extend(key(limit)?);
            }
            return Ok(checks);
        }
        let mut matched = false;
        let mut checks = Vec::new();
        for limit in limits.for_http_request(request.method, request.path) {
            matched = true;
            checks.extend(key(limit)?);
        }
        if !matched {
            self.record_unmatched(request.door, limits, "", || request.describe());
        }
        Ok(checks)
    }

    /// Notes an HTTP request that a door decides by other means (the
    /// proxy's tower layer): asks `watch` of each limit that applies to
    /// it, and counts the request as unmatched when none does.
    pub(crate) fn observe_http(
        &self,
        limits: &LimitSet,
        door: DecisionDoor,
        method: &Method,
        path: &str,
        mut watch: impl FnMut(&ActiveLimit),
    ) {
        let mut matched = false;
        for limit in limits.for_http_request(Some(method), Some(path)) {
            matched = true;
            watch(limit);
        }
        // A request only a cap on requests in flight applies to is
        // limited too.
        let capped = || {
            limits
                .in_flight_for_http(Some(method), Some(path))
                .next()
                .is_some()
        };
        if !matched && !capped() {
            self.record_unmatched(door, limits, "", || describe(Some(method), Some(path)));
        }
    }
}
