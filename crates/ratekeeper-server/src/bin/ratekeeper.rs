//! The `ratekeeper` command: see [`ratekeeper_server::cli`].

use std::process::ExitCode;

/// jemalloc rather than the system's allocator, purging on a thread of
/// its own with a 1 s decay (`.cargo/config.toml` sets it when the binary
/// is built): after a flood of connections, hostile or not, the memory
/// they used goes back to the system within seconds of the flood's end,
/// whether or not requests follow (scripts/hostile.sh). glibc's malloc
/// kept most of it (170 of 197 MB after a zero-window attack), and so did
/// mimalloc after stalled bodies (158 of 166 MB ten seconds later): both
/// give memory back when the threads that freed it allocate again, and
/// after an attack those threads sit idle. A C library, built by its
/// crate.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    ratekeeper_server::cli::run()
}
