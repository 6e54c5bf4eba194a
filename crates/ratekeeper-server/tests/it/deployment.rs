//! The deployment examples (`examples/kubernetes/`, `examples/systemd/`,
//! `examples/container/`) cross-checked against the service they run:
//! ports, paths and file names against the configuration they ship, flags
//! against `ratekeeper serve --help`, and the probes' and the unit's
//! commands against a real `ratekeeper serve`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::yaml::{documents, Yaml};
use common::ServeProcess;
use ratekeeper_formats::envoy::EnvoyConfig;
use ratekeeper_server::Config;

fn example(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The long flags `ratekeeper serve --help` lists.
fn serve_flags() -> Vec<String> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["serve", "--help"])
        .output()
        .expect("the binary runs");
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("--"))
        .map(|flag| flag.trim_end_matches([',', '=']).to_owned())
        .collect()
}

/// Asserts that `args` is `serve` followed by flags `serve` takes; the
/// value of `--config`.
fn check_serve_args(args: &[String], what: &str) -> String {
    assert_eq!(
        args.first().map(String::as_str),
        Some("serve"),
        "{what}: {args:?}"
    );
    let flags = serve_flags();
    for arg in args.iter().filter_map(|arg| arg.strip_prefix("--")) {
        assert!(
            flags.iter().any(|f| f == arg),
            "{what}: serve has no --{arg} ({flags:?})"
        );
    }
    let at = args
        .iter()
        .position(|arg| arg == "--config")
        .expect("--config");
    args.get(at + 1).expect("--config's value").clone()
}

/// `args` with the value of `--config` replaced by `path`, for a run here.
fn with_config(args: &[String], path: &Path) -> Vec<String> {
    let mut args = args.to_vec();
    let at = args
        .iter()
        .position(|arg| arg == "--config")
        .expect("--config");
    args[at + 1] = path.display().to_string();
    args
}

fn port(addr: Option<std::net::SocketAddr>) -> String {
    addr.expect("the door is on").port().to_string()
}

/// Seconds in a Go-style or ratekeeper duration ("15", "10s").
fn seconds(text: &str) -> u64 {
    text.trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} in seconds"))
}

