//! Rate-limit headers, checked against the Structured Fields grammar (RFC
//! 8941) with an independent parser.

use std::time::Duration;

use http::HeaderMap;
use proptest::prelude::*;
use ratekeeper::{Decision, RetryAfter};
use ratekeeper_tower::headers::{
    insert_headers, insert_retry_after, ratelimit_policy_value, ratelimit_value, retry_after_secs,
    HeaderStyle, PolicyReport, ResetStyle,
};
use sfv::{BareItem, ListEntry, Parser};

/// A parsed list item: its string and its parameters as text.
fn items(value: &str) -> Vec<(String, Vec<(String, String)>)> {
    let list = Parser::parse_list(value.as_bytes())
        .unwrap_or_else(|e| panic!("{value:?} is not an sf-list: {e}"));
    list.into_iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else {
                panic!("inner list in {value:?}")
            };
            let BareItem::String(name) = item.bare_item else {
                panic!("not a string in {value:?}")
            };
            let params = item
                .params
                .into_iter()
                .map(|(key, value)| {
                    let text = match value {
                        BareItem::Integer(n) => n.to_string(),
                        BareItem::ByteSeq(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                        other => panic!("unexpected {other:?}"),
                    };
                    (key, text)
                })
                .collect();
            (name, params)
        })
        .collect()
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_draft_fields() {
    let per_ip = Decision::allowed(100, 42, Duration::from_millis(16_200));
    let global = Decision::allowed(1_000, 900, Duration::from_secs(5));
    let policies = [
        PolicyReport {
            name: "per-ip",
            window: Duration::from_secs(60),
            decision: &per_ip,
            partition_key: None,
        },
        PolicyReport {
            name: "global",
            window: Duration::from_millis(500),
            decision: &global,
            partition_key: Some(b"ip:192.0.2.1"),
        },
    ];
    let policy = ratelimit_policy_value(&policies);
    assert_eq!(
        policy,
        r#""per-ip";q=100;w=60, "global";q=1000;w=1;pk=:aXA6MTkyLjAuMi4x:"#
    );
    assert_eq!(
        items(&policy),
        [
            ("per-ip".to_string(), params(&[("q", "100"), ("w", "60")])),
            (
                "global".to_string(),
                params(&[("q", "1000"), ("w", "1"), ("pk", "ip:192.0.2.1")])
            ),
        ]
    );
    let ratelimit = ratelimit_value(&policies[0]);
    assert_eq!(ratelimit, r#""per-ip";r=42;t=17"#, "t rounds up");
    assert_eq!(
        items(&ratelimit),
        [("per-ip".to_string(), params(&[("r", "42"), ("t", "17")]))]
    );
}

#[test]
fn several_policies_report_the_tightest() {
    let loose = Decision::allowed(100, 90, Duration::from_secs(6));
    let tight = Decision::allowed(10, 1, Duration::from_secs(50));
    let policies = [
        PolicyReport {
            name: "loose",
            window: Duration::from_secs(60),
            decision: &loose,
            partition_key: None,
        },
        PolicyReport {
            name: "tight",
            window: Duration::from_secs(60),
            decision: &tight,
            partition_key: None,
        },
    ];
    let mut headers = HeaderMap::new();
    insert_headers(
        &mut headers,
        HeaderStyle::Both,
        ResetStyle::DeltaSeconds,
        &policies,
    );
    assert_eq!(headers["ratelimit"], r#""tight";r=1;t=50"#);
    assert_eq!(
        items(headers["ratelimit-policy"].to_str().unwrap()).len(),
        2
    );
    assert_eq!(headers["x-ratelimit-limit"], "10");
    assert_eq!(headers["x-ratelimit-remaining"], "1");
    assert_eq!(headers["x-ratelimit-reset"], "50");

    let mut unix = HeaderMap::new();
    insert_headers(
        &mut unix,
        HeaderStyle::Legacy,
        ResetStyle::UnixSeconds,
        &policies,
    );
    let reset: u64 = unix["x-ratelimit-reset"].to_str().unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!((now + 50..=now + 52).contains(&reset), "{reset} vs {now}");
    assert!(unix.get("ratelimit").is_none());

    let mut none = HeaderMap::new();
    insert_headers(
        &mut none,
        HeaderStyle::None,
        ResetStyle::DeltaSeconds,
        &policies,
    );
    assert!(none.is_empty());
}

#[test]
fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
    let secs = |ms| retry_after_secs(RetryAfter::After(Duration::from_millis(ms)));
    assert_eq!(secs(480), Some(1));
    assert_eq!(secs(1), Some(1));
    assert_eq!(secs(1_000), Some(1));
    assert_eq!(secs(1_001), Some(2));
    assert_eq!(secs(0), None, "allowed: no Retry-After");
    assert_eq!(retry_after_secs(RetryAfter::Never), None);
    let mut headers = HeaderMap::new();
    insert_retry_after(
        &mut headers,
        RetryAfter::After(Duration::from_millis(29_001)),
    );
    assert_eq!(headers["retry-after"], "30");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Whatever the numbers, name and key, the fields parse as sf-lists and
    /// carry the numbers (clamped to the 15 digits sf-integers allow).
    #[test]
    fn any_report_is_a_valid_structured_field(
        name in "[!#-\\[\\]-~]{1,64}",
        limit in any::<u64>(),
        remaining in any::<u64>(),
        reset in any::<u64>(),
        window in any::<u64>(),
        key in proptest::option::of(any::<Vec<u8>>()),
    ) {
        let decision = Decision::allowed(limit, remaining, Duration::from_nanos(reset));
        let report = PolicyReport { name: &name, window: Duration::from_nanos(window), decision: &decision, partition_key: key.as_deref() };
        let policy = items(&ratelimit_policy_value(&[report]));
        prop_assert_eq!(&policy[0].0, &name);
        prop_assert_eq!(&policy[0].1[0], &("q".to_string(), limit.min(999_999_999_999_999).to_string()));
        let ratelimit = items(&ratelimit_value(&report));
        prop_assert_eq!(&ratelimit[0].1[0], &("r".to_string(), remaining.min(999_999_999_999_999).to_string()));
        let mut headers = HeaderMap::new();
        insert_headers(&mut headers, HeaderStyle::Both, ResetStyle::UnixSeconds, &[report]);
        prop_assert_eq!(headers.len(), 5);
    }

    /// Any name at all, quotes, backslashes, spaces and non-ASCII included,
    /// gives valid fields naming it with what a Structured Fields string
    /// cannot hold left out.
    #[test]
    fn any_name_is_escaped_or_dropped_into_a_valid_string(name in "\\PC{0,24}") {
        let decision = Decision::allowed(10, 3, Duration::from_secs(5));
        let report = PolicyReport { name: &name, window: Duration::from_secs(60), decision: &decision, partition_key: None };
        let printable: String = name.chars().filter(|c| matches!(c, ' '..='~')).collect();
        let ratelimit = items(&ratelimit_value(&report));
        prop_assert_eq!(&ratelimit[0].0, &printable);
        let policy = items(&ratelimit_policy_value(&[report]));
        prop_assert_eq!(&policy[0].0, &printable);
    }
}
