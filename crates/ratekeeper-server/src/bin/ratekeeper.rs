//! The `ratekeeper` command.
//!
//! `ratekeeper simulate --policy RATE --pattern SPEC` runs policies offline
//! over a trace or pattern and charts what they admit.
//! `ratekeeper serve` runs the service (on its built-in defaults without
//! `--config`); `ratekeeper proxy --upstream URL` puts the limits in front
//! of an HTTP app as a reverse proxy; `ratekeeper check --config FILE` validates a configuration
//! file (with the `RATEKEEPER_*` environment overrides applied) and explains
//! it.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use ratekeeper_server::config::{process_vars, DEFAULT_TOML};
use ratekeeper_server::serve::{ConfigWatcher, Options, Service};
use ratekeeper_server::Config;

/// Rate limiting as a service.
#[derive(Debug, Parser)]
#[command(name = "ratekeeper", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the service: the HTTP decision API, Envoy's gRPC API and the
    /// admin port. Without --config, on the built-in defaults (an
    /// in-memory store and loopback ports).
    Serve {
        /// The configuration file; reloaded on SIGHUP and when it changes.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// How often to check the file for changes, in seconds; 0 turns
        /// the check off (SIGHUP still reloads).
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        watch: f64,
    },
    /// Run as a reverse proxy in front of an HTTP app: every request is
    /// decided against the limits, then forwarded to the upstream (bodies
    /// streamed) or refused with a 429. SIGHUP reloads the limits.
    Proxy {
        /// The app: an http:// URL, such as http://127.0.0.1:3000.
        #[arg(long, value_name = "URL")]
        upstream: String,
        /// The configuration file; without one, the built-in defaults.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Where to listen (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8000", value_name = "ADDR")]
        listen: SocketAddr,
        /// How often to check the file for changes, in seconds; 0 turns
        /// the check off (SIGHUP still reloads).
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        watch: f64,
        /// How long the upstream may take to start its response, in
        /// seconds, before the client gets 504 Gateway Timeout.
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        upstream_timeout: f64,
    },
    /// Check a configuration file and explain what it sets up.
    Check {
        /// The configuration file; without one, the built-in defaults.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Print the built-in default configuration instead.
        #[arg(long, conflicts_with = "config")]
        print_default: bool,
    },
    /// Run policies over a request trace or pattern, offline, and write
    /// the decisions as CSV and an SVG chart (offered against admitted over
    /// time, with the limit).
    Simulate(SimulateArgs),
}

/// `ratekeeper simulate`'s arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "pattern"])))]
struct SimulateArgs {
    /// A policy, RATE or KIND:RATE, such as "100/minute burst 20" (a token
    /// bucket, the service's default) or
    /// "sliding_log:100/minute"; KIND is token_bucket, gcra, fixed_window,
    /// sliding_log or sliding_window. Repeat to put several on one chart.
    #[arg(long = "policy", required = true, value_name = "[KIND:]RATE")]
    policies: Vec<String>,
    /// Run each --policy given without a KIND under all five kinds (the
    /// window kinds without the burst), on one chart.
    #[arg(long)]
    compare: bool,
    /// A trace file: one request a line, "TIME" or "TIME,COST", TIME in seconds
    /// ("1.5") or milliseconds ("1500ms"), "#" comments.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// A request pattern, such as "steady:50/s,burst:200@10s"; phases
    /// steady:R/U, ramp:A..B/U (each optionally "for D"), idle:D, burst:N
    /// and burst:N@T.
    #[arg(long, value_name = "SPEC")]
    pattern: Option<String>,
    /// Write the decisions as CSV here ("-" for stdout; the summary then
    /// goes to stderr).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the chart as SVG here.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The chart's bucket width, such as "1s" or "250ms"; chosen from the
    /// span when left out.
    #[arg(long, value_name = "DURATION")]
    bucket: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, watch } => serve(config, watch),
        Command::Proxy {
            upstream,
            config,
            listen,
            watch,
            upstream_timeout,
        } => proxy(&upstream, config, listen, watch, upstream_timeout),
        Command::Simulate(args) => simulate(&args),
        Command::Check {
            print_default: true,
            ..
        } => {
            print!("{DEFAULT_TOML}");
            ExitCode::SUCCESS
        }
        Command::Check { config, .. } => match load(config.as_deref()) {
            Ok(config) => {
                print!("{}", config.explain());
                for warning in config.warnings() {
                    eprintln!("warning: {warning}");
                }
                println!("ok");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(2)
            }
        },
    }
}

