//! The service configuration: a full file, each invalid case with its exact
//! message, environment overrides, and the defaults.

use std::net::SocketAddr;
use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{policy::PolicyKind, store::FailureMode};
use ratekeeper_redis::Batching;
use ratekeeper_server::config::{
    Backend, ConfigWarning, KeyPart, Location, OnSaturated, Prefixes, RequestCaps, ValueMatch,
    DEFAULT_TOML,
};
use ratekeeper_server::{Config, ConfigError};
use ratekeeper_tower::client::{private_networks, ClientIp};

const FULL: &str = r#"[store]
kind = "redis"
url = "redis://127.0.0.1:6379"
prefix = "rk:"
timeout_ms = 250
max_keys = 5000
on_failure = "open"
fallback = true

[listen]
http = "0.0.0.0:8080"
grpc = "off"

[[limits]]
name = "per-ip"
rate = "100/minute"
policy = "gcra"
key = ["client_ip"]
trusted_proxies = ["10.0.0.0/8", "192.0.2.1"]

[[limits]]
name = "login"
rate = "5 per 30s"
policy = "sliding_window"
key = ["descriptor:remote_address", "route"]
shadow = true
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }, { key = "user", value = "adm*" }]
methods = ["post"]
path_prefix = "/api"

[[limits]]
name = "api-key"
rate = "10/s burst 20"
key = ["header:X-Api-Key"]
"#;

fn err(text: &str) -> String {
    match Config::from_toml_str(text, "ratekeeper.toml") {
        Ok(config) => panic!("accepted: {config:?}"),
        Err(error) => error.to_string(),
    }
}

fn err_env(text: &str, vars: &[(&str, &str)]) -> String {
    match Config::from_toml_str_with_env(text, "ratekeeper.toml", vars.iter().copied()) {
        Ok(config) => panic!("accepted: {config:?}"),
        Err(error) => error.to_string(),
    }
}

/// A file of one limit with `body` as its fields after `name`.
fn limit(body: &str) -> String {
    format!("[[limits]]\nname = \"a\"\n{body}")
}

#[test]
fn a_redis_store_takes_its_batching_and_a_cluster_refuses_it() {
    let redis = |fields: &str| {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n{fields}\n{}",
            limit("rate = \"1/s\"\nkey = [\"peer\"]")
        )
    };
    let batching = |fields: &str| match Config::from_toml_str(&redis(fields), "r.toml")
        .unwrap()
        .store
        .backend
    {
        Backend::Redis { batching, .. } => batching,
        other => panic!("{other:?}"),
    };
    assert_eq!(batching(""), Batching::DEFAULT);
    assert_eq!(
        batching("batch_in_flight = 2\nbatch_max_calls = 32"),
        Batching::new(2, 32)
    );
    assert_eq!(batching("batch_max_calls = 1"), Batching::OFF);
    for (fields, expected) in [
        (
            "batch_max_calls = 0",
            "batch_max_calls is 0, outside 1 to 1000",
        ),
        (
            "batch_max_calls = 1001",
            "batch_max_calls is 1001, outside 1 to 1000",
        ),
        (
            "batch_in_flight = 0",
            "batch_in_flight is 0, outside 1 to 1024",
        ),
    ] {
        let error = Config::from_toml_str(&redis(fields), "r.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{fields}: {error}");
        assert!(error.contains("r.toml:4"), "{fields}: {error}");
    }
    let cluster = format!(
        "[store]\nkind = \"redis-cluster\"\nurls = [\"redis://127.0.0.1:7000\"]\nbatch_in_flight = 2\n{}",
        limit("rate = \"1/s\"\nkey = [\"peer\"]")
    );
    let error = Config::from_toml_str(&cluster, "c.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("batch_in_flight applies only to the redis store (a cluster does not batch), not to a redis-cluster store"),
        "{error}"
    );
}

#[test]
fn leasing_is_off_by_default_and_takes_its_settings_on_the_shared_stores() {
    let store = |kind: &str, fields: &str| {
        let place = match kind {
            "sqlite" => "path = \"r.db\"",
            "redis" => "url = \"redis://127.0.0.1:6379\"",
            _ => "",
        };
        format!(
            "[store]\nkind = \"{kind}\"\n{place}\n{fields}\n{}",
            limit("rate = \"1/s\"\nkey = [\"peer\"]")
        )
    };
    let lease = |kind: &str, fields: &str| {
        Config::from_toml_str(&store(kind, fields), "r.toml")
            .unwrap()
            .store
            .lease
    };
    assert_eq!(lease("redis", ""), None);
    assert_eq!(
        lease("redis", "lease = false\nlease_max_chunk = 10000"),
        None
    );
    let on = lease(
        "sqlite",
        "lease = true\nlease_max_chunk = 500\nlease_chunk_ms = 50\nlease_lifetime_ms = 2000",
    )
    .expect("on");
    assert_eq!(on.max_chunk, 500);
    assert_eq!(on.chunk_for, std::time::Duration::from_millis(50));
    assert_eq!(on.lifetime, std::time::Duration::from_secs(2));
    let defaults = lease("redis", "lease = true").expect("on");
    assert_eq!(defaults.max_chunk, 10_000);
    assert_eq!(defaults.chunk_for, std::time::Duration::from_millis(100));
    assert_eq!(defaults.lifetime, std::time::Duration::from_secs(1));
    assert!(defaults.spend_while_down);
    let strict = lease("redis", "lease = true\nlease_spend_while_down = false").expect("on");
    assert!(!strict.spend_while_down);
    // The defaults spelled out on a memory store are taken; leasing is not.
    assert_eq!(
        lease(
            "memory",
            "lease = false\nlease_chunk_ms = 100\nlease_spend_while_down = true"
        ),
        None
    );
    for (kind, fields, expected) in [
        (
            "memory",
            "lease = true",
            "r.toml:4:9: store.lease: lease applies only to the sqlite and redis stores (leasing from a shared store), not to a memory store",
        ),
        (
            "memory",
            "lease_spend_while_down = false",
            "store.lease_spend_while_down: lease_spend_while_down applies only to the sqlite and redis stores",
        ),
        (
            "redis",
            "lease = true\nlease_max_chunk = 0",
            "store.lease_max_chunk: lease_max_chunk is 0, outside 1 to 1000000000",
        ),
        (
            "redis",
            "lease = true\nlease_lifetime_ms = 3600001",
            "store.lease_lifetime_ms: lease_lifetime_ms is 3600001, outside 1 to 3600000",
        ),
    ] {
        let error = Config::from_toml_str(&store(kind, fields), "r.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{fields}: {error}");
    }
}

