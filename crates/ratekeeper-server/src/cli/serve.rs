//! `ratekeeper serve`: the service on a configuration file.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::plural::count;
use crate::serve::{Options, Service};

/// Rate limiting as a service.
use super::{error_chain, init_logging, load_with};

pub(super) fn serve(
    path: Option<PathBuf>,
    watch: f64,
    envoy_config: Option<PathBuf>,
    limitador_config: Option<PathBuf>,
    shadow_mode: bool,
    log_format: crate::telemetry::LogFormat,
) -> ExitCode {
    let telemetry = match init_logging(log_format) {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    // A flag is an override like the environment's, applied after it, so
    // that a reload keeps it.
    let flags = [
        ("RATEKEEPER_ENVOY__CONFIG_DIR", envoy_config),
        ("RATEKEEPER_LIMITADOR__CONFIG_FILE", limitador_config),
    ];
    let mut overrides: Vec<(String, String)> = flags
        .into_iter()
        .filter_map(|(variable, path)| Some((variable.to_owned(), path?.display().to_string())))
        .collect();
    if shadow_mode {
        overrides.push((
            "RATEKEEPER_ENFORCEMENT__SHADOW_MODE".to_owned(),
            "true".to_owned(),
        ));
    }
    let config = match load_with(path.as_deref(), &overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::serve::runtime::build(&config.runtime) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(watch) = Duration::try_from_secs_f64(watch) else {
        eprintln!("error: --watch takes a number of seconds, not {watch}");
        return ExitCode::from(2);
    };
    let options = Options {
        config_path: path,
        watch_interval: Some(watch),
        overrides,
        ..Options::default()
    };
    let tls = config.listen.tls.clone();
    let threads = runtime_line(&config.runtime, &runtime);
    let shadow_mode = config.shadow_mode;
    let result = runtime.block_on(async move {
        let service = Service::start(config, options).await?;
        let addrs = service.addrs();
        let store = service.engine().store().kind();
        // A store the failure policy answers for until it connects.
        let connecting = if service.engine().store_state().up {
            ""
        } else {
            " not connected yet: the failure policy answers until it is"
        };
        let set = service.engine().limits();
        let limits = set.len();
        let files = set.envoy().map_or_else(String::new, |envoy| {
            let config = envoy.files().config();
            format!(
                ", {} envoyproxy/ratelimit {} in {}",
                config.limit_count(),
                limit_noun(config.limit_count()),
                count(config.domains().count(), "domain")
            )
        });
        let limitador = set.limitador().config().map_or_else(String::new, |config| {
            format!(
                ", {} Limitador {} in {}",
                config.limits().len(),
                limit_noun(config.limits().len()),
                count(set.limitador().namespace_count(), "namespace")
            )
        });
        // Where it listens, on stdout; a closed stdout must not stop the
        // service, so write errors are ignored.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "ratekeeper {} ({store} store{connecting}, {}{files}{limitador})",
            env!("CARGO_PKG_VERSION"),
            count(limits, "limit")
        );
        let _ = writeln!(out, "{threads}");
        if shadow_mode {
            let _ = writeln!(
                out,
                "shadow mode: every limit decides and reports, none refuses ([enforcement])"
            );
        }
        if let Some(addr) = addrs.http {
            let scheme = if tls.http.is_some() { "https" } else { "http" };
            let _ = writeln!(
                out,
                "http  {scheme}://{addr}{}  (POST /v1/check, GET /v1/auth)",
                tls_note(tls.http.as_ref())
            );
        }
        if let Some(addr) = addrs.grpc {
            let _ = writeln!(
                out,
                "grpc  {addr}{}  (envoy.service.ratelimit.v3.RateLimitService)",
                tls_note(tls.grpc.as_ref())
            );
        }
        if let Some(addr) = addrs.admin {
            let _ = writeln!(
                out,
                "admin {}://{addr}{}  (dashboard /, /metrics, /v1/stats, /healthz, /readyz)",
                if tls.admin.is_some() { "https" } else { "http" },
                tls_note(tls.admin.as_ref())
            );
        }
        let _ = out.flush();
        drop(out);
        service.run().await
    });
    // The traces still queued, now that the runtime has stopped.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// The banner's line about the runtime: its workers as the runtime
/// reports them, and where the number came from.
fn runtime_line(
    config: &crate::config::RuntimeConfig,
    runtime: &tokio::runtime::Runtime,
) -> String {
    use crate::config::{available_cpus, WorkerThreads};
    let workers = runtime.metrics().num_workers();
    let cpus = available_cpus();
    let cpus = format!("{} available", count(cpus, "CPU"));
    let why = match config.worker_threads {
        WorkerThreads::Auto => format!("auto: {cpus}"),
        WorkerThreads::Fixed(_) => format!("runtime.worker_threads; {cpus}"),
    };
    format!("runtime {} ({why})", count(workers, "worker thread"))
}

/// ` TLS` or ` mTLS` after a door's address in the banner.
fn tls_note(files: Option<&crate::config::TlsFiles>) -> &'static str {
    match files {
        Some(files) if files.client_ca.is_some() => " mTLS",
        Some(_) => " TLS",
        None => "",
    }
}

/// `limit` or `limits`, after a number written before another word.
fn limit_noun(n: usize) -> &'static str {
    if n == 1 {
        "limit"
    } else {
        "limits"
    }
}