#[tokio::test]
async fn the_kubernetes_manifests_agree_with_the_config_they_mount_and_its_probes_answer() {
    let maps = documents(&example("kubernetes/configmap.yaml"));
    let by_name = |name: &str| {
        maps.iter()
            .find(|doc| {
                doc.at("kind").str() == "ConfigMap" && doc.at("metadata.name").str() == name
            })
            .unwrap_or_else(|| panic!("no ConfigMap {name}"))
    };
    let deployment = &documents(&example("kubernetes/deployment.yaml"))[0];
    let service = &documents(&example("kubernetes/service.yaml"))[0];
    assert_eq!(deployment.at("kind").str(), "Deployment");
    assert_eq!(service.at("kind").str(), "Service");
    let pod = deployment.at("spec.template");
    let container = &pod.at("spec.containers").items()[0];

    // The volumes: which ConfigMap is mounted where.
    let volumes: BTreeMap<&str, &str> = pod
        .at("spec.volumes")
        .items()
        .iter()
        .map(|v| (v.at("name").str(), v.at("configMap.name").str()))
        .collect();
    let mounts: BTreeMap<&str, &str> = container
        .at("volumeMounts")
        .items()
        .iter()
        .map(|m| (volumes[m.at("name").str()], m.at("mountPath").str()))
        .collect();

    // --config names the ConfigMap's file where it is mounted.
    let args: Vec<String> = container
        .at("args")
        .items()
        .iter()
        .map(|a| a.str().to_owned())
        .collect();
    let config_path = check_serve_args(&args, "the Deployment's args");
    let config_map = by_name("ratekeeper-config");
    let (dir, file) = config_path.rsplit_once('/').expect("an absolute path");
    assert_eq!(mounts["ratekeeper-config"], dir);
    let toml = config_map.at("data").get(file).str();

    // envoyproxy/ratelimit's directory, where [envoy] config_dir says: the
    // config is read with the ConfigMap's files in a directory here (the
    // loader reads them), the same path written in its place.
    let mounted = mounts["ratekeeper-envoy-ratelimit"];
    let setting = format!("config_dir = \"{mounted}\"");
    assert!(
        toml.contains(&setting),
        "[envoy] {setting} is not in the config"
    );
    let Yaml::Map(files) = by_name("ratekeeper-envoy-ratelimit").at("data") else {
        panic!("the ratelimit ConfigMap has no files");
    };
    let dir = tempfile::tempdir().expect("a directory");
    let rules = dir.path().join("ratelimit");
    std::fs::create_dir(&rules).expect("a directory");
    for (name, text) in files {
        EnvoyConfig::from_yaml_str(text.str(), name).expect("an envoyproxy/ratelimit file");
        std::fs::write(rules.join(name), text.str()).expect("written");
    }
    let toml = toml.replace(
        &setting,
        &format!("config_dir = {:?}", rules.display().to_string()),
    );
    let config = Config::from_toml_str(&toml, "ratekeeper-config").expect("a valid config");
    assert_eq!(config.envoy.config_dir.as_deref(), Some(rules.as_path()));

    // Named container ports are the config's ports, on every interface.
    let ports: BTreeMap<&str, &str> = container
        .at("ports")
        .items()
        .iter()
        .map(|p| (p.at("name").str(), p.at("containerPort").str()))
        .collect();
    let listen = &config.listen;
    for (name, addr) in [
        ("http", listen.http),
        ("grpc", listen.grpc),
        ("admin", listen.admin),
    ] {
        let addr = addr.expect("every door on");
        assert!(
            addr.ip().is_unspecified(),
            "{name} on {addr}: the kubelet cannot reach it"
        );
        assert_eq!(ports[name], addr.port().to_string(), "containerPort {name}");
    }
    let annotations = pod.at("metadata.annotations");
    assert_eq!(annotations.get("prometheus.io/scrape").str(), "true");
    assert_eq!(
        annotations.get("prometheus.io/port").str(),
        port(listen.admin)
    );
    assert_eq!(annotations.get("prometheus.io/path").str(), "/metrics");
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(container.at(probe).at("httpGet.path").str(), path);
        assert_eq!(container.at(probe).at("httpGet.port").str(), "admin");
    }
    assert!(container.at("resources.requests").try_get("cpu").is_some());
    assert!(container
        .at("resources.requests")
        .try_get("memory")
        .is_some());
    let grace = seconds(pod.at("spec.terminationGracePeriodSeconds").str());
    assert!(
        grace > listen.connections.shutdown_grace.as_secs(),
        "terminationGracePeriodSeconds {grace} is not above shutdown_grace {:?}",
        listen.connections.shutdown_grace
    );

    // The Service selects the pods and forwards to their named ports.
    assert_eq!(service.at("spec.selector"), pod.at("metadata.labels"));
    for entry in service.at("spec.ports").items() {
        let target = entry.at("targetPort").str();
        assert_eq!(
            entry.at("port").str(),
            ports[target],
            "Service port {target}"
        );
    }

    // The pod's command runs here, the ConfigMaps as files: the probes'
    // and the scrape's paths answer on the admin port.
    let local = dir.path().join(file);
    std::fs::write(&local, &toml).expect("written");
    let args = with_config(&args, &local);
    let process = ServeProcess::start(
        &args[1..].iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    let admin = process.admin.expect("admin is on");
    for path in ["/readyz", "/healthz", "/metrics"] {
        let answer = reqwest::get(format!("http://{admin}{path}"))
            .await
            .expect("answered");
        assert_eq!(answer.status(), 200, "{path}");
    }
}

/// A systemd unit's `[Service]` settings: each key's values in order.
fn unit_settings(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut section = "";
    let mut settings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not a setting: {line}"));
        if section == "[Service]" {
            settings
                .entry(key.to_owned())
                .or_default()
                .push(value.to_owned());
        }
    }
    settings
}

