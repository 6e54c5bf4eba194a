//! Rate-limit response headers: the IETF draft's `RateLimit-Policy` and
//! `RateLimit` fields, the legacy `X-RateLimit-*` ones, and `Retry-After`.
//!
//! The draft fields are Structured Fields lists (RFC 8941):
//!
//! ```text
//! RateLimit-Policy: "per-ip";q=100;w=60, "global";q=1000;w=60
//! RateLimit: "per-ip";r=42;t=17
//! ```
//!
//! `q` is the quota, `w` the window in whole seconds, `r` what remains and
//! `t` a number of seconds ([`reset_secs`]): on an allowed request, until
//! the quota is whole again; on a refused one, until the same request can
//! succeed, which is the moment `Retry-After` names (the draft: when a
//! response has both, they should reference the same point in time).
//! `pk`, when a partition key is given, is a byte sequence (`:base64:`)
//! telling clients that share a quota which one this is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;
use ratekeeper::{Decision, RetryAfter};

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateKeeper-Saturated`: the limits whose store had no room for the
/// request's key (an in-memory table at its `max_keys`), as a Structured
/// Fields list of strings (`"per-ip", "per-user"`). Such a limit counted
/// nothing: it refused the request, or let it through uncounted where it
/// was told to. Shadow limits are left out.
pub const X_RATEKEEPER_SATURATED: HeaderName = HeaderName::from_static("x-ratekeeper-saturated");
/// `X-RateKeeper-Store`: on an answer the store did not make, how it was
/// made while the store failed: `fail-open` (allowed, nothing counted) or
/// `fallback` (decided by this process's in-memory fallback); see
/// [`AnsweredBy`](ratekeeper::store::AnsweredBy). Absent when the store
/// decided.
pub const X_RATEKEEPER_STORE: HeaderName = HeaderName::from_static("x-ratekeeper-store");
/// The value of [`X_RATEKEEPER_SATURATED`] for the limits named `names`;
/// `None` when there are none.
pub fn saturated_value<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<HeaderValue> {
    let mut value = String::new();
    for name in names {
        if !value.is_empty() {
            value.push_str(", ");
        }
        // Limit names have no quotes or backslashes to escape.
        value.push('"');
        value.push_str(name);
        value.push('"');
    }
    // Limit names are printable ASCII, so this cannot fail; leaving the
    // header out beats a panic if it somehow did.
    (!value.is_empty())
        .then(|| HeaderValue::try_from(value).ok())
        .flatten()
}
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which rate-limit headers responses carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HeaderStyle {
    /// The IETF draft's `RateLimit-Policy` and `RateLimit`.
    #[default]
    Draft,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`, as GitHub and
    /// express-rate-limit send them.
    Legacy,
    /// Both.
    Both,
    /// None (a 429 still carries `Retry-After`).
    None,
}

/// How `X-RateLimit-Reset` tells the reset time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResetStyle {
    /// Unix time in seconds, as GitHub sends it.
    #[default]
    UnixSeconds,
    /// Seconds from now.
    DeltaSeconds,
}

/// One limit's part in a response: its name, numbers and decision.
#[derive(Clone, Copy, Debug)]
pub struct PolicyReport<'a> {
    /// The policy's name (a [`ratekeeper::Limit`] name: printable ASCII
    /// without quotes or backslashes).
    pub name: &'a str,
    /// The time over which the quota is granted.
    pub window: Duration,
    /// The decision for this request.
    pub decision: &'a Decision,
    /// The partition key (`pk`), when clients should know which quota
    /// they share.
    pub partition_key: Option<&'a [u8]>,
}

/// Whole seconds, rounded up.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Appends a Structured Fields string: printable ASCII, quotes and
/// backslashes escaped, anything else dropped (never an invalid field).
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    // Names are nearly always plain: copied whole, not char by char.
    if is_plain_sf_string(s) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {}
        }
    }
    out.push('"');
}

/// Whether `s` goes into a Structured Fields string as it is: printable
/// ASCII without quotes or backslashes, as every [`ratekeeper::Limit`]
/// name is.
fn is_plain_sf_string(s: &str) -> bool {
    s.bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
}

fn push_partition_key(out: &mut String, key: Option<&[u8]>) {
    if let Some(key) = key {
        out.push_str(";pk=:");
        out.push_str(&base64::engine::general_purpose::STANDARD.encode(key));
        out.push(':');
    }
}

/// The `RateLimit-Policy` value listing every policy: `"name";q=..;w=..`.
pub fn ratelimit_policy_value(policies: &[PolicyReport<'_>]) -> String {
    let mut out = String::with_capacity(policies.len() * 48);
    for (index, policy) in policies.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, policy.name);
        out.push_str(";q=");
        push_sf_integer(&mut out, policy.decision.limit());
        out.push_str(";w=");
        push_sf_integer(&mut out, ceil_secs(policy.window).max(1));
        push_partition_key(&mut out, policy.partition_key);
    }
    out
}

