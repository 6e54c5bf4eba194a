//! `ratekeeper import envoy DIR`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use ratekeeper_formats::envoy::{import_dir, LoadOptions, NoteKind};

/// What `ratekeeper import` reads.
#[derive(Debug, Subcommand)]
pub(crate) enum ImportSource {
    /// An envoyproxy/ratelimit configuration directory (every file in it
    /// and its subdirectories, as `ratekeeper serve --envoy-config` reads
    /// it): prints native TOML on stdout that decides every request as
    /// `serve --envoy-config DIR` does.
    ///
    /// Warnings go to stderr: what the files hold that is ignored, and
    /// what the output only reports differently (a status's limit name, a
    /// monthly rate shown per week, stats names). Where some request would
    /// be decided differently (`replaces` that drops a limit, `quota_mode`,
    /// keys whose KEY_VALUE texts meet, a domain with nothing to write),
    /// each difference is named on stderr, nothing is printed, and the
    /// exit code is 1; with --allow-differences the TOML is printed anyway,
    /// each difference marked `# differs:` in it. Exit code 2: the
    /// directory does not load.
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
        /// Print the TOML (exit code 0) even where it decides some requests
        /// differently from `serve --envoy-config`; each difference is
        /// still named on stderr and marked `# differs:` in the output.
        #[arg(long)]
        allow_differences: bool,
    },
}

/// Runs `ratekeeper import`.
pub(crate) fn import(source: &ImportSource) -> ExitCode {
    match source {
        ImportSource::Envoy {
            dir,
            merge_domains,
            ignore_dot_files,
            allow_differences,
        } => {
            let options = LoadOptions::default()
                .merge_domains(*merge_domains)
                .ignore_dot_files(*ignore_dot_files);
            let imported = match import_dir(dir, &options) {
                Ok(imported) => imported,
                Err(error) => {
                    eprintln!("error: {}", super::error_chain(&error));
                    return ExitCode::from(2);
                }
            };
            for warning in &imported.warnings {
                eprintln!("warning: {warning}");
            }
            for note in &imported.notes {
                match note.kind {
                    NoteKind::Difference => eprintln!("difference: {note}"),
                    // A warning, or a kind a later ratekeeper-formats adds
                    // (NoteKind is non_exhaustive): reported, not refused.
                    _ => eprintln!("warning: {note}"),
                }
            }
            let differences = imported
                .notes
                .iter()
                .filter(|note| note.kind == NoteKind::Difference)
                .count();
            if differences > 0 && !allow_differences {
                eprintln!(
                    "error: the import would decide {differences} thing{s} differently from \
                     `ratekeeper serve --envoy-config {dir}` (each named above); nothing was \
                     printed. Serve the directory with --envoy-config, change the files, or pass \
                     --allow-differences to print the TOML with each difference marked \
                     `# differs:`",
                    s = if differences == 1 { "" } else { "s" },
                    dir = dir.display()
                );
                return ExitCode::from(1);
            }
            print!("{}", imported.toml);
            ExitCode::SUCCESS
        }
    }
}