#[test]
fn the_systemd_unit_runs_serve_with_its_flags_reloads_on_hup_and_stops_on_term() {
    let unit = example("systemd/ratekeeper.service");
    let settings = unit_settings(&unit);
    let one = |key: &str| match settings.get(key).map(Vec::as_slice) {
        Some([value]) => value.as_str(),
        other => panic!("{key}: {other:?}"),
    };
    let exec: Vec<String> = one("ExecStart")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(
        exec[0].starts_with('/'),
        "systemd wants an absolute path: {}",
        exec[0]
    );
    let args = &exec[1..];
    let config_path = check_serve_args(args, "ExecStart");
    // Under ProtectSystem=strict the file must be where the unit keeps its
    // configuration.
    assert!(config_path.starts_with(&format!("/etc/{}/", one("ConfigurationDirectory"))));
    assert_eq!(one("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(one("KillSignal"), "SIGTERM");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    // The soft open-file limit is raised with setrlimit: @resources must
    // stay allowed.
    for filter in &settings["SystemCallFilter"] {
        assert!(!filter.contains("@resources"), "{filter}");
    }
    let default_grace = Config::default().listen.connections.shutdown_grace;
    let stop = seconds(one("TimeoutStopSec"));
    assert!(
        stop > default_grace.as_secs(),
        "TimeoutStopSec {stop} <= shutdown_grace"
    );

    systemd_analyze(&unit);

    // The unit's command, here: on the Envoy example, reloaded by the
    // unit's signal, stopped by its KillSignal within TimeoutStopSec.
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("ratekeeper.toml");
    std::fs::write(&config, example("envoy/ratekeeper.toml")).expect("written");
    let args = with_config(args, &config);
    let mut process = ServeProcess::start(
        &args[1..].iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    process.signal("HUP");
    assert!(
        process.child.try_wait().expect("try_wait").is_none(),
        "SIGHUP ended it"
    );
    process.signal("TERM");
    let status = process.wait_exit(Duration::from_secs(stop));
    assert!(status.success(), "{status:?}");
}

/// `systemd-analyze verify` (no warning) and `security --offline` (an
/// exposure of at most 2.0 of 10) on `unit` with ExecStart's binary the
/// one built here, when systemd-analyze is installed; a visible note when
/// it is not (the checks above do not need it).
fn systemd_analyze(unit: &str) {
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("ratekeeper.service");
    let local = unit.replace(
        "/usr/local/bin/ratekeeper",
        env!("CARGO_BIN_EXE_ratekeeper"),
    );
    std::fs::write(&path, local).expect("written");
    let run = |args: &[&str]| {
        std::process::Command::new("systemd-analyze")
            .args(args)
            .arg(&path)
            .output()
    };
    let Ok(verify) = run(&["verify"]) else {
        use std::io::Write;
        let _ = std::io::stderr().lock().write_all(
            b"\n!!! NOTE: systemd-analyze is not installed: the systemd unit was checked \
              by this test's own reading only, not by systemd's.\n\n",
        );
        return;
    };
    let warnings = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && warnings.is_empty(),
        "verify: {warnings}"
    );
    let security = run(&["security", "--offline=true", "--threshold=20"]).expect("it ran");
    assert!(
        security.status.success(),
        "the unit's exposure is above 2.0:\n{}",
        String::from_utf8_lossy(&security.stdout)
    );
}

#[test]
fn the_containerfile_copies_a_config_whose_ports_it_exposes() {
    let file = example("container/Containerfile");
    let lines: Vec<&str> = file.lines().filter(|l| !l.starts_with('#')).collect();
    let instruction = |name: &str| -> Vec<&str> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(name).map(str::trim))
            .collect()
    };
    let config = Config::from_toml_str(&example("container/ratekeeper.toml"), "container")
        .expect("the image's config is valid");
    let listen = &config.listen;
    let ports: Vec<String> = [listen.http, listen.grpc, listen.admin]
        .into_iter()
        .map(|addr| {
            let addr = addr.expect("every door on");
            assert!(
                addr.ip().is_unspecified(),
                "{addr}: published ports cannot reach it"
            );
            addr.port().to_string()
        })
        .collect();
    assert_eq!(instruction("EXPOSE "), [ports.join(" ")]);
    let copy = instruction("COPY examples/container/ratekeeper.toml ");
    let cmd: Vec<String> = serde_json::from_str(instruction("CMD ")[0]).expect("CMD in JSON form");
    assert_eq!(copy, [check_serve_args(&cmd, "CMD")]);
    // The Kubernetes example runs as the image's user.
    let deployment = &documents(&example("kubernetes/deployment.yaml"))[0];
    let user = deployment.at("spec.template.spec.securityContext");
    let wanted = format!(
        "{}:{}",
        user.at("runAsUser").str(),
        user.at("runAsGroup").str()
    );
    assert_eq!(instruction("USER "), [wanted.as_str()]);
}
