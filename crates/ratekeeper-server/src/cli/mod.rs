//! The `ratekeeper` command, as a library function so that its logic is
//! documented, tested and reused like the rest (the binary only calls
//! [`run`]).
//!
//! `ratekeeper simulate --policy RATE --pattern SPEC` runs policies offline
//! over a trace or pattern and charts what they admit.
//! `ratekeeper serve` runs the service (on its built-in defaults without
//! `--config`); `ratekeeper proxy --upstream URL` puts the limits in front
//! of an HTTP app as a reverse proxy; `ratekeeper check --config FILE`
//! validates a configuration file (with the `RATEKEEPER_*` environment
//! overrides and the same flags as `serve`, or `check proxy` and
//! `proxy`'s) and explains it. `ratekeeper explain` says which limits
//! apply to a request and why the others do not. `ratekeeper import envoy
//! DIR` prints an envoyproxy/ratelimit directory as native `[[limits]]`.

mod check;
mod explain;
mod import;
mod proxy;
mod serve;
mod simulate;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use crate::config::process_vars;
use crate::config::DEFAULT_TOML;
use crate::telemetry::{LogFormat, Telemetry};
use crate::Config;
use clap::{Parser, Subcommand};

use check::{check, CheckArgs};
use explain::{explain_command, ExplainArgs};
use import::{import, ImportSource};
use proxy::{proxy, ProxyArgs};
use serve::{serve, ServeArgs};
use simulate::{simulate, SimulateArgs};

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
    /// in-memory store and loopback ports). A flag overrides the
    /// environment's RATEKEEPER_* variables, which override the file.
    Serve(ServeArgs),
    /// Run as a reverse proxy in front of an HTTP app: every request is
    /// decided against the limits, then forwarded to the upstream (bodies
    /// streamed, HTTP/1.1 or HTTP/2, WebSocket upgrades) or refused with a
    /// 429. `[listen] admin` serves health, metrics and the dashboard;
    /// `[listen] http` and `grpc` are not served. SIGHUP and a change of
    /// the file reload the limits.
    Proxy(ProxyArgs),
    /// Check what `serve` (or `check proxy …`: what `proxy`) would run
    /// with the same flags, and explain it.
    Check(CheckArgs),
    /// Say which limits apply to a request and why the others do not:
    /// an HTTP request (--method, --path, --header, --peer) or Envoy
    /// descriptors (--domain, --descriptor). Exits 0 when a limit
    /// applies, 1 when none does.
    Explain(ExplainArgs),
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

/// Runs the command line of this process: parses it and runs the
/// subcommand; the exit code to return.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Proxy(args) => proxy(args),
        Command::Check(args) => check(args),
        Command::Explain(args) => explain_command(args),
        Command::Simulate(args) => simulate(&args),
        Command::Import { source } => import(&source),
    }
}

/// The configuration at `path`, or the built-in defaults, with the
/// environment's overrides, then `overrides` (the command line's settings,
/// in the environment's form).
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

/// A door's address for `--http`, `--grpc`, `--admin`: `IP:PORT` or
/// `off`, as `[listen]` takes it.
fn parse_door(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text == "off" || text.parse::<SocketAddr>().is_ok() {
        return Ok(text.to_owned());
    }
    Err(format!(
        "{text:?} is neither an address such as 127.0.0.1:8080 or [::1]:8080 nor \"off\""
    ))
}

/// An address or network for `--trusted-proxy`: `10.0.0.0/8`, or one
/// address as its own network.
fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is neither an address nor a network such as 10.0.0.0/8"))
}