#[test]
fn full_file() {
    let config = Config::from_toml_str(FULL, "ratekeeper.toml").unwrap();
    assert_eq!(
        config.store.backend,
        Backend::Redis {
            url: "redis://127.0.0.1:6379".to_owned(),
            prefix: "rk:".to_owned(),
            timeout: Duration::from_millis(250),
            batching: Batching::DEFAULT,
        }
    );
    assert_eq!(config.store.max_keys, 5000);
    assert_eq!(config.store.on_failure, FailureMode::Open);
    assert!(config.store.fallback);
    assert_eq!(
        config.listen.http,
        Some("0.0.0.0:8080".parse::<SocketAddr>().unwrap())
    );
    assert_eq!(config.listen.grpc, None);
    assert_eq!(config.listen.admin, Some("127.0.0.1:9090".parse().unwrap()));

    assert_eq!(config.limits.len(), 3);
    let per_ip = &config.limits[0];
    assert_eq!(per_ip.limit.name(), "per-ip");
    assert_eq!(per_ip.limit.policy().kind(), PolicyKind::Gcra);
    assert_eq!(per_ip.rate.to_string(), "100/minute");
    assert!(per_ip.matcher.is_any());
    assert!(!per_ip.shadow);

    let login = &config.limits[1];
    assert_eq!(login.limit.policy().kind(), PolicyKind::SlidingWindow);
    assert_eq!(
        login.key,
        vec![
            KeyPart::Descriptor("remote_address".to_owned()),
            KeyPart::Route
        ]
    );
    assert!(login.shadow);
    assert_eq!(login.matcher.domain.as_deref(), Some("edge"));
    let descriptors: Vec<(&str, &ValueMatch)> = login
        .matcher
        .descriptors
        .iter()
        .map(|d| (d.key.as_str(), &d.value))
        .collect();
    assert_eq!(
        descriptors,
        vec![
            ("remote_address", &ValueMatch::Any),
            ("path", &ValueMatch::Exact("/login".to_owned())),
            (
                "user",
                &ValueMatch::Glob(ratekeeper_server::config::Glob::new("adm*"))
            ),
        ]
    );
    assert_eq!(login.matcher.methods, vec![http::Method::POST]);
    assert_eq!(login.matcher.path_prefix.as_deref(), Some("/api"));

    let api = &config.limits[2];
    assert_eq!(api.limit.policy().kind(), PolicyKind::TokenBucket);
    assert_eq!((api.rate.amount(), api.rate.burst()), (10, 20));
    assert_eq!(
        api.key,
        vec![KeyPart::Header(http::HeaderName::from_static("x-api-key"))]
    );

    assert_eq!(
        config.explain(),
        "store: redis redis://127.0.0.1:6379 (prefix \"rk:\", timeout 250ms, 4 scripts in flight, up to 64 decisions each), max_keys 5000, on failure open, fallback on\n\
         listen: http 0.0.0.0:8080, grpc off, admin 127.0.0.1:9090\n\
         limit per-ip: gcra 100/minute, key client_ip, match every HTTP request\n\
         \x20 applies to HTTP requests: the JSON API by method and path, nginx auth_request, the proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)\n\
         \x20 client_ip: from X-Forwarded-For behind 10.0.0.0/8, 192.0.2.1/32 (the rightmost address not among them); any other peer is the client; IPv4 by address, IPv6 by /64\n\
         limit login: sliding_window 5/30s, key descriptor:remote_address + route, match domain edge, descriptors [remote_address, path=/login, user=adm*], methods POST, path /api* (shadow)\n\
         \x20 applies to no door: it names HTTP methods or a path prefix beside a domain or descriptors, and no request has both: make it two limits\n\
         limit api-key: token_bucket 10/second burst 20, key header:x-api-key, match every HTTP request\n\
         \x20 applies to HTTP requests: the JSON API by method and path, nginx auth_request, the proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)\n"
    );
}

#[test]
fn defaults_validate() {
    let parsed = Config::from_toml_str(DEFAULT_TOML, "defaults").unwrap();
    let config = Config::default();
    assert_eq!(config, parsed);
    assert_eq!(config.store.backend, Backend::Memory);
    assert_eq!(config.store.max_keys, 100_000);
    assert_eq!(config.listen.http, Some("127.0.0.1:8080".parse().unwrap()));
    assert_eq!(config.limits.len(), 1);
    assert_eq!(
        config.explain(),
        "store: memory, max_keys 100000\n\
         listen: http 127.0.0.1:8080, grpc 127.0.0.1:8081, admin 127.0.0.1:9090\n\
         limit per-client: gcra 100/minute, key client_ip, match every HTTP request\n\
         \x20 applies to HTTP requests: the JSON API by method and path, nginx auth_request, the proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)\n\
         \x20 client_ip: the socket peer (no trusted proxies: X-Forwarded-For is ignored, set trusted_proxies to believe it); IPv4 by address, IPv6 by /64\n"
    );
}

#[test]
fn minimal_file_takes_defaults() {
    let config =
        Config::from_toml_str(&limit("rate = \"1/s\"\nkey = [\"global\"]\n"), "x").unwrap();
    assert_eq!(config.store.backend, Backend::Memory);
    assert_eq!(config.listen, Default::default());
    assert_eq!(
        config.limits[0].limit.policy().kind(),
        PolicyKind::TokenBucket
    );
}

#[test]
fn syntax_error() {
    assert_eq!(
        err("[store]\nkind = \"memory\nmax_keys = 1\n"),
        "ratekeeper.toml:2:15: invalid basic string, expected `\"`"
    );
}

#[test]
fn unknown_fields() {
    assert_eq!(
        err("[store]\nkind = \"memory\"\nmax_key = 5\n"),
        "ratekeeper.toml:3:1: store.max_key: unknown field `max_key`, expected one of `kind`, `max_keys`, `on_failure`, `fallback`, `path`, `url`, `urls`, `sentinels`, `master_name`, `master_username`, `master_password`, `prefix`, `timeout_ms`, `start_wait_ms`, `batch_in_flight`, `batch_max_calls`, `lease`, `lease_max_chunk`, `lease_chunk_ms`, `lease_lifetime_ms`, `lease_spend_while_down`, `tls`"
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\"]\nshadows = true\n")),
        "ratekeeper.toml:5:1: limits[0].shadows: unknown field `shadows`, expected one of `name`, `rate`, `policy`, `max_in_flight`, `lease`, `key`, `trusted_proxies`, `trusted_hops`, `client_ip_from`, `ipv4_prefix`, `ipv6_prefix`, `shadow`, `on_saturated`, `allow_overrides`, `allow_refunds`, `allow_reports`, `count_refused`, `after_response`, `max_wait`, `block_for`, `block_max`, `block_forget`, `plan_from`, `plan_from_peers`, `plans`, `match`"
    );
    assert_eq!(
        err("[stores]\n"),
        "ratekeeper.toml:1:2: stores: unknown field `stores`, expected one of `store`, `listen`, `requests`, `limits`, `access`, `runtime`, `envoy`, `limitador`, `enforcement`"
    );
}

#[test]
fn wrong_types() {
    assert_eq!(
        err("[store]\nmax_keys = \"many\"\n"),
        "ratekeeper.toml:2:12: store.max_keys: invalid type: string \"many\", expected u64"
    );
}

#[test]
fn missing_fields() {
    assert_eq!(
        err("[[limits]]\nname = \"a\"\nkey = [\"peer\"]\n"),
        "ratekeeper.toml:1:1: limits[0]: missing field `rate` (such as \"100/minute\"); only policy = \"concurrency\" has none"
    );
    // No limits is a configuration too, with a warning.
    let config = Config::from_toml_str("[store]\nkind = \"memory\"\n", "ratekeeper.toml").unwrap();
    assert!(config.limits.is_empty());
    assert_eq!(config.warnings(), [ConfigWarning::NoLimits]);
}

#[test]
fn duplicate_names() {
    let text = format!(
        "{}\n{}",
        limit("rate = \"1/s\"\nkey = [\"peer\"]\n"),
        limit("rate = \"2/s\"\nkey = [\"peer\"]\n")
    );
    assert_eq!(
        err(&text),
        "ratekeeper.toml:7:8: limits[1].name: duplicate limit name \"a\"; the first is at ratekeeper.toml:2:8"
    );
}

#[test]
fn bad_names() {
    assert_eq!(
        err("[[limits]]\nname = \"a b\"\nrate = \"1/s\"\nkey = [\"peer\"]\n"),
        "ratekeeper.toml:2:8: limits[0].name: the limit name \"a b\" contains ' '; use letters, digits and punctuation other than quotes, backslashes, braces and colons"
    );
}

