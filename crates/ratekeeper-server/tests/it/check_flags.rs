//! `ratekeeper check` with `serve`'s and `proxy`'s flags, configurations
//! without limits, and relative paths, run as a real process.

use std::path::Path;
use std::process::{Command, Output};

/// `ratekeeper ARGS` in `cwd`, with only the `RATEKEEPER_*` variables of
/// `env`.
fn ratekeeper_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.args(args).current_dir(cwd);
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line of `stdout` that starts with `prefix`.
fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {stdout}"))
}

const LIMIT: &str = "[[limits]]\nname = \"all\"\nrate = \"10/s\"\nkey = [\"global\"]\n";

const ENVOY_YAML: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n";

const LIMITADOR_YAML: &str =
    "- namespace: edge\n  max_value: 5\n  seconds: 60\n  conditions: []\n  variables: []\n";

#[test]
fn check_takes_the_flags_serve_takes_and_they_win_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rk.toml"), LIMIT).unwrap();
    std::fs::create_dir(dir.path().join("envoy")).unwrap();
    std::fs::write(dir.path().join("envoy/edge.yaml"), ENVOY_YAML).unwrap();
    std::fs::write(dir.path().join("limits.yaml"), LIMITADOR_YAML).unwrap();
    let args = [
        "check",
        "--config",
        "rk.toml",
        "--http",
        "off",
        "--grpc",
        "127.0.0.1:7001",
        "--admin",
        "127.0.0.1:7002",
        "--envoy-config",
        "envoy",
        "--limitador-config",
        "limits.yaml",
        "--shadow-mode",
    ];
    // The environment says otherwise; the flags win.
    let env = [
        ("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:6001"),
        ("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:6002"),
    ];
    let output = ratekeeper_in(dir.path(), &args, &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(
        line(&stdout, "listen:"),
        "listen: http off, grpc 127.0.0.1:7001, admin 127.0.0.1:7002"
    );
    assert!(line(&stdout, "envoy files: envoy (1 domain: edge").contains("1 limit"));
    line(&stdout, "limitador:");
    line(&stdout, "shadow mode:");
    // The environment wins over the file where no flag is given.
    let output = ratekeeper_in(dir.path(), &["check", "--config", "rk.toml"], &env);
    assert_eq!(
        line(&text(&output.stdout), "listen:"),
        "listen: http 127.0.0.1:6001, grpc 127.0.0.1:6002, admin 127.0.0.1:9090"
    );
    // `check serve` is `check`.
    let output = ratekeeper_in(
        dir.path(),
        &["check", "serve", "--config", "rk.toml", "--grpc", "off"],
        &[],
    );
    assert_eq!(
        line(&text(&output.stdout), "listen:"),
        "listen: http 127.0.0.1:8080, grpc off, admin 127.0.0.1:9090"
    );
}

