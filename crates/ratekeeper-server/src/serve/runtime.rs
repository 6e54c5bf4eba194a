//! The async runtime the service runs on, sized by `[runtime]`.

use tokio::runtime::{Builder, Runtime};

use crate::config::RuntimeConfig;

/// The name of the runtime's threads (as `top -H` and
/// `/proc/PID/task/*/comm` show them).
pub(crate) const THREAD_NAME: &str = "rk-worker";

/// A multi-threaded runtime with `config`'s worker threads, timers and
/// I/O.
///
/// Multi-threaded even for one thread: measured on one CPU, a
/// single-threaded runtime cost the same per gRPC request (7.2-7.7 µs of
/// CPU at 64 in flight, both) once HTTP/2 calls run in their connection's
/// task, so one flavour serves every size. Connections move between the
/// workers as their load changes; each connection's calls run on the
/// worker that serves it.
pub fn build(config: &RuntimeConfig) -> std::io::Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()
}