#[test]
fn bad_rates() {
    assert_eq!(
        err(&limit("rate = \"10/fortnight\"\nkey = [\"peer\"]\n")),
        "ratekeeper.toml:3:8: limits[0].rate: unknown time unit \"fortnight\" in rate; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")"
    );
    assert_eq!(
        err(&limit("rate = \"100 minute\"\nkey = [\"peer\"]\n")),
        "ratekeeper.toml:3:8: limits[0].rate: missing \"/\" or \"per\" between the amount and the period in rate; expected something like \"100/minute\" or \"5 per 30s\""
    );
}

#[test]
fn burst_on_a_window_policy() {
    assert_eq!(
        err(&limit("rate = \"10/s burst 20\"\npolicy = \"fixed_window\"\nkey = [\"peer\"]\n")),
        "ratekeeper.toml:3:8: limits[0].rate: the fixed_window policy takes no burst; give the limit per window instead"
    );
}

#[test]
fn unknown_policy() {
    assert_eq!(
        err(&limit("rate = \"10/s\"\npolicy = \"leaky\"\nkey = [\"peer\"]\n")),
        "ratekeeper.toml:4:10: limits[0].policy: unknown policy \"leaky\"; expected token_bucket, gcra, fixed_window, sliding_log or sliding_window; or concurrency, a cap on requests in flight"
    );
}

#[test]
fn bad_key_parts() {
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\", \"cookie\"]\n")),
        "ratekeeper.toml:4:16: limits[0].key[1]: unknown key part \"cookie\"; expected peer, client_ip, route, global, header:NAME or descriptor:KEY"
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = []\n")),
        "ratekeeper.toml:4:7: limits[0].key: the key must have at least one part, such as [\"client_ip\"] or [\"global\"]"
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"header:bad header\"]\n")),
        "ratekeeper.toml:4:8: limits[0].key[0]: invalid header name \"bad header\" in key part \"header:bad header\""
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"global\", \"peer\"]\n")),
        "ratekeeper.toml:4:7: limits[0].key: \"global\" is one key for every request and cannot be combined with other parts"
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\", \"peer\"]\n")),
        "ratekeeper.toml:4:16: limits[0].key[1]: the key part \"peer\" is given twice"
    );
}

#[test]
fn bad_cidrs() {
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"client_ip\"]\ntrusted_proxies = [\"10.0.0.0/33\"]\n")),
        "ratekeeper.toml:5:20: limits[0].trusted_proxies[0]: invalid network \"10.0.0.0/33\"; expected \"private\", a CIDR such as \"10.0.0.0/8\" or an IP address"
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\"]\ntrusted_proxies = [\"10.0.0.0/8\"]\n")),
        "ratekeeper.toml:5:19: limits[0].trusted_proxies: trusted_proxies applies only to a key with \"client_ip\""
    );
}

#[test]
fn bad_matches() {
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\"]\n[limits.match]\npath_prefix = \"api\"\n")),
        "ratekeeper.toml:6:15: limits[0].match.path_prefix: the path prefix \"api\" must start with \"/\""
    );
    assert_eq!(
        err(&limit(
            "rate = \"1/s\"\nkey = [\"peer\"]\n[limits.match]\nmethods = [\"GE T\"]\n"
        )),
        "ratekeeper.toml:6:12: limits[0].match.methods[0]: invalid HTTP method \"GE T\""
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"peer\"]\n[limits.match]\ndescriptors = [{ key = \"a\", value = \"\" }]\n")),
        "ratekeeper.toml:6:37: limits[0].match.descriptors[0].value: the value must not be empty; leave it out to match any value"
    );
    assert_eq!(
        err(&limit(
            "rate = \"1/s\"\nkey = [\"peer\"]\n[limits.match]\ndescriptors = [{ value = \"x\" }]\n"
        )),
        "ratekeeper.toml:6:16: limits[0].match.descriptors[0]: missing field `key`"
    );
}

#[test]
fn bad_stores() {
    let one = "\n[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    assert_eq!(
        err(&format!("[store]\nkind = \"redis\"\n{one}")),
        "ratekeeper.toml:2:8: store.url: a redis store needs a url, such as \"redis://127.0.0.1:6379\", or sentinels and master_name"
    );
    assert_eq!(
        err(&format!(
            "[store]\nkind = \"redis-cluster\"\nurls = []\n{one}"
        )),
        "ratekeeper.toml:3:8: store.urls: the list of urls must not be empty"
    );
    assert_eq!(
        err(&format!("[store]\nkind = \"redis\"\nurl = \"http://x\"\n{one}")),
        "ratekeeper.toml:3:7: store.url: invalid Redis url \"http://x\"; expected redis://HOST:PORT, rediss://HOST:PORT or redis+unix:///PATH"
    );
    assert_eq!(
        err(&format!("[store]\nkind = \"sqlite\"\n{one}")),
        "ratekeeper.toml:2:8: store.path: a sqlite store needs a path to its database file"
    );
    assert_eq!(
        err(&format!("[store]\nkind = \"mongo\"\n{one}")),
        "ratekeeper.toml:2:8: store.kind: unknown store kind \"mongo\"; expected memory, sqlite, redis or redis-cluster"
    );
    assert_eq!(
        err(&format!("[store]\nmax_keys = 0\n{one}")),
        "ratekeeper.toml:2:12: store.max_keys: max_keys must be greater than zero"
    );
    assert_eq!(
        err(&format!("[store]\nmax_keys = 2000000000\n{one}")),
        "ratekeeper.toml:2:12: store.max_keys: max_keys is 2000000000, above the largest supported value 1073741824"
    );
    assert_eq!(
        err(&format!("[store]\nurl = \"redis://x\"\n{one}")),
        "ratekeeper.toml:2:7: store.url: url applies only to the redis store, not to a memory store"
    );
    assert_eq!(
        err(&format!("[store]\nkind = \"redis\"\nurl = \"redis://x\"\non_failure = \"maybe\"\n{one}")),
        "ratekeeper.toml:4:14: store.on_failure: unknown failure mode \"maybe\"; expected \"closed\" (refuse requests) or \"open\" (allow them)"
    );
    assert_eq!(
        err(&format!("[store]\nkind = \"redis\"\nurl = \"redis://x\"\nprefix = \"{{rk}}\"\n{one}")),
        "ratekeeper.toml:4:10: store.prefix: the prefix \"{rk}\" contains a brace; braces would change Redis Cluster's hash slots"
    );
}

#[test]
fn bad_listen() {
    let one = "\n[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    assert_eq!(
        err(&format!("[listen]\nhttp = \"localhost\"\n{one}")),
        "ratekeeper.toml:2:8: listen.http: invalid address \"localhost\"; expected IP:PORT such as \"127.0.0.1:8080\" or \"[::1]:8080\", or \"off\""
    );
    assert_eq!(
        err(&format!("[listen]\ngrpc = \"127.0.0.1:8080\"\n{one}")),
        "ratekeeper.toml:2:8: listen.grpc: 127.0.0.1:8080 is already the http address (by default)"
    );
    assert_eq!(
        err(&format!("[listen]\nhttp = \"127.0.0.1:9090\"\n{one}")),
        "ratekeeper.toml:2:8: listen.http: 127.0.0.1:9090 is already the admin address (by default)"
    );
    assert_eq!(
        err(&format!(
            "[listen]\nhttp = \"[::1]:1\"\nadmin = \"[::1]:1\"\n{one}"
        )),
        "ratekeeper.toml:3:9: listen.admin: [::1]:1 is already the http address"
    );
    let config = Config::from_toml_str(
        &format!("[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\n{one}"),
        "x",
    )
    .unwrap();
    assert_eq!(config.listen.grpc, Some("127.0.0.1:0".parse().unwrap()));
}

