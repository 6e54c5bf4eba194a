//! `[runtime]`: the threads that serve the front doors.
//!
//! By default the service runs one worker thread per CPU it may use: the
//! CPUs of its affinity mask (`taskset`, a container's `cpuset`), or fewer
//! under a cgroup CPU quota (a Kubernetes CPU limit), as
//! [`std::thread::available_parallelism`] reads them, never the machine's
//! core count. The runtime is multi-threaded at every size (see
//! `serve::runtime` for why).

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::validate::Checker;

/// How many threads serve the doors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// `runtime.worker_threads`.
    pub worker_threads: WorkerThreads,
}

/// `runtime.worker_threads`: `"auto"` or a number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WorkerThreads {
    /// One per CPU the process may use ([`available_cpus`]).
    #[default]
    Auto,
    /// This many, whatever the CPUs.
    Fixed(usize),
}

impl RuntimeConfig {
    /// The most worker threads a configuration may ask for.
    pub(crate) const LIMIT_WORKER_THREADS: usize = 1024;

    /// The number of worker threads to start.
    pub fn worker_threads(&self) -> usize {
        match self.worker_threads {
            WorkerThreads::Auto => available_cpus(),
            WorkerThreads::Fixed(n) => n,
        }
    }
}

/// The CPUs this process may use: its affinity mask, lowered by a cgroup
/// CPU quota (rounded down, at least 1); 1 when they cannot be read.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// `[runtime]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRuntime {
    worker_threads: Option<Spanned<toml::Value>>,
}

impl Checker<'_> {
    /// `[runtime]`, checked.
    pub(super) fn runtime(
        &self,
        runtime: Option<Spanned<FileRuntime>>,
    ) -> Result<RuntimeConfig, ConfigError> {
        let mut config = RuntimeConfig::default();
        let Some(value) = runtime.and_then(|runtime| runtime.into_inner().worker_threads) else {
            return Ok(config);
        };
        let max = RuntimeConfig::LIMIT_WORKER_THREADS;
        config.worker_threads = match value.get_ref() {
            toml::Value::String(word) if word == "auto" => WorkerThreads::Auto,
            toml::Value::Integer(n) if (1..=max as i64).contains(n) => {
                // Within 1..=1024: the cast is exact.
                WorkerThreads::Fixed(*n as usize)
            }
            toml::Value::Integer(n) => {
                return self.fail(
                    value.span(),
                    "runtime.worker_threads",
                    format!("worker_threads is {n}, outside 1 to {max}"),
                )
            }
            other => {
                return self.fail(
                    value.span(),
                    "runtime.worker_threads",
                    format!(
                        "worker_threads is {other}; expected \"auto\" (one per CPU the process may use) or a number from 1 to {max}"
                    ),
                )
            }
        };
        Ok(config)
    }
}