#[test]
fn a_listen_flag_takes_an_address_or_off() {
    let dir = tempfile::tempdir().unwrap();
    let output = ratekeeper_in(dir.path(), &["check", "--http", "8080"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--http"), "{stderr}");
    assert!(stderr.contains("\"off\""), "{stderr}");
}

#[test]
fn check_proxy_lists_only_the_doors_the_proxy_serves() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rk.toml"), LIMIT).unwrap();
    let args = [
        "check",
        "proxy",
        "--config",
        "rk.toml",
        "--upstream",
        "http://127.0.0.1:3000",
        "--listen",
        "127.0.0.1:8001",
        "--admin",
        "127.0.0.1:9091",
        "--shadow-mode",
    ];
    let output = ratekeeper_in(dir.path(), &args, &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert_eq!(
        line(&stdout, "listen:"),
        "listen: proxy 127.0.0.1:8001 -> http://127.0.0.1:3000/, admin 127.0.0.1:9091"
    );
    assert!(!stdout.contains("http 127.0.0.1:8080"), "{stdout}");
    assert!(!stdout.contains("grpc"), "{stdout}");
    line(&stdout, "shadow mode:");

    // What the proxy refuses at its start, check refuses.
    let output = ratekeeper_in(
        dir.path(),
        &["check", "proxy", "--upstream", "ftp://127.0.0.1:3000"],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("http:// or https://"), "{stderr}");
}

#[test]
fn a_file_of_settings_only_is_accepted_with_a_warning_where_no_limit_applies() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("envoy")).unwrap();
    std::fs::write(dir.path().join("envoy/edge.yaml"), ENVOY_YAML).unwrap();
    std::fs::write(dir.path().join("limits.yaml"), LIMITADOR_YAML).unwrap();
    let warning = "warning: no limit applies anywhere";
    let files = [
        ("listen.toml", "[listen]\nhttp = \"127.0.0.1:7000\"\n", true),
        (
            "envoy-settings.toml",
            "[envoy]\nresponse_headers = \"both\"\n",
            true,
        ),
        (
            "limitador.toml",
            "[limitador]\nconfig_file = \"limits.yaml\"\n",
            false,
        ),
        ("envoy.toml", "[envoy]\nconfig_dir = \"envoy\"\n", false),
    ];
    for (name, toml, warned) in files {
        std::fs::write(dir.path().join(name), toml).unwrap();
        let output = ratekeeper_in(dir.path(), &["check", "--config", name], &[]);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(output.status.success(), "{name}: {stderr}");
        assert!(stdout.ends_with("ok\n"), "{name}: {stdout}");
        assert_eq!(stderr.contains(warning), warned, "{name}: {stderr}");
    }
}

#[test]
fn relative_paths_in_a_file_are_read_from_its_folder_and_flags_from_the_working_directory() {
    let config_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let at = config_dir.path();
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::create_dir_all(at.join("tls")).unwrap();
    std::fs::write(at.join("tls/cert.pem"), key.cert.pem()).unwrap();
    std::fs::write(at.join("tls/key.pem"), key.signing_key.serialize_pem()).unwrap();
    std::fs::create_dir(at.join("envoy")).unwrap();
    std::fs::write(at.join("envoy/edge.yaml"), ENVOY_YAML).unwrap();
    std::fs::write(at.join("limits.yaml"), LIMITADOR_YAML).unwrap();
    std::fs::write(at.join("tokens"), "a-token-of-at-least-16-characters\n").unwrap();
    std::fs::write(
        at.join("rk.toml"),
        format!(
            "[store]\nkind = \"sqlite\"\npath = \"counts.db\"\n\n\
             [listen.tls.http]\ncert = \"tls/cert.pem\"\nkey = \"tls/key.pem\"\n\n\
             [envoy]\nconfig_dir = \"envoy\"\n\n\
             [limitador]\nconfig_file = \"limits.yaml\"\n\n\
             [access.decisions]\ntoken_file = \"tokens\"\n\n{LIMIT}"
        ),
    )
    .unwrap();
    let config = at.join("rk.toml");
    let config = config.to_str().unwrap();
    let output = ratekeeper_in(elsewhere.path(), &["check", "--config", config], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let inside = |file: &str| at.join(file).display().to_string();
    assert!(
        line(&stdout, "store:").starts_with(&format!("store: sqlite {},", inside("counts.db"))),
        "{stdout}"
    );
    assert!(
        line(&stdout, "tls:").contains(&inside("tls/cert.pem")),
        "{stdout}"
    );
    assert!(
        line(&stdout, "envoy files:").starts_with(&format!("envoy files: {} (", inside("envoy"))),
        "{stdout}"
    );
    assert!(line(&stdout, "limitador:").contains(&inside("limits.yaml")));

    // A path on the command line is the working directory's: the same
    // relative name, given as a flag, is not found there.
    let output = ratekeeper_in(
        elsewhere.path(),
        &["check", "--config", config, "--envoy-config", "envoy"],
        &[],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stdout));
    std::fs::create_dir(elsewhere.path().join("envoy")).unwrap();
    std::fs::write(elsewhere.path().join("envoy/edge.yaml"), ENVOY_YAML).unwrap();
    let output = ratekeeper_in(
        elsewhere.path(),
        &["check", "--config", config, "--envoy-config", "envoy"],
        &[],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(line(&text(&output.stdout), "envoy files:").starts_with("envoy files: envoy ("));
}