#[test]
fn request_caps_default_and_are_bounded() {
    let one = "\n[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    let defaults = Config::from_toml_str(one, "x").unwrap().requests;
    assert_eq!(defaults, RequestCaps::default());
    assert_eq!(
        (
            defaults.max_descriptors,
            defaults.max_entries,
            defaults.max_value_bytes,
            defaults.max_override_rates
        ),
        (256, 64, 16_384, 32)
    );
    let config =
        Config::from_toml_str(&format!("[requests]\nmax_descriptors = 8\n{one}"), "x").unwrap();
    assert_eq!(config.requests.max_descriptors, 8);
    assert_eq!(config.requests.max_entries, 64);
    assert!(config
        .explain()
        .contains("requests: at most 8 descriptors of 64 entries, values up to 16384 bytes, 32 override rates, bodies up to 65536 bytes, 1024 held waiting (16 per key)\n"));
    assert!(!Config::default()
        .explain()
        .lines()
        .any(|line| line.starts_with("requests:")));
    assert_eq!(
        err(&format!("[requests]\nmax_entries = 0\n{one}")),
        "ratekeeper.toml:2:15: requests.max_entries: max_entries is 0, outside 1 to 4096"
    );
    assert_eq!(
        err(&format!("[requests]\nmax_value_bytes = 1048577\n{one}")),
        "ratekeeper.toml:2:19: requests.max_value_bytes: max_value_bytes is 1048577, outside 1 to 1048576"
    );
    assert_eq!(
        err(&format!("[requests]\nmax_descriptors = 65537\n{one}")),
        "ratekeeper.toml:2:19: requests.max_descriptors: max_descriptors is 65537, outside 1 to 65536"
    );
    assert_eq!(
        err(&format!("[requests]\nmax_override_rates = 1025\n{one}")),
        "ratekeeper.toml:2:22: requests.max_override_rates: max_override_rates is 1025, outside 1 to 1024"
    );
    let config =
        Config::from_toml_str_with_env(one, "x", [("RATEKEEPER_REQUESTS__MAX_VALUE_BYTES", "100")])
            .unwrap();
    assert_eq!(config.requests.max_value_bytes, 100);
}

#[test]
fn on_saturated_denies_by_default_and_takes_allow() {
    let body = "rate = \"1/s\"\nkey = [\"peer\"]\n";
    let config = Config::from_toml_str(&limit(body), "x").unwrap();
    assert_eq!(config.limits[0].on_saturated, OnSaturated::Deny);
    assert_eq!(Config::default().limits[0].on_saturated, OnSaturated::Deny);
    let config =
        Config::from_toml_str(&limit(&format!("{body}on_saturated = \"allow\"\n")), "x").unwrap();
    assert_eq!(config.limits[0].on_saturated, OnSaturated::Allow);
    assert!(config
        .explain()
        .contains("(allows new keys while the store is full)"));
    assert_eq!(
        err(&limit(&format!("{body}on_saturated = \"open\"\n"))),
        "ratekeeper.toml:5:16: limits[0].on_saturated: unknown value \"open\"; expected \"deny\" (refuse new keys while the store is full) or \"allow\" (let them through uncounted)"
    );
    let config = Config::from_toml_str_with_env(
        &limit(body),
        "x",
        [("RATEKEEPER_LIMITS__A__ON_SATURATED", "allow")],
    )
    .unwrap();
    assert_eq!(config.limits[0].on_saturated, OnSaturated::Allow);
}

#[test]
fn columns_count_characters() {
    assert_eq!(
        err("# é\n[[limits]]\nname = \"é\"\nrate = \"1/s\"\nkey = [\"peer\"]\n"),
        "ratekeeper.toml:3:8: limits[0].name: the limit name \"é\" contains 'é'; use letters, digits and punctuation other than quotes, backslashes, braces and colons"
    );
}

#[test]
fn env_overrides() {
    let vars = [
        ("PATH", "/usr/bin"),
        ("RATEKEEPER_CONFIG", "ignored.toml"),
        ("RATEKEEPER_STORE__KIND", "redis"),
        ("RATEKEEPER_STORE__URL", "redis://cache:6379"),
        ("RATEKEEPER_STORE__PREFIX", "123"),
        ("RATEKEEPER_STORE__MAX_KEYS", "77"),
        ("RATEKEEPER_STORE__FALLBACK", "true"),
        ("RATEKEEPER_LISTEN__HTTP", "0.0.0.0:80"),
        ("RATEKEEPER_LIMITS__PER_IP__RATE", "50/minute"),
        ("RATEKEEPER_LIMITS__PER_IP__KEY", "client_ip, route"),
        (
            "RATEKEEPER_LIMITS__PER_IP__TRUSTED_PROXIES",
            "[\"10.1.0.0/16\"]",
        ),
        ("ratekeeper_limits__login__match__path_prefix", "ignored"),
        ("RATEKEEPER_LIMITS__login__Match__Domain", "inner"),
        (
            "RATEKEEPER_LIMITS__LOGIN__MATCH__DESCRIPTORS",
            "[{ key = \"path\", value = \"/x*\" }]",
        ),
    ];
    let text = "[store]\nkind = \"memory\"\n\n[[limits]]\nname = \"per-ip\"\nrate = \"100/minute\"\nkey = [\"peer\"]\n\n[[limits]]\nname = \"login\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    let config = Config::from_toml_str_with_env(text, "ratekeeper.toml", vars).unwrap();
    assert_eq!(
        config.store.backend,
        Backend::Redis {
            url: "redis://cache:6379".to_owned(),
            prefix: "123".to_owned(),
            timeout: Duration::from_millis(100),
            batching: Batching::DEFAULT,
        }
    );
    assert_eq!(config.store.max_keys, 77);
    assert!(config.store.fallback);
    assert_eq!(config.listen.http, Some("0.0.0.0:80".parse().unwrap()));
    assert_eq!(config.limits[0].rate.to_string(), "50/minute");
    assert_eq!(config.limits[0].key.len(), 2);
    assert_eq!(config.limits[0].key[1], KeyPart::Route);
    assert_eq!(
        config.limits[0].key[0],
        KeyPart::ClientIp(
            ratekeeper_tower::client::ClientIp::XForwardedFor {
                trusted: vec!["10.1.0.0/16".parse().unwrap()]
            },
            Prefixes::default()
        )
    );
    // Names after the prefix are case-insensitive; the prefix is not.
    let login = &config.limits[1].matcher;
    assert_eq!(login.domain.as_deref(), Some("inner"));
    assert_eq!(login.path_prefix, None);
    assert_eq!(login.descriptors.len(), 1);
    assert_eq!(login.descriptors[0].key, "path");
    assert_eq!(
        login.descriptors[0].value,
        ValueMatch::Glob(ratekeeper_server::config::Glob::new("/x*"))
    );
    // The file alone is untouched.
    let plain = Config::from_toml_str(text, "ratekeeper.toml").unwrap();
    assert_eq!(plain.store.backend, Backend::Memory);
}

