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
use crate::serve::{Options, Service};

use super::{error_chain, init_logging, load_with};

/// What `ratekeeper proxy` was told.
#[derive(Debug)]
pub(super) struct ProxyArgs {
    pub(super) upstream: String,
    pub(super) config: Option<PathBuf>,
    pub(super) listen: SocketAddr,
    pub(super) watch: f64,
    pub(super) upstream_timeout: f64,
    pub(super) upstream_http2: bool,
    pub(super) upstream_ca: Option<PathBuf>,
    pub(super) trusted_proxies: Vec<IpNet>,
    pub(super) max_upstream_requests: u32,
    pub(super) shadow_mode: bool,
    pub(super) log_format: crate::telemetry::LogFormat,
}

pub(super) fn proxy(args: ProxyArgs) -> ExitCode {
    let telemetry = match init_logging(args.log_format) {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let Ok(watch) = Duration::try_from_secs_f64(args.watch) else {
        eprintln!(
            "error: --watch takes a number of seconds, not {}",
            args.watch
        );
        return ExitCode::from(2);
    };
    let mut options = ProxyOptions::default();
    match Duration::try_from_secs_f64(args.upstream_timeout) {
        Ok(timeout) if !timeout.is_zero() => options.response_timeout = timeout,
        _ => {
            eprintln!(
                "error: --upstream-timeout takes a number of seconds above 0, not {}",
                args.upstream_timeout
            );
            return ExitCode::from(2);
        }
    }
    options.upstream_http2 = args.upstream_http2;
    options.upstream_ca = args.upstream_ca;
    options.trusted_proxies = args.trusted_proxies;
    options.max_upstream_requests =
        usize::try_from(args.max_upstream_requests).unwrap_or(usize::MAX);
    // A flag is an override like the environment's, applied after it, so
    // that a reload keeps it.
    let overrides: Vec<(String, String)> = if args.shadow_mode {
        vec![(
            "RATEKEEPER_ENFORCEMENT__SHADOW_MODE".to_owned(),
            "true".to_owned(),
        )]
    } else {
        Vec::new()
    };
    let mut config = match load_with(args.config.as_deref(), &overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    // The proxy and the admin port only: the decision doors are `serve`'s.
    config.listen.http = None;
    config.listen.grpc = None;
    let upstream: axum::http::Uri = match args.upstream.parse() {
        Ok(uri) => uri,
        Err(error) => {
            let upstream = crate::config::redact_url(&args.upstream);
            eprintln!("error: --upstream {upstream:?} is not a URL: {error}");
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
    let mut door = ProxyDoor::new(args.listen, upstream.clone());
    door.options = options;
    let service_options = Options {
        config_path: args.config,
        watch_interval: Some(watch),
        overrides,
        proxy: Some(door),
        ..Options::default()
    };
    let tls = config.listen.tls.clone();
    let shadow_mode = config.shadow_mode;
    let result = runtime.block_on(async move {
        let service = Service::start(config, service_options).await?;
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