/// The seconds a response reports until `decision`'s quota resets (`t` of
/// `RateLimit`, and `X-RateLimit-Reset`): for an allowed request, until the
/// quota is whole again; for a refused one, its [`retry_after_secs`], so
/// that both fields name the moment the same request can succeed (a token
/// bucket of 5 a minute, empty, refuses with 12 s, not the 60 s until it
/// is full). A request that can never succeed reports the time until the
/// quota is whole.
pub fn reset_secs(decision: &Decision) -> u64 {
    match decision.is_allowed() {
        true => ceil_secs(decision.reset()),
        false => {
            retry_after_secs(decision.retry_after()).unwrap_or_else(|| ceil_secs(decision.reset()))
        }
    }
}

/// `decision` as a response reports it for a limit in shadow mode, which
/// refuses nothing: allowed, with what it has left and the time until it
/// is whole, so that it is never taken for the limit that refused (whose
/// wait `Retry-After` gives).
pub fn shadow_view(decision: &Decision) -> Decision {
    match decision.is_allowed() {
        true => *decision,
        false => Decision::allowed(decision.limit(), decision.remaining(), decision.reset()),
    }
}

/// The `RateLimit` value for one policy: `"name";r=..;t=..`.
pub fn ratelimit_value(policy: &PolicyReport<'_>) -> String {
    let mut out = String::with_capacity(policy.name.len() + 32);
    push_sf_string(&mut out, policy.name);
    out.push_str(";r=");
    push_sf_integer(&mut out, policy.decision.remaining());
    out.push_str(";t=");
    push_sf_integer(&mut out, reset_secs(policy.decision));
    push_partition_key(&mut out, policy.partition_key);
    out
}

/// The `RateLimit` value of `policy`, as [`ratelimit_value`] writes it,
/// ready to send. The usual value (a plain name, no partition key) is
/// written on the stack and copied once into the header value; formatting
/// a `String` and handing it over cost ~40% more instructions per response.
fn ratelimit_header(policy: &PolicyReport<'_>) -> Option<HeaderValue> {
    if policy.partition_key.is_none() && is_plain_sf_string(policy.name) {
        let (mut remaining, mut reset) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut text = ShortText::default();
        let written = text.push(b"\"")
            && text.push(policy.name.as_bytes())
            && text.push(b"\";r=")
            && text.push(sf_integer(&mut remaining, policy.decision.remaining()))
            && text.push(b";t=")
            && text.push(sf_integer(&mut reset, reset_secs(policy.decision)));
        if written {
            return HeaderValue::from_bytes(text.as_bytes()).ok();
        }
    }
    HeaderValue::try_from(ratelimit_value(policy)).ok()
}

/// A short text on the stack: a `RateLimit` value with any name up to
/// [`ratekeeper::store::MAX_LIMIT_NAME`] bytes and the largest numbers fits.
struct ShortText {
    bytes: [u8; 128],
    len: usize,
}

impl Default for ShortText {
    fn default() -> Self {
        ShortText {
            bytes: [0; 128],
            len: 0,
        }
    }
}

impl ShortText {
    /// Appends `part`; `false`, leaving the text as it was, if it does
    /// not fit.
    #[inline]
    fn push(&mut self, part: &[u8]) -> bool {
        let end = self.len + part.len();
        match self.bytes.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(part);
                self.len = end;
                true
            }
            None => false,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// `n` as a Structured Fields integer, in `buffer`.
fn sf_integer(buffer: &mut itoa::Buffer, n: u64) -> &[u8] {
    buffer.format(n.min(999_999_999_999_999)).as_bytes()
}

/// Appends a Structured Fields integer, which has at most 15 digits:
/// clamped.
fn push_sf_integer(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n.min(999_999_999_999_999)));
}

/// `Retry-After` in whole seconds, rounded up and at least 1, for a denied
/// decision; `None` when allowed or never (no wait helps).
pub fn retry_after_secs(retry: RetryAfter) -> Option<u64> {
    match retry {
        RetryAfter::After(wait) if wait > Duration::ZERO => Some(ceil_secs(wait).max(1)),
        RetryAfter::After(_) | RetryAfter::Never => None,
    }
}

/// The policy reported in `RateLimit` when several apply: of those that
/// refused, the one with the longest wait (the one `Retry-After` names, as
/// a refusal's wait is the longest of its limits'); when none refused, the
/// one with the least remaining, and of those the longest reset.
pub fn tightest<'a, 'b>(policies: &'b [PolicyReport<'a>]) -> Option<&'b PolicyReport<'a>> {
    policies.iter().min_by(|a, b| {
        let (a, b) = (a.decision, b.decision);
        a.is_allowed()
            .cmp(&b.is_allowed())
            .then(b.retry_after().cmp(&a.retry_after()))
            .then(a.remaining().cmp(&b.remaining()))
            .then(b.reset().cmp(&a.reset()))
    })
}