#[test]
fn env_errors_name_the_variable() {
    let text = limit("rate = \"1/s\"\nkey = [\"peer\"]\n");
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_STORE__KIND", "redis")]),
        "env RATEKEEPER_STORE__KIND: store.url: a redis store needs a url, such as \"redis://127.0.0.1:6379\", or sentinels and master_name"
    );
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_LIMITS__A__RATE", "10/fortnight")]),
        "env RATEKEEPER_LIMITS__A__RATE: limits[0].rate: unknown time unit \"fortnight\" in rate; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")"
    );
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_LIMITS__B__RATE", "1/s")]),
        "env RATEKEEPER_LIMITS__B__RATE: limits: there is no limit named \"B\" to override"
    );
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_STORE__KINDS", "redis")]),
        "env RATEKEEPER_STORE__KINDS: store.kinds: unknown field `kinds`, expected one of `kind`, `max_keys`, `on_failure`, `fallback`, `path`, `url`, `urls`, `sentinels`, `master_name`, `master_username`, `master_password`, `prefix`, `timeout_ms`, `start_wait_ms`, `batch_in_flight`, `batch_max_calls`, `lease`, `lease_max_chunk`, `lease_chunk_ms`, `lease_lifetime_ms`, `lease_spend_while_down`, `tls`"
    );
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_STORE__MAX_KEYS", "lots")]),
        "env RATEKEEPER_STORE__MAX_KEYS: store.max_keys: invalid type: string \"lots\", expected u64"
    );
    assert_eq!(
        err_env(&text, &[("RATEKEEPER_STORE____KIND", "x")]),
        "env RATEKEEPER_STORE____KIND: : empty name between \"__\" separators; expected RATEKEEPER_SECTION__FIELD"
    );
}

#[test]
fn process_vars_yields_the_environment() {
    // Every variable, since token_env may name any; PATH is set for cargo.
    assert!(ratekeeper_server::config::process_vars().any(|(name, _)| name == "PATH"));
}

#[test]
fn errors_expose_location_and_field() {
    let error =
        Config::from_toml_str(&limit("rate = \"x\"\nkey = [\"peer\"]\n"), "f.toml").unwrap_err();
    assert_eq!(error.field(), Some("limits[0].rate"));
    assert_eq!(
        error.location(),
        Some(&Location::File {
            source: "f.toml".to_owned(),
            line: 3,
            column: 8
        })
    );
}

