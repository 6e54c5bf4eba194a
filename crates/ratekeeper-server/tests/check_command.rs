//! `ratekeeper check`, run as a real process.

use std::process::{Command, Output};

fn ratekeeper(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.args(args);
    // Only the variables a test sets: none leak in from the machine.
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
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
    let output = ratekeeper(&["check"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}
