//! The `ratekeeper` command, as a library function so that its logic is
//! documented, tested and reused like the rest (the binary only calls
//! [`run`]).
//!
//! `ratekeeper simulate --policy RATE --pattern SPEC` runs policies offline
//! over a trace or pattern and charts what they admit.
//! `ratekeeper serve` runs the service (on its built-in defaults without
//! `--config`); `ratekeeper proxy --upstream URL` puts the limits in front
//! of an HTTP app as a reverse proxy; `ratekeeper check --config FILE` validates a configuration
//! file (with the `RATEKEEPER_*` environment overrides applied) and explains
//! it. `ratekeeper import envoy DIR` prints an envoyproxy/ratelimit
//! directory as native `[[limits]]`.

mod import;
mod proxy;
mod serve;
mod simulate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{process_vars, DEFAULT_TOML};
use crate::telemetry::{LogFormat, Telemetry};
use crate::Config;
use clap::{Parser, Subcommand};

/// Rate limiting as a service.
use import::{import, ImportSource};
use proxy::{proxy, ProxyArgs};
use serve::serve;
use simulate::{simulate, SimulateArgs};

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
        /// A directory of envoyproxy/ratelimit's YAML configuration files,
        /// decided at the gRPC door beside the native limits (`[envoy]
        /// config_dir`, which this overrides); reloaded when a file
        /// changes.
        #[arg(long, value_name = "DIR")]
        envoy_config: Option<PathBuf>,
        /// A Kuadrant Limitador limits file to serve beside the limits
        /// (`[limitador] config_file`, which this overrides); reloaded
        /// when it changes.
        #[arg(long, value_name = "FILE")]
        limitador_config: Option<PathBuf>,
        /// Decide, count and report every limit but refuse nothing
        /// (`[enforcement] shadow_mode`, which this sets): for rollouts.
        #[arg(long)]
        shadow_mode: bool,
        /// How log lines are written on stderr: `text`, or `json` (one
        /// object a line).
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "RATEKEEPER_LOG_FORMAT", value_name = "FORMAT")]
        log_format: LogFormat,
    },
    /// Run as a reverse proxy in front of an HTTP app: every request is
    /// decided against the limits, then forwarded to the upstream (bodies
    /// streamed, HTTP/1.1 or HTTP/2, WebSocket upgrades) or refused with a
    /// 429. `[listen] admin` serves health, metrics and the dashboard;
    /// `[listen] http` and `grpc` are not served. SIGHUP and a change of
    /// the file reload the limits.
    Proxy {
        /// The app: an http:// or https:// URL, such as
        /// http://127.0.0.1:3000.
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
        /// Speak HTTP/2 to the upstream: with prior knowledge (h2c) to an
        /// http:// one; only HTTP/2 to an https:// one (which otherwise
        /// gets what its ALPN picks).
        #[arg(long)]
        upstream_http2: bool,
        /// A PEM file of the CA certificates an https:// upstream must be
        /// signed by (default: the system's).
        #[arg(long, value_name = "FILE")]
        upstream_ca: Option<PathBuf>,
        /// A peer (address or network, such as 10.0.0.0/8) whose
        /// X-Forwarded-For/-Proto/-Host, Forwarded and X-Real-IP are
        /// passed to the upstream; from others they are replaced by what
        /// the proxy saw. Repeatable; none by default.
        #[arg(long = "trusted-proxy", value_name = "NET", value_parser = parse_net)]
        trusted_proxies: Vec<ipnet::IpNet>,
        /// The most requests at the upstream at once, over every client;
        /// past it a request gets 503 with Retry-After: 1.
        // The default is proxy::DEFAULT_MAX_UPSTREAM_REQUESTS (asserted
        // below the enum).
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), value_name = "N")]
        max_upstream_requests: u32,
        /// Decide, count and report every limit but refuse nothing
        /// (`[enforcement] shadow_mode`, which this sets): for rollouts.
        #[arg(long)]
        shadow_mode: bool,
        /// How log lines are written on stderr: `text`, or `json` (one
        /// object a line).
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "RATEKEEPER_LOG_FORMAT", value_name = "FORMAT")]
        log_format: LogFormat,
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
    /// Print another rate limiter's configuration as ratekeeper's native
    /// `[[limits]]`, deciding as `serve` does on that configuration: where
    /// it cannot, nothing is printed and the exit code is 1, unless
    /// `--allow-differences`.
    Import {
        /// Whose configuration.
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Run policies over a request trace or pattern, offline, and write
    /// the decisions as CSV and an SVG chart (offered against admitted over
    /// time, with the limit).
    Simulate(SimulateArgs),
}

// `--max-upstream-requests`'s default is the library's.
const _: () = assert!(crate::proxy::DEFAULT_MAX_UPSTREAM_REQUESTS == 1024);

/// `ratekeeper simulate`'s arguments.
/// Runs the command line of this process: parses it and runs the
/// subcommand; the exit code to return.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            watch,
            envoy_config,
            limitador_config,
            shadow_mode,
            log_format,
        } => serve(
            config,
            watch,
            envoy_config,
            limitador_config,
            shadow_mode,
            log_format,
        ),
        Command::Proxy {
            upstream,
            config,
            listen,
            watch,
            upstream_timeout,
            upstream_http2,
            upstream_ca,
            trusted_proxies,
            max_upstream_requests,
            shadow_mode,
            log_format,
        } => proxy(ProxyArgs {
            upstream,
            config,
            listen,
            watch,
            upstream_timeout,
            upstream_http2,
            upstream_ca,
            trusted_proxies,
            max_upstream_requests,
            shadow_mode,
            log_format,
        }),
        Command::Simulate(args) => simulate(&args),
        Command::Import { source } => import(&source),
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
pub(crate) fn load(path: Option<&Path>) -> Result<Config, crate::ConfigError> {
    load_with(path, &[])
}

/// [`load`], then `overrides` (the command line's settings, in the
/// environment's form).
pub(crate) fn load_with(
    path: Option<&Path>,
    overrides: &[(String, String)],
) -> Result<Config, crate::ConfigError> {
    let vars = process_vars().chain(overrides.iter().cloned());
    match path {
        Some(path) => Config::load_with_env(path, vars),
        None => Config::from_toml_str_with_env(DEFAULT_TOML, "<built-in defaults>", vars),
    }
}

pub(crate) use crate::error_chain::error_chain;

/// Sets up the logs (to stderr in `format`, `RUST_LOG` picking the level,
/// `info` by default) and the trace export the `OTEL_*` environment asks
/// for ([`crate::telemetry`]); on an error, says it and gives the exit
/// code.
pub(crate) fn init_logging(format: LogFormat) -> Result<Telemetry, ExitCode> {
    crate::telemetry::init(format).map_err(|error| {
        eprintln!("error: {}", error_chain(&error));
        ExitCode::from(2)
    })
}

/// An address or network for `--trusted-proxy`: `10.0.0.0/8`, or one
/// address as its own network.
fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is neither an address nor a network such as 10.0.0.0/8"))
}
