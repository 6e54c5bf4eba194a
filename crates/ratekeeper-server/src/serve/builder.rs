//! How a service starts: [`Service::builder`], then where its
//! configuration came from, its clocks and the proxy door.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::clock::{MonotonicClock, UnixClock};

use super::{ServeError, Service};
use crate::config::Config;
use crate::engine::SharedClock;
use crate::proxy::ProxyDoor;

/// A service to start on a configuration: [`Service::builder`].
///
/// By default there is no file to reload (SIGHUP reloads only the files
/// the configuration names), a file is checked for changes every second,
/// the in-memory store runs on a monotonic clock counting from the Unix
/// epoch (so fixed windows start on the wall clock's minutes and hours, as
/// on Redis), the statistics follow the system's clock, and there is no
/// proxy door.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use ratekeeper_server::{serve::Service, Config};
///
/// let config = Config::load("ratekeeper.toml")?;
/// let service = Service::builder(config)
///     .config_file("ratekeeper.toml")
///     .start()
///     .await?;
/// println!("deciding over HTTP on {:?}", service.addrs().http);
/// service.run().await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a service starts when `start` is awaited"]
pub struct ServiceBuilder {
    pub(super) config: Config,
    pub(super) config_path: Option<PathBuf>,
    pub(super) watch_interval: Option<Duration>,
    pub(super) overrides: Vec<(String, String)>,
    pub(super) clock: SharedClock,
    pub(super) wall_clock: SharedClock,
    pub(super) proxy: Option<ProxyDoor>,
}

impl std::fmt::Debug for ServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBuilder")
            .field("config_path", &self.config_path)
            .field("watch_interval", &self.watch_interval)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service on `config`, started by [`ServiceBuilder::start`].
    pub fn builder(config: Config) -> ServiceBuilder {
        ServiceBuilder {
            config,
            config_path: None,
            watch_interval: Some(Duration::from_secs(1)),
            overrides: Vec::new(),
            clock: Arc::new(MonotonicClock::since_unix_epoch()),
            wall_clock: Arc::new(UnixClock),
            proxy: None,
        }
    }
}

impl ServiceBuilder {
    /// The file `config` was read from: reloaded on SIGHUP and when it
    /// changes (see [`ServiceBuilder::watch_interval`]).
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// How often the file is checked for changes; `None` or zero: never
    /// (SIGHUP still reloads). One second by default.
    pub fn watch_interval(mut self, interval: Option<Duration>) -> Self {
        self.watch_interval = interval;
        self
    }

    /// Settings applied over the file and the environment on every
    /// (re)load, in the environment's form
    /// (`("RATEKEEPER_ENVOY__CONFIG_DIR", "/etc/ratelimit")`): the command
    /// line's flags, such as `--envoy-config`. With some, the built-in
    /// defaults are reloaded like a file when there is none.
    pub fn overrides(mut self, overrides: Vec<(String, String)>) -> Self {
        self.overrides = overrides;
        self
    }

    /// The clock the in-memory store decides by (a test's manual clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The clock (Unix time) the statistics' calendar windows follow.
    pub fn wall_clock(mut self, wall_clock: SharedClock) -> Self {
        self.wall_clock = wall_clock;
        self
    }

    /// The reverse proxy as one more door (what `ratekeeper proxy` runs).
    pub fn proxy(mut self, door: ProxyDoor) -> Self {
        self.proxy = Some(door);
        self
    }

    /// Opens the store, binds every front door and starts serving.
    pub async fn start(self) -> Result<Service, ServeError> {
        Service::start(self).await
    }
}