#[test]
fn load_reads_files() {
    let dir = std::env::temp_dir().join(format!("ratekeeper-server-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ratekeeper.toml");
    std::fs::write(&path, FULL).unwrap();
    let config = Config::load(&path).unwrap();
    assert_eq!(config.limits.len(), 3);
    std::fs::write(&path, "[store]\nkind = 3\n").unwrap();
    let message = Config::load(&path).unwrap_err().to_string();
    assert_eq!(
        message,
        format!(
            "{}:2:8: store.kind: invalid type: integer `3`, expected a string",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(Config::load(&path), Err(ConfigError::Read { .. })));
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*") {
        let _ = Config::from_toml_str(&text, "x.toml");
    }

    #[test]
    fn arbitrary_toml_like_text_never_panics(
        text in "(\\[\\[?(store|listen|limits|limits\\.match)\\]\\]?\n|(name|rate|key|kind|url|urls|max_keys|policy|trusted_proxies|descriptors|methods|path_prefix|domain) = (\"[a-z0-9/:. *_-]{0,12}\"|[0-9]{1,12}|\\[\"[a-z_:]{0,10}\"\\]|true|\\[\\{ ?key = \"[a-z]{0,3}\" ?\\}\\])\n){0,12}"
    ) {
        let _ = Config::from_toml_str(&text, "x.toml");
    }

    #[test]
    fn arbitrary_env_never_panics(
        name in "RATEKEEPER_[A-Z_]{0,30}",
        value in "\\PC{0,20}",
    ) {
        let _ = Config::from_toml_str_with_env(DEFAULT_TOML, "x.toml", [(name, value)]);
    }
}

/// The `client_ip` rule of the first limit of `body` (after `name`).
fn client_rule(body: &str) -> (ClientIp, Prefixes) {
    let config = Config::from_toml_str(&limit(body), "ratekeeper.toml").unwrap();
    match &config.limits[0].key[0] {
        KeyPart::ClientIp(rule, prefixes) => (rule.clone(), *prefixes),
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_ip_trusts_no_proxy_unless_told() {
    let plain = "rate = \"1/s\"\nkey = [\"client_ip\"]\n";
    assert_eq!(
        client_rule(plain),
        (
            ClientIp::XForwardedFor {
                trusted: Vec::new()
            },
            Prefixes { ipv4: 32, ipv6: 64 }
        )
    );
    let private = |trust: &str| client_rule(&format!("{plain}trusted_proxies = {trust}\n")).0;
    assert_eq!(
        private("\"private\""),
        ClientIp::XForwardedFor {
            trusted: private_networks()
        }
    );
    let mut mixed = private_networks();
    mixed.push("203.0.113.0/24".parse().unwrap());
    assert_eq!(
        private("[\"Private\", \"203.0.113.7/24\"]"),
        ClientIp::XForwardedFor { trusted: mixed }
    );
    assert_eq!(
        private("[]"),
        ClientIp::XForwardedFor {
            trusted: Vec::new()
        }
    );
    // The word works from the environment too.
    let config = Config::from_toml_str_with_env(
        &limit(plain),
        "ratekeeper.toml",
        [("RATEKEEPER_LIMITS__A__TRUSTED_PROXIES", "private")],
    )
    .unwrap();
    assert_eq!(
        config.limits[0].key[0],
        KeyPart::ClientIp(
            ClientIp::XForwardedFor {
                trusted: private_networks()
            },
            Prefixes::default()
        )
    );
}

#[test]
fn client_ip_sources_and_networks() {
    let body = |fields: &str| format!("rate = \"1/s\"\nkey = [\"client_ip\"]\n{fields}");
    let ten: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    assert_eq!(
        client_rule(&body(
            "client_ip_from = \"forwarded\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n"
        ))
        .0,
        ClientIp::Forwarded {
            trusted: ten.clone()
        }
    );
    assert_eq!(
        client_rule(&body(
            "client_ip_from = \"header:CF-Connecting-IP\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n"
        ))
        .0,
        ClientIp::Header {
            name: http::HeaderName::from_static("cf-connecting-ip"),
            trusted: ten
        }
    );
    assert_eq!(
        client_rule(&body("trusted_hops = 2\n")).0,
        ClientIp::Hops(2)
    );
    assert_eq!(
        client_rule(&body(
            "client_ip_from = \"X-Forwarded-For\"\ntrusted_hops = 1\n"
        ))
        .0,
        ClientIp::Hops(1)
    );
    for (fields, ipv4, ipv6) in [
        ("ipv6_prefix = 56\n", 32, 56),
        ("ipv6_prefix = 128\n", 32, 128),
        ("ipv4_prefix = 24\nipv6_prefix = 48\n", 24, 48),
    ] {
        assert_eq!(
            client_rule(&body(fields)).1,
            Prefixes { ipv4, ipv6 },
            "{fields}"
        );
    }
    // The prefixes apply to `peer` too.
    let config = Config::from_toml_str(
        &limit("rate = \"1/s\"\nkey = [\"peer\"]\nipv6_prefix = 56\n"),
        "ratekeeper.toml",
    )
    .unwrap();
    assert_eq!(
        config.limits[0].key[0],
        KeyPart::Peer(Prefixes { ipv4: 32, ipv6: 56 })
    );
}

#[test]
fn bad_client_ip_settings_are_located() {
    let client = |fields: &str| {
        err(&limit(&format!(
            "rate = \"1/s\"\nkey = [\"client_ip\"]\n{fields}"
        )))
    };
    for (fields, expected) in [
        (
            "client_ip_from = \"x-real\"\n",
            "ratekeeper.toml:5:18: limits[0].client_ip_from: unknown client_ip source \"x-real\"; expected \"x-forwarded-for\" (the default), \"forwarded\" or \"header:NAME\" such as \"header:x-real-ip\"",
        ),
        (
            "client_ip_from = \"header:bad header\"\n",
            "ratekeeper.toml:5:18: limits[0].client_ip_from: invalid header name \"bad header\" in client_ip_from",
        ),
        (
            "trusted_proxies = \"privat\"\n",
            "ratekeeper.toml:5:19: limits[0].trusted_proxies: invalid network \"privat\"; expected \"private\", a CIDR such as \"10.0.0.0/8\" or an IP address",
        ),
        (
            "trusted_proxies = 10\n",
            "ratekeeper.toml:5:19: limits[0].trusted_proxies: invalid type: integer `10`, expected \"private\" or a list of networks such as [\"10.0.0.0/8\"]",
        ),
        (
            "trusted_hops = 2\ntrusted_proxies = \"private\"\n",
            "ratekeeper.toml:5:16: limits[0].trusted_hops: trusted_hops and trusted_proxies are two ways to say which proxies to believe; give one",
        ),
        (
            "client_ip_from = \"forwarded\"\ntrusted_hops = 2\n",
            "ratekeeper.toml:6:16: limits[0].trusted_hops: trusted_hops counts X-Forwarded-For entries and does not apply to client_ip_from = \"forwarded\"; use trusted_proxies",
        ),
        (
            "trusted_hops = 0\n",
            "ratekeeper.toml:5:16: limits[0].trusted_hops: trusted_hops is 0, outside 1 to 16",
        ),
        (
            "ipv6_prefix = 129\n",
            "ratekeeper.toml:5:15: limits[0].ipv6_prefix: ipv6_prefix is 129, outside 1 to 128 (the bits of an address that make one key)",
        ),
        (
            "ipv4_prefix = 0\n",
            "ratekeeper.toml:5:15: limits[0].ipv4_prefix: ipv4_prefix is 0, outside 1 to 32 (the bits of an address that make one key)",
        ),
    ] {
        assert_eq!(client(fields), expected, "{fields}");
    }
    let route = |fields: &str| {
        err(&limit(&format!(
            "rate = \"1/s\"\nkey = [\"peer\"]\n{fields}"
        )))
    };
    assert_eq!(
        route("client_ip_from = \"forwarded\"\n"),
        "ratekeeper.toml:5:18: limits[0].client_ip_from: client_ip_from applies only to a key with \"client_ip\""
    );
    assert_eq!(
        route("trusted_hops = 1\n"),
        "ratekeeper.toml:5:16: limits[0].trusted_hops: trusted_hops applies only to a key with \"client_ip\""
    );
    assert_eq!(
        err(&limit("rate = \"1/s\"\nkey = [\"route\"]\nipv6_prefix = 56\n")),
        "ratekeeper.toml:5:15: limits[0].ipv6_prefix: ipv6_prefix applies only to a key with \"client_ip\" or \"peer\""
    );
}

#[test]
fn check_explains_the_trust_of_each_limit() {
    let text = r#"
[[limits]]
name = "direct"
rate = "1/s"
key = ["client_ip", "route"]
ipv6_prefix = 56

[[limits]]
name = "behind-lb"
rate = "1/s"
key = ["client_ip"]
trusted_proxies = "private"

[[limits]]
name = "cdn"
rate = "1/s"
key = ["client_ip"]
client_ip_from = "header:cf-connecting-ip"
trusted_proxies = ["173.245.48.0/20"]

[[limits]]
name = "chain"
rate = "1/s"
key = ["client_ip"]
trusted_hops = 2
ipv4_prefix = 24
ipv6_prefix = 128

[[limits]]
name = "rfc"
rate = "1/s"
key = ["peer", "client_ip"]
client_ip_from = "forwarded"
"#;
    let explained = Config::from_toml_str(text, "t.toml").unwrap().explain();
    let lines: Vec<&str> = explained
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("  applies to"))
        .collect();
    assert_eq!(
        lines,
        [
            "  client_ip: the socket peer (no trusted proxies: X-Forwarded-For is ignored, set trusted_proxies to believe it); IPv4 by address, IPv6 by /56",
            "  client_ip: from X-Forwarded-For behind private networks (the rightmost address not among them); any other peer is the client; IPv4 by address, IPv6 by /64",
            "  client_ip: from cf-connecting-ip when the peer is in 173.245.48.0/20; any other peer is the client; IPv4 by address, IPv6 by /64",
            "  client_ip: from X-Forwarded-For, entry 2 from the right, from any peer (every request must pass 2 proxies of yours); IPv4 by /24, IPv6 by address",
            "  peer: the socket peer; IPv4 by address, IPv6 by /64",
            "  client_ip: the socket peer (no trusted proxies: Forwarded is ignored, set trusted_proxies to believe it); IPv4 by address, IPv6 by /64",
        ]
    );
}

#[test]
fn the_reference_limits_load_as_written() {
    // The built-in limit and the proxy-counting one, from the reference's
    // [[limits]] section (the rest of the page is checked key by key in
    // tests/it/reference.rs).
    let blocks = crate::reference::section_toml("configuration.md", "`[[limits]]`: the limits");
    assert!(blocks.len() >= 2, "{blocks:#?}");
    let builtin = Config::from_toml_str(&blocks[0], "docs/configuration.md")
        .unwrap_or_else(|error| panic!("{error}\n{}", blocks[0]));
    assert_eq!(
        builtin.limits[0].key[0],
        KeyPart::ClientIp(
            ClientIp::XForwardedFor { trusted: vec![] },
            Prefixes::default()
        )
    );
    let hops = Config::from_toml_str(&blocks[1], "docs/configuration.md")
        .unwrap_or_else(|error| panic!("{error}\n{}", blocks[1]));
    assert_eq!(
        hops.limits[0].key[0],
        KeyPart::ClientIp(ClientIp::Hops(2), Prefixes::default())
    );
}

#[test]
fn the_guides_proxy_setups_load_and_say_what_they_trust() {
    let snippets = crate::reference::section_toml("security.md", "Running behind a proxy");
    assert_eq!(snippets.len(), 3, "three setups: {snippets:#?}");
    let trust: Vec<String> = snippets
        .iter()
        .map(|snippet| {
            let config = Config::from_toml_str(snippet, "docs/security.md")
                .unwrap_or_else(|error| panic!("{error}\n{snippet}"));
            assert!(config.warnings().is_empty(), "{snippet}");
            let explained = config.explain();
            explained
                .lines()
                .find(|line| line.starts_with("  client_ip: "))
                .unwrap_or_else(|| panic!("no client_ip line in {explained}"))
                .to_owned()
        })
        .collect();
    assert!(
        trust[0].contains("the socket peer (no trusted proxies"),
        "{}",
        trust[0]
    );
    assert!(trust[1].contains("behind private networks"), "{}", trust[1]);
    assert!(
        trust[2].contains("from cf-connecting-ip when the peer is in"),
        "{}",
        trust[2]
    );
}

#[test]
fn trusting_every_address_is_a_warning_naming_the_header_read() {
    let limit = |from: &str| {
        format!(
            "[[limits]]\nname = \"open\"\nrate = \"1/s\"\nkey = [\"client_ip\"]\n\
             trusted_proxies = [\"0.0.0.0/0\"]\n{from}"
        )
    };
    for (from, header) in [
        ("", "X-Forwarded-For"),
        ("client_ip_from = \"forwarded\"\n", "Forwarded"),
        (
            "client_ip_from = \"header:cf-connecting-ip\"\n",
            "cf-connecting-ip",
        ),
    ] {
        let config = Config::from_toml_str(&limit(from), "x").unwrap();
        let warnings: Vec<String> = config.warnings().iter().map(|w| w.to_string()).collect();
        assert_eq!(
            warnings,
            [format!(
                "limit open trusts every address as a proxy (a /0 network among its trusted proxies): \
                 any client can choose its own key with {header}"
            )],
            "{from}"
        );
    }
}

#[test]
fn store_passwords_never_reach_debug_explain_or_errors() {
    let one = "[[limits]]\nname = \"x\"\nrate = \"1/second\"\nkey = [\"global\"]\n";
    let redis = Config::from_toml_str(
        &format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://default:S3cretRedisPass@127.0.0.1:6390/0\"\n{one}"
        ),
        "r.toml",
    )
    .unwrap();
    let cluster = Config::from_toml_str(
        &format!(
            "[store]\nkind = \"redis-cluster\"\nurls = [\"redis://:S3cretA@10.0.0.1:7000\", \"redis://u:S3cretB@10.0.0.2:7001\"]\n{one}"
        ),
        "c.toml",
    )
    .unwrap();
    for text in [format!("{redis:?}"), redis.explain()] {
        assert!(!text.contains("S3cret"), "{text}");
        assert!(
            text.contains("redis://default:***@127.0.0.1:6390/0"),
            "{text}"
        );
    }
    for text in [format!("{cluster:?}"), cluster.explain()] {
        assert!(!text.contains("S3cret"), "{text}");
        assert!(text.contains("redis://:***@10.0.0.1:7000"), "{text}");
        assert!(text.contains("redis://u:***@10.0.0.2:7001"), "{text}");
    }
    // The configuration keeps the URL itself: only what is shown is hidden.
    let Backend::Redis { url, .. } = &redis.store.backend else {
        panic!("a redis store");
    };
    assert_eq!(url, "redis://default:S3cretRedisPass@127.0.0.1:6390/0");
    let refused = Config::from_toml_str(
        &format!("[store]\nkind = \"redis\"\nurl = \"http://u:S3cret@x\"\n{one}"),
        "r.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(!refused.contains("S3cret"), "{refused}");
    assert!(refused.contains("\"http://u:***@x\""), "{refused}");
}

#[test]
fn runtime_worker_threads_are_auto_by_default_or_a_number_within_bounds() {
    use ratekeeper_server::config::WorkerThreads;
    let base = "[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    let parse =
        |runtime: &str| Config::from_toml_str(&format!("{runtime}{base}"), "ratekeeper.toml");
    assert_eq!(
        parse("").unwrap().runtime.worker_threads,
        WorkerThreads::Auto
    );
    assert_eq!(
        parse("[runtime]\nworker_threads = \"auto\"\n")
            .unwrap()
            .runtime
            .worker_threads,
        WorkerThreads::Auto
    );
    let four = parse("[runtime]\nworker_threads = 4\n").unwrap();
    assert_eq!(four.runtime.worker_threads, WorkerThreads::Fixed(4));
    assert_eq!(four.runtime.worker_threads(), 4);
    assert!(
        four.explain().contains("runtime: 4 worker threads"),
        "{}",
        four.explain()
    );
    assert_eq!(
        parse("[runtime]\nworker_threads = 0\n")
            .unwrap_err()
            .to_string(),
        "ratekeeper.toml:2:18: runtime.worker_threads: worker_threads is 0, outside 1 to 1024"
    );
    assert_eq!(
        parse("[runtime]\nworker_threads = \"many\"\n").unwrap_err().to_string(),
        "ratekeeper.toml:2:18: runtime.worker_threads: worker_threads is \"many\"; expected \"auto\" (one per CPU the process may use) or a number from 1 to 1024"
    );
    assert_eq!(
        parse("[runtime]\nthreads = 2\n").unwrap_err().to_string(),
        "ratekeeper.toml:2:1: runtime.threads: unknown field `threads`, expected `worker_threads`"
    );
    // From the environment, as every field.
    let vars = [("RATEKEEPER_RUNTIME__WORKER_THREADS", "2")];
    let set = Config::from_toml_str_with_env(base, "ratekeeper.toml", vars).unwrap();
    assert_eq!(set.runtime.worker_threads, WorkerThreads::Fixed(2));
    let vars = [("RATEKEEPER_RUNTIME__WORKER_THREADS", "auto")];
    let auto = Config::from_toml_str_with_env(base, "ratekeeper.toml", vars).unwrap();
    assert_eq!(auto.runtime.worker_threads, WorkerThreads::Auto);
}

#[test]
fn the_envoy_door_sends_the_draft_fields_by_default_or_envoy_ratelimits() {
    use ratekeeper_server::config::{EnvoyDoorConfig, ResponseHeaders};
    let base = "[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"peer\"]\n";
    let parse = |envoy: &str| Config::from_toml_str(&format!("{envoy}{base}"), "ratekeeper.toml");
    assert_eq!(parse("").unwrap().envoy, EnvoyDoorConfig::default());
    assert_eq!(
        parse("").unwrap().envoy.response_headers,
        ResponseHeaders::Draft
    );
    let chosen = parse(
        "[envoy]\nresponse_headers = \"envoy_ratelimit\"\nreset_header = \"X-RateLimit-Reset\"\n",
    )
    .unwrap();
    assert_eq!(
        chosen.envoy.response_headers,
        ResponseHeaders::EnvoyRatelimit
    );
    assert_eq!(chosen.envoy.reset_header, "X-RateLimit-Reset");
    assert_eq!(chosen.envoy.limit_header, "RateLimit-Limit");
    assert!(
        chosen.explain().contains(
            "envoy: response headers envoy_ratelimit (RateLimit-Limit, RateLimit-Remaining, X-RateLimit-Reset)"
        ),
        "{}",
        chosen.explain()
    );
    assert_eq!(
        parse("[envoy]\nresponse_headers = \"legacy\"\n")
            .unwrap_err()
            .to_string(),
        "ratekeeper.toml:2:20: envoy.response_headers: unknown response_headers \"legacy\"; expected draft, envoy_ratelimit, both or none"
    );
    assert_eq!(
        parse("[envoy]\nlimit_header = \"Rate Limit\"\n")
            .unwrap_err()
            .to_string(),
        "ratekeeper.toml:2:16: envoy.limit_header: \"Rate Limit\" is not a header name"
    );
    let each = parse("[envoy]\ncounting = \"each_descriptor\"\n").unwrap();
    assert_eq!(
        each.envoy.counting,
        ratekeeper_server::config::Counting::EachDescriptor
    );
    assert!(
        each.explain()
            .contains("each descriptor counted on its own"),
        "{}",
        each.explain()
    );
    assert_eq!(
        parse("[envoy]\ncounting = \"all\"\n").unwrap_err().to_string(),
        "ratekeeper.toml:2:12: envoy.counting: unknown counting \"all\"; expected all_or_nothing or each_descriptor"
    );
    let vars = [("RATEKEEPER_ENVOY__RESPONSE_HEADERS", "both")];
    let set = Config::from_toml_str_with_env(base, "ratekeeper.toml", vars).unwrap();
    assert_eq!(set.envoy.response_headers, ResponseHeaders::Both);
}

/// Every ```toml block of the project's documents, and every example
/// configuration file, by where it is.
fn documented_configs() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut documents = vec![root.join("README.md")];
    for dir in ["crates", "docs"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|ext| ext == "md") {
                documents.push(path);
            } else if path.join("README.md").is_file() {
                documents.push(path.join("README.md"));
            }
        }
    }
    let mut configs = Vec::new();
    for document in documents {
        let text = std::fs::read_to_string(&document).unwrap();
        for (n, block) in text.split("```toml\n").skip(1).enumerate() {
            let block = &block[..block.find("```").expect("a closed block")];
            configs.push((
                format!("{} block {}", document.display(), n + 1),
                block.to_owned(),
            ));
        }
    }
    // The configuration files shown in the service's rustdoc.
    let mut sources = vec![root.join("crates/ratekeeper-server/src")];
    while let Some(dir) = sources.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut docs = String::new();
            for line in text.lines().map(str::trim_start) {
                if let Some(doc) = line.strip_prefix("//!") {
                    docs.push_str(doc.strip_prefix(' ').unwrap_or(doc));
                    docs.push('\n');
                } else if let Some(included) = line
                    .strip_prefix("#![doc = include_str!(\"")
                    .and_then(|rest| rest.strip_suffix("\")]"))
                {
                    let included = path.parent().unwrap().join(included);
                    docs.push_str(&std::fs::read_to_string(included).unwrap());
                }
            }
            for (n, block) in docs.split("```toml\n").skip(1).enumerate() {
                let block = &block[..block.find("```").expect("a closed block")];
                configs.push((
                    format!("{} doc block {}", path.display(), n + 1),
                    block.to_owned(),
                ));
            }
        }
    }
    let mut pending = vec![root.join("examples")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                configs.push((path.display().to_string(), text));
            }
        }
    }
    configs
}

