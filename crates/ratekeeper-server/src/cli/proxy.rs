//! `ratekeeper proxy`: the limits in front of an HTTP app, run as the
//! service with the proxy as its door (beside `[listen] admin`; the HTTP
//! and gRPC decision doors are not served).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ipnet::IpNet;

use crate::proxy::{ProxyDoor, ProxyOptions};
use crate::serve::Service;
use crate::telemetry::LogFormat;
use crate::Config;

use super::{error_chain, init_logging, load_with, parse_door, parse_net};

/// What `ratekeeper proxy` (and `ratekeeper check proxy`) takes.
#[derive(Debug, clap::Args)]
pub(super) struct ProxyArgs {
    /// The app: an http:// or https:// URL, such as
    /// http://127.0.0.1:3000.
    #[arg(long, value_name = "URL")]
    pub(super) upstream: String,
    /// The configuration file; without one, the built-in defaults.
    #[arg(long, short)]
    pub(super) config: Option<PathBuf>,
    /// Where to listen (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR")]
    pub(super) listen: SocketAddr,
    /// Where health, metrics and the dashboard listen, or `off`
    /// (`[listen] admin`, which this overrides).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_door)]
    pub(super) admin: Option<String>,
    /// How often to check the file for changes, in seconds; 0 turns
    /// the check off (SIGHUP still reloads).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(super) watch: f64,
    /// How long the upstream may take to start its response, in
    /// seconds, before the client gets 504 Gateway Timeout.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub(super) upstream_timeout: f64,
    /// Speak HTTP/2 to the upstream: with prior knowledge (h2c) to an
    /// http:// one; only HTTP/2 to an https:// one (which otherwise
    /// gets what its ALPN picks).
    #[arg(long)]
    pub(super) upstream_http2: bool,
    /// A PEM file of the CA certificates an https:// upstream must be
    /// signed by (default: the system's).
    #[arg(long, value_name = "FILE")]
    pub(super) upstream_ca: Option<PathBuf>,
    /// A peer (address or network, such as 10.0.0.0/8) whose
    /// X-Forwarded-For/-Proto/-Host, Forwarded and X-Real-IP are
    /// passed to the upstream; from others they are replaced by what
    /// the proxy saw. Repeatable; none by default.
    #[arg(long = "trusted-proxy", value_name = "NET", value_parser = parse_net)]
    pub(super) trusted_proxies: Vec<IpNet>,
    /// The most requests at the upstream at once, over every client;
    /// past it a request gets 503 with Retry-After: 1.
    // The default is proxy::DEFAULT_MAX_UPSTREAM_REQUESTS (asserted
    // below).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
    pub(super) max_upstream_requests: u32,
    /// Decide, count and report every limit but refuse nothing
    /// (`[enforcement] shadow_mode`, which this sets): for rollouts.
    #[arg(long)]
    pub(super) shadow_mode: bool,
    /// How log lines are written on stderr: `text`, or `json` (one
    /// object a line).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "RATEKEEPER_LOG_FORMAT", value_name = "FORMAT")]
    pub(super) log_format: LogFormat,
}

// `--max-upstream-requests`'s default is the library's.
const _: () = assert!(crate::proxy::DEFAULT_MAX_UPSTREAM_REQUESTS == 1024);

/// What `ratekeeper proxy` runs, checked: the configuration (the proxy and
/// the admin door only), the proxy door, the flags' overrides and the
/// watch interval.
pub(super) struct Prepared {
    pub(super) config: Config,
    pub(super) door: ProxyDoor,
    pub(super) overrides: Vec<(String, String)>,
    pub(super) watch: Duration,
}

