//! `ratekeeper check`: what `serve` or `proxy` would run, checked and
//! explained, without binding a port or opening the store.
//!
//! `check` takes `serve`'s command line (`check --config FILE --http off
//! --envoy-config DIR`), `check serve …` the same, and `check proxy …`
//! `proxy`'s (`check proxy --upstream URL --config FILE`): put `check`
//! before the command to know what it would run.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::proxy::{prepare, ProxyArgs};
use super::serve::ServeArgs;
use crate::config::DEFAULT_TOML;
use crate::Config;

/// What `ratekeeper check` takes.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct CheckArgs {
    /// Print the built-in default configuration instead.
    #[arg(long, conflicts_with = "config")]
    print_default: bool,
    /// `serve`'s flags: check what `ratekeeper serve` would run with them.
    #[command(flatten)]
    serve: ServeArgs,
    /// Which command to check, with its flags; `serve` without one.
    #[command(subcommand)]
    command: Option<CheckCommand>,
}

/// The command `ratekeeper check` checks.
#[derive(Debug, Subcommand)]
enum CheckCommand {
    /// Check what `ratekeeper serve` would run with these flags.
    Serve(ServeArgs),
    /// Check what `ratekeeper proxy` would run with these flags: the
    /// proxy and the admin door (the HTTP and gRPC decision doors are
    /// not served).
    Proxy(ProxyArgs),
}

/// Runs `ratekeeper check`: the explanation and `ok` on stdout, warnings
/// on stderr; exit code 2 on an error.
pub(super) fn check(args: CheckArgs) -> ExitCode {
    if args.print_default {
        print!("{DEFAULT_TOML}");
        return ExitCode::SUCCESS;
    }
    let proxy = matches!(args.command, Some(CheckCommand::Proxy(_)));
    let checked = match &args.command {
        None => explain_serve(&args.serve),
        Some(CheckCommand::Serve(serve)) => explain_serve(serve),
        Some(CheckCommand::Proxy(proxy)) => explain_proxy(proxy),
    };
    match checked {
        Ok((explained, config)) => {
            print!("{explained}");
            for warning in config.warnings_when_serving(proxy) {
                eprintln!("warning: {warning}");
            }
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn explain_serve(args: &ServeArgs) -> Result<(String, Config), String> {
    let config = args.load().map_err(|error| error.to_string())?;
    Ok((config.explain(), config))
}

fn explain_proxy(args: &ProxyArgs) -> Result<(String, Config), String> {
    let prepared = prepare(args)?;
    let door = &prepared.door;
    // What the proxy checks at its start, before any port or store.
    crate::proxy::Upstream::new(&door.upstream, &door.options)
        .map_err(|error| super::error_chain(&error))?;
    let upstream = crate::config::redact_url(&door.upstream.to_string());
    let explained = prepared.config.explain_proxy(door.addr, &upstream);
    Ok((explained, prepared.config))
}