/// Adds the headers of `style` for `policies` to `headers`; `RateLimit`
/// and the legacy fields report the tightest policy.
pub fn insert_headers(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    reset_style: ResetStyle,
    policies: &[PolicyReport<'_>],
) {
    insert_headers_with_policy(headers, style, reset_style, policies, None);
}

/// [`insert_headers`], with the `RateLimit-Policy` value already made:
/// it depends only on the limits (names, quotas, windows), so a layer whose
/// limits are fixed makes it once ([`ratelimit_policy_value`]) and clones
/// it into every response, which costs a reference count, not a format.
/// `None` formats it from `policies`.
pub fn insert_headers_with_policy(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    reset_style: ResetStyle,
    policies: &[PolicyReport<'_>],
    policy_value: Option<&HeaderValue>,
) {
    write_headers(
        &mut |name, value| {
            headers.insert(name, value);
        },
        style,
        reset_style,
        policies,
        policy_value,
    );
}

/// [`insert_headers_with_policy`], handing each header to `put` instead of
/// a map: the layer keeps them beside the inner service's future and adds
/// them to its response, with no map of its own to fill and drop.
pub(crate) fn write_headers(
    put: &mut dyn FnMut(HeaderName, HeaderValue),
    style: HeaderStyle,
    reset_style: ResetStyle,
    policies: &[PolicyReport<'_>],
    policy_value: Option<&HeaderValue>,
) {
    let Some(tightest) = tightest(policies) else {
        return;
    };
    if matches!(style, HeaderStyle::Draft | HeaderStyle::Both) {
        let policy = match policy_value {
            Some(value) => Some(value.clone()),
            None => HeaderValue::try_from(ratelimit_policy_value(policies)).ok(),
        };
        if let Some(policy) = policy {
            put(RATELIMIT_POLICY, policy);
        }
        // Every value built here is printable ASCII, so this cannot fail;
        // if it somehow did, leaving the header out beats a panic.
        if let Some(value) = ratelimit_header(tightest) {
            put(RATELIMIT, value);
        }
    }
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        let decision = tightest.decision;
        put(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit()));
        put(
            X_RATELIMIT_REMAINING,
            HeaderValue::from(decision.remaining()),
        );
        let reset = reset_secs(decision);
        let reset = match reset_style {
            ResetStyle::DeltaSeconds => reset,
            ResetStyle::UnixSeconds => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                ceil_secs(now).saturating_add(reset)
            }
        };
        put(X_RATELIMIT_RESET, HeaderValue::from(reset));
    }
}

/// Adds `Retry-After` for a denied request.
pub fn insert_retry_after(headers: &mut HeaderMap, retry: RetryAfter) {
    if let Some(secs) = retry_after_secs(retry) {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;
    use ratekeeper::Decision;

    use super::{ratelimit_header, ratelimit_value, HeaderValue, PolicyReport};

    fn report<'a>(name: &'a str, decision: &'a Decision, pk: Option<&'a [u8]>) -> PolicyReport<'a> {
        PolicyReport {
            name,
            window: Duration::from_secs(60),
            decision,
            partition_key: pk,
        }
    }

    #[test]
    fn the_stack_value_is_the_formatted_one() {
        let decision = Decision::allowed(100, 42, Duration::from_millis(16_001));
        let value = ratelimit_header(&report("per-ip", &decision, None)).unwrap();
        assert_eq!(value, r#""per-ip";r=42;t=17"#);
        // Past the stack buffer, with escapes, or with a partition key: the
        // formatted path, the same text.
        let long = "n".repeat(200);
        for (name, pk) in [
            (long.as_str(), None),
            (r#"a"b\c"#, None),
            ("per-ip", Some(&b"192.0.2.1"[..])),
        ] {
            let report = report(name, &decision, pk);
            assert_eq!(
                ratelimit_header(&report),
                HeaderValue::try_from(ratelimit_value(&report)).ok(),
                "{name:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn the_stack_value_matches_the_formatted_one_for_any_input(
            name in ".{0,140}",
            remaining in any::<u64>(),
            reset_nanos in any::<u64>(),
            pk in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..24)),
        ) {
            let decision = Decision::allowed(u64::MAX, remaining, Duration::from_nanos(reset_nanos));
            let report = report(&name, &decision, pk.as_deref());
            prop_assert_eq!(
                ratelimit_header(&report),
                HeaderValue::try_from(ratelimit_value(&report)).ok()
            );
        }
    }
}
