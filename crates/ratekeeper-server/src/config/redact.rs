//! Store URLs with their secrets hidden, for everything that prints one:
//! `ratekeeper check`, errors, logs and `Debug` output.

/// What a hidden secret reads as.
const HIDDEN: &str = "***";

/// The query keys whose values are passwords (`redis+unix:///PATH?pass=...`).
const SECRET_KEYS: [&str; 2] = ["pass", "password"];

/// `url` with its password and any `pass=`/`password=` query value replaced
/// by `***`; the scheme, user name, host, port and path stay readable.
///
/// The user information ends at the last `@` after the scheme (unless the
/// URL has no host, as in `redis+unix:///PATH`), not at the first `/`, `?`
/// or `#`: a password holding one of those (base64 holds `/`) is hidden
/// too, at the cost of hiding more of the rare URL whose path or query
/// holds an `@`. Once a secret query key is seen, the rest of the query is
/// hidden, since an unencoded `&` or `#` may belong to the secret. Any text
/// is accepted; text without `://` is read as starting at the host part.
///
/// ```
/// use ratekeeper_server::config::redact_url;
///
/// assert_eq!(
///     redact_url("redis://default:S3cret@cache:6379/0"),
///     "redis://default:***@cache:6379/0"
/// );
/// assert_eq!(redact_url("redis://cache:6379"), "redis://cache:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    // A scheme is a letter, then letters, digits, `+`, `-` or `.` (RFC 3986):
    // a `://` after anything else belongs to the user information, as in a
    // password `a://b` of a URL written without its scheme.
    let is_scheme = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let (scheme, mut rest) = match url.find("://") {
        Some(at) if is_scheme(&url[..at]) => url.split_at(at + 3),
        _ => ("", url),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    if !rest.starts_with('/') {
        if let Some(at) = rest.rfind('@') {
            let userinfo = &rest[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..=colon]);
                    out.push_str(HIDDEN);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            rest = &rest[at + 1..];
        }
    }
    push_without_query_secrets(&mut out, rest);
    out
}

/// The URLs of a cluster, redacted, separated by spaces.
pub(crate) fn redact_urls(urls: &[String]) -> String {
    let redacted: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
    redacted.join(" ")
}

/// Appends `rest` (a host part onwards) with the values of secret query
/// keys hidden.
fn push_without_query_secrets(out: &mut String, rest: &str) {
    let Some(question) = rest.find('?') else {
        out.push_str(rest);
        return;
    };
    let (path, query) = rest.split_at(question + 1);
    out.push_str(path);
    let mut start = 0;
    loop {
        let end = query[start..]
            .find('&')
            .map_or(query.len(), |at| start + at);
        let pair = &query[start..end];
        if let Some((key, _)) = pair.split_once('=') {
            if SECRET_KEYS
                .iter()
                .any(|secret| key.eq_ignore_ascii_case(secret))
            {
                out.push_str(&query[..start + key.len() + 1]);
                out.push_str(HIDDEN);
                return;
            }
        }
        if end == query.len() {
            out.push_str(query);
            return;
        }
        start = end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_password_is_hidden_and_the_rest_kept() {
        assert_eq!(
            redact_url("redis://default:S3cret@host:6379/0"),
            "redis://default:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:S3cret@host"), "redis://:***@host");
        assert_eq!(
            redact_url("rediss://user:S3cret@10.0.0.1:6380"),
            "rediss://user:***@10.0.0.1:6380"
        );
    }

    #[test]
    fn a_url_without_credentials_is_unchanged() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://host:6379/2",
            "redis://user@host:6379",
            "rediss://[::1]:6380/0?protocol=resp3",
            "redis+unix:///tmp/redis.sock?db=1",
            "",
            "not a url",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn a_password_holding_at_colon_or_slash_is_fully_hidden() {
        assert_eq!(
            redact_url("redis://default:p@ss:w@rd@host:6379"),
            "redis://default:***@host:6379"
        );
        assert_eq!(
            redact_url("redis://u:ab/c+d=@host/0"),
            "redis://u:***@host/0"
        );
        assert_eq!(redact_url("redis://u:a?b#c@host"), "redis://u:***@host");
    }

    #[test]
    fn a_password_in_the_query_is_hidden() {
        assert_eq!(
            redact_url("redis+unix:///tmp/redis.sock?db=1&pass=S3cret"),
            "redis+unix:///tmp/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?user=u&PASSWORD=a&b@c"),
            "redis+unix:///tmp/r.sock?user=u&PASSWORD=***"
        );
    }

    #[test]
    fn text_without_a_scheme_is_read_from_the_host_part() {
        assert_eq!(redact_url("default:S3cret@host"), "default:***@host");
    }

    #[test]
    fn cluster_urls_are_each_redacted() {
        let urls = [
            "redis://:a@n1:7000".to_owned(),
            "redis://n2:7001".to_owned(),
        ];
        assert_eq!(redact_urls(&urls), "redis://:***@n1:7000 redis://n2:7001");
    }

    #[test]
    fn a_scheme_separator_in_the_password_of_a_url_without_scheme_is_hidden() {
        // The case proptest found: `://` inside the password, no scheme.
        assert_eq!(redact_url(":SECRET://@a"), ":***@a");
        assert_eq!(redact_url("user:p://w@host:6379"), "user:***@host:6379");
        assert_eq!(redact_url("redis://u:p://w@host"), "redis://u:***@host");
    }

    proptest! {
        #[test]
        fn the_password_never_shows(
            scheme in prop::sample::select(vec!["redis://", "rediss://", ""]),
            user in "[a-z]{0,8}",
            password in "[A-Za-z0-9@:/?#&=+%!-]{1,24}",
            host in "[a-z0-9.-]{1,16}",
            tail in prop::sample::select(vec!["", ":6379", ":6379/0", "/3?protocol=resp3"]),
        ) {
            // A marker no host or tail can hold makes "never shows" exact.
            let password = format!("SECRET{password}");
            let url = format!("{scheme}{user}:{password}@{host}{tail}");
            let redacted = redact_url(&url);
            prop_assert!(!redacted.contains("SECRET"), "{}", redacted);
            let expected = format!("{scheme}{user}:***@{host}{tail}");
            prop_assert_eq!(redacted, expected);
        }

        #[test]
        fn a_query_password_never_shows(
            path in "/[a-z/]{1,16}",
            before in "([a-z]{1,4}=[a-z0-9]{0,4}&){0,3}",
            password in "[A-Za-z0-9@:/?#&=+%!-]{1,24}",
        ) {
            let url = format!("redis+unix://{path}?{before}pass=SECRET{password}");
            prop_assert!(!redact_url(&url).contains("SECRET"));
        }

        #[test]
        fn any_text_is_accepted(text in any::<String>()) {
            let redacted = redact_url(&text);
            if !text.contains(['@', '?']) {
                prop_assert_eq!(redacted, text);
            }
        }

        #[test]
        fn urls_without_secrets_are_unchanged(
            scheme in prop::sample::select(vec!["redis://", "rediss://"]),
            user in "([a-z]{1,8}@)?",
            host in "[a-z0-9.-]{1,16}",
            tail in prop::sample::select(vec!["", ":6379", ":6379/0", "/3?protocol=resp3"]),
        ) {
            let url = format!("{scheme}{user}{host}{tail}");
            prop_assert_eq!(redact_url(&url), url);
        }
    }
}
