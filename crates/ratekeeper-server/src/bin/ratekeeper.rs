//! The `ratekeeper` command: see [`ratekeeper_server::cli`].

use std::process::ExitCode;

/// mimalloc rather than the system's allocator: after a flood of
/// connections (hostile or not) glibc's malloc kept most of the memory
/// they had used (scripts/hostile.sh: 170 of 197 MB after a zero-window
/// attack, 91 of 115 MB after a flood of TLS handshakes), where mimalloc
/// gives it back to the system (38 and 8 MB); its peaks were lower too.
/// A small C library, built by its crate.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ratekeeper_server::cli::run()
}
