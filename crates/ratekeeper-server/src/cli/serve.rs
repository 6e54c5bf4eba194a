//! `ratekeeper serve`: the service on a configuration file.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::plural::count;
use crate::serve::Service;
use crate::telemetry::LogFormat;
use crate::Config;

use super::{error_chain, init_logging, load_with, parse_door};

/// What `ratekeeper serve` (and `ratekeeper check`) takes.
#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// The configuration file; reloaded on SIGHUP and when it changes.
    #[arg(long, short)]
    pub(super) config: Option<PathBuf>,
    /// How often to check the file for changes, in seconds; 0 turns
    /// the check off (SIGHUP still reloads).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(super) watch: f64,
    /// Where the HTTP decision API listens, or `off` (`[listen] http`,
    /// which this overrides; port 0 picks a free port).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_door)]
    pub(super) http: Option<String>,
    /// Where Envoy's gRPC rate limit service listens, or `off`
    /// (`[listen] grpc`, which this overrides).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_door)]
    pub(super) grpc: Option<String>,
    /// Where health, metrics and the dashboard listen, or `off`
    /// (`[listen] admin`, which this overrides).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_door)]
    pub(super) admin: Option<String>,
    /// A directory of envoyproxy/ratelimit's YAML configuration files,
    /// decided at the gRPC door beside the native limits (`[envoy]
    /// config_dir`, which this overrides); reloaded when a file
    /// changes.
    #[arg(long, value_name = "DIR")]
    pub(super) envoy_config: Option<PathBuf>,
    /// A Kuadrant Limitador limits file to serve beside the limits
    /// (`[limitador] config_file`, which this overrides); reloaded
    /// when it changes.
    #[arg(long, value_name = "FILE")]
    pub(super) limitador_config: Option<PathBuf>,
    /// Decide, count and report every limit but refuse nothing
    /// (`[enforcement] shadow_mode`, which this sets): for rollouts.
    #[arg(long)]
    pub(super) shadow_mode: bool,
    /// How log lines are written on stderr: `text`, or `json` (one
    /// object a line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "RATEKEEPER_LOG_FORMAT", value_name = "FORMAT")]
    pub(super) log_format: LogFormat,
}

impl ServeArgs {
    /// The flags that override the configuration, in the environment's
    /// form: applied after the environment (so a flag wins over a
    /// variable, which wins over the file) and again at every reload.
    pub(super) fn overrides(&self) -> Vec<(String, String)> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        [
            ("RATEKEEPER_LISTEN__HTTP", self.http.clone()),
            ("RATEKEEPER_LISTEN__GRPC", self.grpc.clone()),
            ("RATEKEEPER_LISTEN__ADMIN", self.admin.clone()),
            ("RATEKEEPER_ENVOY__CONFIG_DIR", path(&self.envoy_config)),
            (
                "RATEKEEPER_LIMITADOR__CONFIG_FILE",
                path(&self.limitador_config),
            ),
            (
                "RATEKEEPER_ENFORCEMENT__SHADOW_MODE",
                self.shadow_mode.then(|| "true".to_owned()),
            ),
        ]
        .into_iter()
        .filter_map(|(variable, value)| Some((variable.to_owned(), value?)))
        .collect()
    }

    /// The configuration `serve` would run: the file (or the built-in
    /// defaults), the environment, then these flags.
    pub(super) fn load(&self) -> Result<Config, crate::ConfigError> {
        load_with(self.config.as_deref(), &self.overrides())
    }
}

pub(super) fn serve(args: ServeArgs) -> ExitCode {
    let telemetry = match init_logging(args.log_format) {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let overrides = args.overrides();
    let path = args.config;
    let watch = args.watch;
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
    let tls = config.listen.tls.clone();
    let threads = runtime_line(&config.runtime, &runtime);
    let shadow_mode = config.shadow_mode;
    let mut builder = Service::builder(config)
        .watch_interval(Some(watch))
        .overrides(overrides);
    if let Some(path) = path {
        builder = builder.config_file(path);
    }
    let result = runtime.block_on(async move {
        let service = builder.start().await?;
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
