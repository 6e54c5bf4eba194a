//! `ratekeeper check`, run as a real process.

use std::process::Output;

fn ratekeeper(args: &[&str], env: &[(&str, &str)]) -> Output {
    crate::common::run_ratekeeper(args, env, "")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_valid_file_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        "[store]\nkind = \"memory\"\n\n[[limits]]\nname = \"per-ip\"\nrate = \"100/minute\"\npolicy = \"gcra\"\nkey = [\"client_ip\"]\n",
    )
    .unwrap();
    let output = ratekeeper(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("limit per-ip: gcra 100/minute, key client_ip"),
        "{stdout}"
    );
    assert!(stdout.ends_with("ok\n"), "{stdout}");
}

#[test]
fn check_says_where_each_limit_finds_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trust.toml");
    std::fs::write(
        &path,
        r#"
[[limits]]
name = "direct"
rate = "100/minute"
key = ["client_ip"]

[[limits]]
name = "behind-lb"
rate = "100/minute"
key = ["client_ip"]
trusted_proxies = ["10.0.0.0/8"]
ipv6_prefix = 56
"#,
    )
    .unwrap();
    let output = ratekeeper(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(
        lines,
        [
            "limit direct: token_bucket 100/minute, key client_ip, match every HTTP request",
            "  applies to HTTP requests: the JSON API by method and path, nginx auth_request, the proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)",
            "  client_ip: the socket peer (no trusted proxies: X-Forwarded-For is ignored, set \
             trusted_proxies to believe it); IPv4 by address, IPv6 by /64",
            "limit behind-lb: token_bucket 100/minute, key client_ip, match every HTTP request",
            "  applies to HTTP requests: the JSON API by method and path, nginx auth_request, the proxy (never gRPC: Envoy's requests need match.domain and match.descriptors)",
            "  client_ip: from X-Forwarded-For behind 10.0.0.0/8 (the rightmost address not among \
             them); any other peer is the client; IPv4 by address, IPv6 by /56",
            "ok",
        ]
    );
}

#[test]
fn an_invalid_file_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[limits]]\nname = \"per-ip\"\nrate = \"100/fortnight\"\nkey = [\"client_ip\"]\n",
    )
    .unwrap();
    let output = ratekeeper(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!("error: {}:3:8: limits[0].rate: ", path.display())),
        "{stderr}"
    );
    assert!(stderr.contains("fortnight"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn the_environment_overrides_the_file() {
    let output = ratekeeper(
        &["check"],
        &[("RATEKEEPER_LIMITS__PER_CLIENT__RATE", "7/second")],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("7/second"),
        "{}",
        text(&output.stdout)
    );

    let output = ratekeeper(&["check"], &[("RATEKEEPER_STORE__KIND", "redis")]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("RATEKEEPER_STORE__KIND"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let output = ratekeeper(&["check", "--config", "/nonexistent/ratekeeper.toml"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("/nonexistent/ratekeeper.toml"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_defaults_print_and_validate() {
    let output = ratekeeper(&["check", "--print-default"], &[]);
    assert!(output.status.success());
    let defaults = text(&output.stdout);
    assert!(defaults.contains("[[limits]]"), "{defaults}");
    assert!(defaults.contains("trusted_proxies = []"), "{defaults}");
    // The fields a hostile client makes matter are shown with their defaults.
    assert!(defaults.contains("on_saturated = \"deny\"\n"), "{defaults}");
    assert!(
        defaults.contains("[requests]\nmax_descriptors = 256\n"),
        "{defaults}"
    );
    let output = ratekeeper(&["check"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn limits_that_probably_do_not_do_what_was_meant_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doubtful.toml");
    std::fs::write(
        &path,
        r#"
[[limits]]
name = "edge"
rate = "10/s"
key = ["descriptor:remote_address", "header:x-api-key"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }]

[[limits]]
name = "login"
rate = "5/minute"
key = ["descriptor:user"]
[limits.match]
path_prefix = "/login"

[[limits]]
name = "open-door"
rate = "5/minute"
key = ["client_ip"]
trusted_proxies = ["0.0.0.0/0"]

[[limits]]
name = "by-real-ip"
rate = "5/minute"
key = ["header:x-real-ip"]

[[limits]]
name = "fine"
rate = "5/minute"
key = ["client_ip", "route"]
"#,
    )
    .unwrap();
    let output = ratekeeper(&["check", "--config", path.to_str().unwrap()], &[]);
    // Warnings do not fail the check.
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).ends_with("ok\n"));
    let warnings: Vec<String> = text(&output.stderr).lines().map(str::to_owned).collect();
    assert_eq!(
        warnings,
        [
            "warning: limit edge matches Envoy descriptors, but its key part header:x-api-key is \
             never in one: every gRPC request shares the key \"unknown\"",
            "warning: limit login matches HTTP methods or paths, but its key part descriptor:user \
             comes only from Envoy descriptors: every request shares the key \"unknown\"",
            "warning: limit open-door trusts every address as a proxy (a /0 network among its \
             trusted proxies): any client can choose its own key with X-Forwarded-For",
            "warning: limit by-real-ip is keyed by the x-real-ip header, which any client can \
             set unless a proxy overwrites it",
        ]
    );
}

#[test]
fn check_hides_the_redis_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redis.toml");
    std::fs::write(
        &path,
        "[store]\nkind = \"redis\"\nurl = \"redis://default:S3cretRedisPass@127.0.0.1:6390\"\n\n[[limits]]\nname = \"x\"\nrate = \"1/second\"\nkey = [\"global\"]\n",
    )
    .unwrap();
    let output = ratekeeper(&["check", "--config", path.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        stdout.contains("store: redis redis://default:***@127.0.0.1:6390 "),
        "{stdout}"
    );
    for printed in [&stdout, &stderr] {
        assert!(!printed.contains("S3cretRedisPass"), "{printed}");
    }
}
