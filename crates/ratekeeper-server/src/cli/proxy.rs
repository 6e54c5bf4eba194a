//! `ratekeeper proxy`: the limits in front of an HTTP app.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::serve::ConfigWatcher;

/// Rate limiting as a service.
use super::{error_chain, init_logging, load};

pub(super) fn proxy(
    upstream: &str,
    path: Option<PathBuf>,
    listen: SocketAddr,
    watch: f64,
    upstream_timeout: f64,
    log_format: crate::telemetry::LogFormat,
) -> ExitCode {
    let telemetry = match init_logging(log_format) {
        Ok(telemetry) => telemetry,
        Err(code) => return code,
    };
    let Ok(watch) = Duration::try_from_secs_f64(watch) else {
        eprintln!("error: --watch takes a number of seconds, not {watch}");
        return ExitCode::from(2);
    };
    let mut options = crate::proxy::ProxyOptions::default();
    match Duration::try_from_secs_f64(upstream_timeout) {
        Ok(timeout) if !timeout.is_zero() => options.response_timeout = timeout,
        _ => {
            eprintln!(
                "error: --upstream-timeout takes a number of seconds above 0, not {upstream_timeout}"
            );
            return ExitCode::from(2);
        }
    }
    let config = match load(path.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    options.connections = config.listen.connections.clone();
    let upstream: axum::http::Uri = match upstream.parse() {
        Ok(uri) => uri,
        Err(error) => {
            let upstream = crate::config::redact_url(upstream);
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
    let result: Result<(), Box<dyn std::error::Error>> = runtime.block_on(async move {
        use crate::engine::Engine;
        // Fixed windows on the wall clock's minutes, as `serve`'s.
        let clock = std::sync::Arc::new(ratekeeper::clock::MonotonicClock::since_unix_epoch());
        let engine = Engine::start(&config, clock).await?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|error| format!("cannot listen on {listen}: {error}"))?;
        let addr = listener.local_addr()?;
        // The upstream URL is checked, and the signals caught, before
        // saying where the proxy listens: a signal sent as soon as the
        // address is known is never missed.
        drop(crate::proxy::router_with(
            engine.clone(),
            &upstream,
            &options,
        )?);
        let mut caps = [("proxy", options.connections.max_connections)];
        crate::listen::fit_open_files(&mut caps);
        options.connections.max_connections = caps[0].1;
        let signals = ProxySignals::catch()?;
        let _watcher = ConfigWatcher::spawn(engine.clone(), path, Some(watch));
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "ratekeeper {} proxy http://{addr} -> {upstream} ({} store, {} limits)",
            env!("CARGO_PKG_VERSION"),
            engine.store().kind(),
            engine.limits().len()
        );
        let _ = out.flush();
        drop(out);
        let stop = signals.run();
        crate::proxy::serve_proxy_with(engine, listener, upstream, &options, stop).await?;
        Ok(())
    });
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_chain(&*error));
            ExitCode::FAILURE
        }
    }
}

/// The signals that stop `ratekeeper proxy`: SIGTERM and Ctrl-C (SIGHUP
/// reloads, through its [`ConfigWatcher`]).
struct ProxySignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ProxySignals {
    fn catch() -> std::io::Result<ProxySignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(ProxySignals {
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ProxySignals {})
    }

    /// Completes on SIGTERM or Ctrl-C.
    fn run(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        #[cfg(unix)]
        let ProxySignals { mut terminate } = self;
        async move {
            #[cfg(unix)]
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