/// The configuration at `path`, or the built-in defaults, with the
/// environment's overrides.
fn load(path: Option<&Path>) -> Result<Config, ratekeeper_server::ConfigError> {
    match path {
        Some(path) => Config::load_with_env(path, process_vars()),
        None => Config::from_toml_str_with_env(DEFAULT_TOML, "<built-in defaults>", process_vars()),
    }
}

fn serve(path: Option<PathBuf>, watch: f64) -> ExitCode {
    init_logging();
    let config = match load(path.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match ratekeeper_server::serve::runtime::build(&config.runtime) {
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
    let mut options = Options::default();
    options.config_path = path;
    options.watch_interval = Some(watch);
    let tls = config.listen.tls.clone();
    let threads = runtime_line(&config.runtime, &runtime);
    let result = runtime.block_on(async move {
        let service = Service::start(config, options).await?;
        let addrs = service.addrs();
        let store = service.engine().store().kind();
        let limits = service.engine().limits().len();
        // Where it listens, on stdout; a closed stdout must not stop the
        // service, so write errors are ignored.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "ratekeeper {} ({store} store, {limits} limits)",
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(out, "{threads}");
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
    config: &ratekeeper_server::config::RuntimeConfig,
    runtime: &tokio::runtime::Runtime,
) -> String {
    use ratekeeper_server::config::{available_cpus, WorkerThreads};
    let workers = runtime.metrics().num_workers();
    let cpus = available_cpus();
    let cpus = format!("{cpus} CPU{} available", if cpus == 1 { "" } else { "s" });
    let why = match config.worker_threads {
        WorkerThreads::Auto => format!("auto: {cpus}"),
        WorkerThreads::Fixed(_) => format!("runtime.worker_threads; {cpus}"),
    };
    let plural = if workers == 1 { "" } else { "s" };
    format!("runtime {workers} worker thread{plural} ({why})")
}

/// ` TLS` or ` mTLS` after a door's address in the banner.
fn tls_note(files: Option<&ratekeeper_server::config::TlsFiles>) -> &'static str {
    match files {
        Some(files) if files.client_ca.is_some() => " mTLS",
        Some(_) => " TLS",
        None => "",
    }
}

fn proxy(
    upstream: &str,
    path: Option<PathBuf>,
    listen: SocketAddr,
    watch: f64,
    upstream_timeout: f64,
) -> ExitCode {
    init_logging();
    let Ok(watch) = Duration::try_from_secs_f64(watch) else {
        eprintln!("error: --watch takes a number of seconds, not {watch}");
        return ExitCode::from(2);
    };
    let mut options = ratekeeper_server::proxy::ProxyOptions::default();
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
            let upstream = ratekeeper_server::config::redact_url(upstream);
            eprintln!("error: --upstream {upstream:?} is not a URL: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match ratekeeper_server::serve::runtime::build(&config.runtime) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), Box<dyn std::error::Error>> = runtime.block_on(async move {
        use ratekeeper_server::engine::Engine;
        let clock = std::sync::Arc::new(ratekeeper::clock::MonotonicClock::new());
        let engine = Engine::start(&config, clock).await?;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|error| format!("cannot listen on {listen}: {error}"))?;
        let addr = listener.local_addr()?;
        // The upstream URL is checked, and the signals caught, before
        // saying where the proxy listens: a signal sent as soon as the
        // address is known is never missed.
        drop(ratekeeper_server::proxy::router_with(
            engine.clone(),
            &upstream,
            &options,
        )?);
        let mut caps = [("proxy", options.connections.max_connections)];
        ratekeeper_server::listen::fit_open_files(&mut caps);
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
        ratekeeper_server::proxy::serve_proxy_with(engine, listener, upstream, &options, stop)
            .await?;
        Ok(())
    });
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

/// `ratekeeper simulate`: exit 2 on bad input, 1 when an output cannot be
/// written.
fn simulate(args: &SimulateArgs) -> ExitCode {
    use ratekeeper::duration::parse as parse_duration;
    use ratekeeper_server::simulate::{self, Options, Pattern, SimPolicy};

    fn bad(message: impl std::fmt::Display) -> ExitCode {
        eprintln!("error: {message}");
        ExitCode::from(2)
    }
    // A caret under the column an error names.
    fn caret(text: &str, column: usize) -> String {
        format!("  {text}\n  {}^", " ".repeat(column.saturating_sub(1)))
    }

    let mut policies: Vec<SimPolicy> = Vec::new();
    for text in &args.policies {
        let has_kind = text.contains(':');
        let policy = match text.parse::<SimPolicy>() {
            Ok(policy) => policy,
            Err(error) => return bad(format_args!("--policy {text:?}: {error}")),
        };
        let expanded = if args.compare && !has_kind {
            // The five kinds refuse nothing that GCRA took, but be safe.
            match SimPolicy::compare(policy.rate()) {
                Ok(all) => all,
                Err(error) => return bad(format_args!("--policy {text:?}: {error}")),
            }
        } else {
            vec![policy]
        };
        for policy in expanded {
            if !policies.contains(&policy) {
                policies.push(policy);
            }
        }
    }

    let (requests, source) = match (&args.trace, &args.pattern) {
        (Some(path), _) => {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(error) => return bad(format_args!("cannot read {}: {error}", path.display())),
            };
            match simulate::parse_trace(&bytes) {
                Ok(requests) => (requests, format!("trace {}", path.display())),
                Err(error) => return bad(format_args!("{}: {error}", path.display())),
            }
        }
        (None, Some(text)) => match text.parse::<Pattern>() {
            Ok(pattern) => (pattern.requests(), format!("pattern {pattern}")),
            Err(error) => {
                return bad(format_args!(
                    "--pattern: {error}\n{}",
                    caret(text, error.column)
                ))
            }
        },
        (None, None) => return bad("give --trace FILE or --pattern SPEC"),
    };
    if requests.is_empty() {
        return bad(format_args!("the {source} has no requests"));
    }

    let mut options = Options::default().with_progress(true);
    if let Some(text) = &args.bucket {
        match parse_duration(text) {
            Ok(bucket) if !bucket.is_zero() => options = options.with_bucket(bucket),
            Ok(_) => return bad("--bucket must be longer than 0"),
            Err(error) => return bad(format_args!("--bucket: {error}")),
        }
    }

    // `--csv -` writes the CSV to stdout, and the summary to stderr.
    let csv_to_stdout = args.csv.as_deref() == Some(Path::new("-"));
    let mut csv_out: Option<Box<dyn std::io::Write>> = match &args.csv {
        Some(_) if csv_to_stdout => Some(Box::new(std::io::stdout().lock())),
        Some(path) => match std::fs::File::create(path) {
            Ok(file) => Some(Box::new(file)),
            Err(error) => {
                eprintln!("error: cannot create {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let csv = csv_out.as_mut().map(|out| out as &mut dyn std::io::Write);
    let report = match simulate::run(&policies, &requests, &options, csv) {
        Ok(report) => report,
        Err(error @ simulate::SimulateError::Csv(_)) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
        Err(error) => return bad(error),
    };
    drop(csv_out);
    if let Some(path) = &args.svg {
        let svg = report
            .series()
            .to_svg(&format!("ratekeeper simulate: {source}"));
        if let Err(error) = std::fs::write(path, svg) {
            eprintln!("error: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let mut out: Box<dyn std::io::Write> = if csv_to_stdout {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    let _ = write!(out, "{}", report.summary());
    for (what, path) in [("decisions", &args.csv), ("chart", &args.svg)] {
        if let Some(path) = path.as_deref().filter(|p| *p != Path::new("-")) {
            let _ = writeln!(out, "wrote the {what} to {}", path.display());
        }
    }
    ExitCode::SUCCESS
}

/// An error and its causes, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    let mut last = text.clone();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors (the redis crate's I/O errors) show their source's
        // text as their own: say it once.
        if cause_text != last {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        last = cause_text;
        source = cause.source();
    }
    text
}

/// Logs to stderr; `RUST_LOG` picks the level (`info` by default).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