#[test]
fn every_documented_config_loads() {
    let configs = documented_configs();
    // docs/configuration.md's, docs/security.md's, the nginx example's,
    // the rustdoc's three.
    assert!(configs.len() >= 20, "found only {configs:#?}");
    // The files and variables the examples name, made to exist.
    let files = crate::reference::Files::new();
    let mut failures = Vec::new();
    for (place, text) in &configs {
        if let Err(error) = files.load(text, place) {
            failures.push(error);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_field_at_its_default_value_is_never_an_error() {
    // A memory store with every remote store's field at its default, and a
    // limit keyed without an address with every address field at its default.
    let defaults = "[store]\nkind = \"memory\"\non_failure = \"closed\"\nfallback = false\n\
                    prefix = \"ratekeeper:\"\ntimeout_ms = 100\nstart_wait_ms = 0\nbatch_in_flight = 4\nbatch_max_calls = 64\n\n\
                    [[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"route\"]\ntrusted_proxies = []\n\
                    client_ip_from = \"x-forwarded-for\"\nipv4_prefix = 32\nipv6_prefix = 64\n";
    Config::from_toml_str(defaults, "defaults.toml").unwrap_or_else(|error| panic!("{error}"));
    // The same fields away from their defaults still say where they apply.
    for (field, message) in [
        (
            "on_failure = \"open\"",
            "on_failure applies only to the sqlite and redis stores",
        ),
        (
            "fallback = true",
            "fallback applies only to the sqlite and redis stores",
        ),
        (
            "prefix = \"rk:\"",
            "prefix applies only to the redis stores",
        ),
        (
            "timeout_ms = 50",
            "timeout_ms applies only to the redis stores",
        ),
        (
            "start_wait_ms = 5000",
            "start_wait_ms applies only to the redis stores",
        ),
        (
            "batch_in_flight = 2",
            "batch_in_flight applies only to the redis store",
        ),
        (
            "batch_max_calls = 8",
            "batch_max_calls applies only to the redis store",
        ),
    ] {
        let text = format!(
            "[store]\nkind = \"memory\"\n{field}\n{}",
            limit("rate = \"1/s\"\nkey = [\"route\"]")
        );
        let error = Config::from_toml_str(&text, "m.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains(message), "{field}: {error}");
    }
    for (field, message) in [
        (
            "trusted_proxies = \"private\"",
            "trusted_proxies applies only to a key with \"client_ip\"",
        ),
        (
            "client_ip_from = \"forwarded\"",
            "client_ip_from applies only to a key with \"client_ip\"",
        ),
        (
            "ipv4_prefix = 24",
            "ipv4_prefix applies only to a key with \"client_ip\" or \"peer\"",
        ),
        (
            "ipv6_prefix = 56",
            "ipv6_prefix applies only to a key with \"client_ip\" or \"peer\"",
        ),
    ] {
        let text = limit(&format!("rate = \"1/s\"\nkey = [\"route\"]\n{field}"));
        let error = Config::from_toml_str(&text, "l.toml")
            .unwrap_err()
            .to_string();
        assert!(error.contains(message), "{field}: {error}");
    }
}

#[test]
fn start_wait_ms_is_read_and_bounded() {
    let redis = |line: &str| {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n{line}\n{}",
            limit("rate = \"1/s\"\nkey = [\"global\"]")
        )
    };
    let config = Config::from_toml_str(&redis(""), "ratekeeper.toml").unwrap();
    assert_eq!(config.store.start_wait, std::time::Duration::ZERO);
    let config = Config::from_toml_str(&redis("start_wait_ms = 30000"), "ratekeeper.toml").unwrap();
    assert_eq!(config.store.start_wait, std::time::Duration::from_secs(30));
    let error = Config::from_toml_str(&redis("start_wait_ms = 3600001"), "ratekeeper.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("store.start_wait_ms: start_wait_ms is 3600001, above the largest supported value 3600000"),
        "{error}"
    );
}

#[test]
fn counting_refused_hits_needs_reports() {
    let error = err(
        "[[limits]]\nname = \"t\"\nrate = \"10/minute\"\nkey = [\"global\"]\nallow_reports = false\ncount_refused = true\n",
    );
    assert!(
        error.starts_with("ratekeeper.toml:6:17: limits[0].count_refused:"),
        "{error}"
    );
    assert!(error.contains("allow_reports = false"), "{error}");
}

#[test]
fn after_response_is_read_and_checked() {
    let limit = |after: &str| {
        format!("[[limits]]\nname = \"t\"\nrate = \"10/minute\"\nkey = [\"global\"]\nafter_response = {after}\n")
    };
    let config = Config::from_toml_str(
        &limit(r#"{ cost = "trailer:x-llm-tokens", estimate = 500, ttl = "5m" }"#),
        "t.toml",
    )
    .unwrap();
    let after = config.limits[0].after_response.clone().unwrap();
    assert_eq!(
        after.cost,
        ratekeeper_server::config::CostSource::Trailer(http::HeaderName::from_static(
            "x-llm-tokens"
        ))
    );
    assert_eq!(
        (after.estimate, after.ttl),
        (500, std::time::Duration::from_secs(300))
    );
    let defaults = Config::from_toml_str(&limit(r#"{ cost = "failures" }"#), "t.toml").unwrap();
    let after = defaults.limits[0].after_response.clone().unwrap();
    assert_eq!(
        (after.estimate, after.ttl),
        (1, std::time::Duration::from_secs(60))
    );
    for (bad, field) in [
        (r#"{ cost = "tokens" }"#, "cost"),
        (r#"{ cost = "header:bad name" }"#, "cost"),
        (r#"{ cost = "failures", ttl = "0s" }"#, "ttl"),
        (r#"{ cost = "failures", ttl = "2h" }"#, "ttl"),
    ] {
        let error = err(&limit(bad));
        assert!(
            error.contains(&format!("limits[0].after_response.{field}")),
            "{bad}: {error}"
        );
    }
}