/// Checks `args` and loads the configuration as `ratekeeper proxy` runs
/// it; on an error, the message for stderr.
pub(super) fn prepare(args: &ProxyArgs) -> Result<Prepared, String> {
    let watch = Duration::try_from_secs_f64(args.watch)
        .map_err(|_| format!("--watch takes a number of seconds, not {}", args.watch))?;
    let response_timeout = match Duration::try_from_secs_f64(args.upstream_timeout) {
        Ok(timeout) if !timeout.is_zero() => timeout,
        _ => {
            return Err(format!(
                "--upstream-timeout takes a number of seconds above 0, not {}",
                args.upstream_timeout
            ))
        }
    };
    let options = ProxyOptions {
        response_timeout,
        upstream_http2: args.upstream_http2,
        upstream_ca: args.upstream_ca.clone(),
        trusted_proxies: args.trusted_proxies.clone(),
        max_upstream_requests: usize::try_from(args.max_upstream_requests).unwrap_or(usize::MAX),
        ..ProxyOptions::default()
    };
    // A flag is an override like the environment's, applied after it, so
    // that a reload keeps it.
    let flags = [
        ("RATEKEEPER_LISTEN__ADMIN", args.admin.clone()),
        (
            "RATEKEEPER_ENFORCEMENT__SHADOW_MODE",
            args.shadow_mode.then(|| "true".to_owned()),
        ),
    ];
    let overrides: Vec<(String, String)> = flags
        .into_iter()
        .filter_map(|(variable, value)| Some((variable.to_owned(), value?)))
        .collect();
    let mut config =
        load_with(args.config.as_deref(), &overrides).map_err(|error| error.to_string())?;
    // The proxy and the admin port only: the decision doors are `serve`'s.
    config.listen.http = None;
    config.listen.grpc = None;
    let upstream: axum::http::Uri = args.upstream.parse().map_err(|error| {
        let upstream = crate::config::redact_url(&args.upstream);
        format!("--upstream {upstream:?} is not a URL: {error}")
    })?;
    let mut door = ProxyDoor::new(args.listen, upstream);
    door.options = options;
    Ok(Prepared {
        config,
        door,
        overrides,
        watch,
    })
}

pub(super) fn proxy(args: ProxyArgs) -> ExitCode {
    let telemetry = match init_logging(args.log_format) {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let Prepared {
        config,
        door,
        overrides,
        watch,
    } = match prepare(&args) {
        Ok(prepared) => prepared,
        Err(message) => {
            eprintln!("error: {message}");
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
    let upstream = door.upstream.clone();
    let tls = config.listen.tls.clone();
    let shadow_mode = config.shadow_mode;
    let mut builder = Service::builder(config)
        .watch_interval(Some(watch))
        .overrides(overrides)
        .proxy(door);
    if let Some(path) = args.config {
        builder = builder.config_file(path);
    }
    let result = runtime.block_on(async move {
        let service = builder.start().await?;
        let addrs = service.addrs();
        let engine = service.engine();
        // Where it listens, on stdout, the proxy first; a closed stdout
        // must not stop the service, so write errors are ignored.
        let mut out = std::io::stdout().lock();
        if let Some(addr) = addrs.proxy {
            let scheme = if tls.proxy.is_some() { "https" } else { "http" };
            // Only the limits for HTTP requests apply here: say how many
            // of the configured ones that is.
            let limits = engine.limits();
            let for_http = limits.iter().filter(|l| l.http_rule().is_some()).count();
            let _ = writeln!(
                out,
                "ratekeeper {} proxy {scheme}://{addr} -> {} ({} store, {for_http} of {} for \
                 HTTP requests)",
                env!("CARGO_PKG_VERSION"),
                crate::config::redact_url(&upstream.to_string()),
                engine.store().kind(),
                crate::plural::count(limits.len(), "limit")
            );
        }
        if let Some(addr) = addrs.admin {
            let scheme = if tls.admin.is_some() { "https" } else { "http" };
            let _ = writeln!(
                out,
                "admin {scheme}://{addr}  (dashboard /, /metrics, /v1/stats, /healthz, /readyz)"
            );
        }
        if shadow_mode {
            let _ = writeln!(
                out,
                "shadow mode: every limit decides and reports, none refuses ([enforcement])"
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
