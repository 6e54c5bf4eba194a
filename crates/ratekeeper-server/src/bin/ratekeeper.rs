//! The `ratekeeper` command: see [`ratekeeper_server::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    ratekeeper_server::cli::run()
}
