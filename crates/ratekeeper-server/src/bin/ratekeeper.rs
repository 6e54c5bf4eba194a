//! The `ratekeeper` command.
//!
//! `ratekeeper check --config FILE` validates a configuration file (with
//! the `RATEKEEPER_*` environment overrides applied) and explains it; the
//! service itself (`ratekeeper serve`) comes with the front doors.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ratekeeper_server::config::{process_vars, DEFAULT_TOML};
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
    /// Check a configuration file and explain what it sets up.
    Check {
        /// The configuration file; without one, the built-in defaults.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Print the built-in default configuration instead.
        #[arg(long, conflicts_with = "config")]
        print_default: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            print_default: true,
            ..
        } => {
            print!("{DEFAULT_TOML}");
            ExitCode::SUCCESS
        }
        Command::Check { config, .. } => {
            let loaded = match &config {
                Some(path) => Config::load_with_env(path, process_vars()),
                None => Config::from_toml_str_with_env(
                    DEFAULT_TOML,
                    "<built-in defaults>",
                    process_vars(),
                ),
            };
            match loaded {
                Ok(config) => {
                    print!("{}", config.explain());
                    println!("ok");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
