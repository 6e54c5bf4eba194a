//! `ratekeeper import envoy DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::config::envoy::{import_dir, LoadOptions};

/// What `ratekeeper import` reads.
#[derive(Debug, Subcommand)]
pub(crate) enum ImportSource {
    /// An envoyproxy/ratelimit configuration directory (every file in it
    /// and its subdirectories, as `ratekeeper serve --envoy-config` reads
    /// it): prints the native TOML on stdout, warnings on stderr.
    Envoy {
        /// The directory.
        dir: PathBuf,
        /// Files with the same domain add their descriptors to it
        /// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
        #[arg(long)]
        merge_domains: bool,
        /// Skip files and directories whose names start with `.`
        /// (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES). On by default,
        /// as in ratekeeper's `[envoy]` table: a Kubernetes ConfigMap mount
        /// holds its files twice, under `..data` dot directories.
        #[arg(
            long,
            value_name = "BOOL",
            default_value_t = true,
            num_args = 0..=1,
            default_missing_value = "true",
            action = clap::ArgAction::Set
        )]
        ignore_dot_files: bool,
    },
}

/// Runs `ratekeeper import`.
pub(crate) fn import(source: &ImportSource) -> ExitCode {
    match source {
        ImportSource::Envoy {
            dir,
            merge_domains,
            ignore_dot_files,
        } => {
            let options = LoadOptions::default()
                .merge_domains(*merge_domains)
                .ignore_dot_files(*ignore_dot_files);
            match import_dir(dir, &options) {
                Ok(imported) => {
                    for warning in &imported.warnings {
                        eprintln!("warning: {warning}");
                    }
                    print!("{}", imported.toml);
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {}", super::error_chain(&error));
                    ExitCode::from(2)
                }
            }
        }
    }
}
