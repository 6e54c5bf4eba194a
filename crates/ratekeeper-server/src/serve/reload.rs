//! Reloading the limits from the configuration file, and the TLS doors'
//! certificates from theirs, on SIGHUP or when the files change.
//!
//! The file is polled (its modification time, length and contents) rather
//! than watched through inotify: polling sees a file replaced by an editor
//! or a Kubernetes ConfigMap symlink swap the same way, costs one `stat` per
//! interval, and needs no extra dependency. The token files in force
//! (`[access]`) are polled with it, so rotating a token reloads too, and
//! so are envoyproxy/ratelimit's files (`[envoy] config_dir`), by a digest
//! of every file's path and contents: a file edited, added or removed, or
//! the directory's `..data` link swapped, reloads; and so is the Limitador
//! limits file in force (`[limitador]`), by a digest of its contents; and
//! so are the plan tables in force (`plan_from = "table:PATH"`).

use std::path::PathBuf;

use std::time::{Duration, SystemTime};

use std::sync::Arc;

use ratekeeper_formats::envoy::EnvoyConfig;
use tokio::sync::{watch, Mutex};

use crate::config::{envoy_watched, process_vars, Config, ConfigError, DEFAULT_TOML};
use crate::engine::{changed_limits, ChangedLimit, Engine, KeysAfterChange};
use crate::listen::tls::TlsDoors;

/// What is known of the file the running limits came from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    modified: Option<SystemTime>,
    len: u64,
    text: String,
    /// What the token files in force hold, as a digest.
    secrets: [u8; 32],
    /// What envoyproxy/ratelimit's files in force hold, as a digest, or
    /// why they could not be read.
    envoy: Option<Result<[u8; 32], String>>,
    /// What the Limitador limits file in force holds, as a digest.
    limitador: Option<[u8; 32]>,
    /// What the plan tables in force hold, as one digest.
    plan_tables: Option<[u8; 32]>,
}

/// Where a configuration comes from: a file or the built-in defaults,
/// then the environment, then the command line's settings.
#[derive(Clone, Debug, Default)]
pub(crate) struct Source {
    /// The file; `None` for the built-in defaults.
    pub(crate) path: Option<PathBuf>,
    /// Overrides applied after the environment's, in its form
    /// (`RATEKEEPER_ENVOY__CONFIG_DIR`): the command line's flags.
    pub(crate) overrides: Vec<(String, String)>,
    /// Whether the service runs as `ratekeeper proxy`: which doors the
    /// warnings about doors without limits are about.
    pub(crate) serves_proxy: bool,
}

impl Source {
    /// The name errors give the configuration.
    fn name(&self) -> String {
        self.path.as_ref().map_or_else(
            || "<built-in defaults>".to_owned(),
            |path| path.display().to_string(),
        )
    }
}

/// Reloads one engine's limits from one file.
#[derive(Debug)]
pub(crate) struct Reloader {
    source: Source,
    engine: Engine,
    seen: Option<Seen>,
    /// Whether the last attempt could not read the file: a file that
    /// stays unreadable is one refusal, as a broken file is.
    unreadable: bool,
}

/// What a reload did.
#[derive(Debug)]
pub(crate) enum Reloaded {
    /// The file had not changed.
    Unchanged,
    /// The new limits are in force.
    Applied {
        /// How many limits there are now.
        limits: usize,
    },
}

impl Reloader {
    /// A reloader of `source` into `engine`, which already runs its
    /// current contents.
    pub(crate) fn new(source: Source, engine: Engine) -> Reloader {
        let seen = read(&source, &engine).ok();
        Reloader {
            source,
            engine,
            seen,
            unreadable: false,
        }
    }

    /// Reads the file and, if it changed (or `force`), checks it and puts
    /// its limits in force. An invalid file is refused and the running
    /// limits kept.
    ///
    /// Counted in the engine's [`reload_stats`](Engine::reload_stats):
    /// applied or refused (an unchanged file is neither; a file that stays
    /// unreadable is refused once, until it reads again or SIGHUP asks).
    pub(crate) fn reload(&mut self, force: bool) -> Result<Reloaded, ConfigError> {
        let result = self.reload_uncounted(force);
        let stats = self.engine.reload_stats();
        let was_unreadable = std::mem::replace(
            &mut self.unreadable,
            matches!(result, Err(ConfigError::Read { .. })),
        );
        match &result {
            Ok(Reloaded::Unchanged) => {}
            Ok(Reloaded::Applied { .. }) => stats.applied(self.engine.wall_now()),
            Err(ConfigError::Read { .. }) if was_unreadable && !force => {}
            Err(error) => stats.refused(self.engine.wall_now(), error),
        }
        result
    }

    /// [`Reloader::reload`], uncounted.
    fn reload_uncounted(&mut self, force: bool) -> Result<Reloaded, ConfigError> {
        let seen = read(&self.source, &self.engine).map_err(|source| ConfigError::Read {
            path: self.source.path.clone().unwrap_or_default(),
            source,
        })?;
        if !force && self.seen.as_ref() == Some(&seen) {
            return Ok(Reloaded::Unchanged);
        }
        let vars = process_vars().chain(self.source.overrides.iter().cloned());
        let result = match &self.source.path {
            Some(path) => Config::from_file_text(&seen.text, path, vars),
            None => Config::from_toml_str_with_env(&seen.text, &self.source.name(), vars),
        };
        // Remember the contents even when they are refused, so a broken
        // file is reported once, not at every poll.
        self.seen = Some(seen);
        let config = result?;
        for warning in config.warnings_when_serving(self.source.serves_proxy) {
            tracing::warn!("{warning}");
        }
        let limits = config.limits.len();
        let before = self.engine.limits();
        if !self.engine.replace_limits(&config) {
            tracing::warn!(
                "the [store] section changed; the store only changes on a restart (its lease \
                 settings excepted)"
            );
        }
        log_changed_limits(&changed_limits(&before, &self.engine.limits()));
        // Leased units of changed limits go back at once, in the
        // background (the next sweep would give them back anyway).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let engine = self.engine.clone();
            runtime.spawn(async move { engine.settle_leases(&before, &config).await });
        }
        // The token files and envoyproxy/ratelimit's may be others now:
        // watch those.
        if let Some(seen) = &mut self.seen {
            seen.secrets = secrets(&self.engine);
            seen.envoy = envoy_fingerprint(&self.engine);
            seen.limitador = limitador(&self.engine);
            seen.plan_tables = plan_tables(&self.engine);
        }
        Ok(Reloaded::Applied { limits })
    }
}

/// Reloads on SIGHUP and whenever the file changes (checked every
/// `interval`; never without one), logging what happened, until `stopped`
/// turns true; the TLS doors' files are read again at the same times, a
/// refused change logged as an error with the running certificate kept.
/// Without a file, SIGHUP is still caught (its default would end the
/// process) and only logged, or reloads the certificates.
pub(crate) async fn watch(
    reloader: Option<Arc<Mutex<Reloader>>>,
    tls: TlsDoors,
    interval: Option<Duration>,
    mut hangup: Hangup,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ticker = interval
        .filter(|i| !i.is_zero() && (reloader.is_some() || !tls.is_empty()))
        .map(|interval| {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
    loop {
        let force = tokio::select! {
            _ = tick(&mut ticker) => false,
            Some(()) = recv(&mut hangup) => true,
            _ = stopped.wait_for(|stop| *stop) => return,
        };
        // The certificates first: a configuration reload reads them too,
        // and should find the new ones in force.
        tls.reload_logged();
        let Some(reloader) = &reloader else {
            if force && tls.is_empty() {
                tracing::warn!("SIGHUP: there is no configuration file to reload");
            }
            continue;
        };
        let mut reloader = reloader.lock().await;
        match reloader.reload(force) {
            Ok(Reloaded::Unchanged) => {}
            Ok(Reloaded::Applied { limits }) => {
                tracing::info!(path = %reloader.source.name(), limits, "configuration reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "configuration refused; the running limits stay");
            }
        }
    }
}

/// Tells, per limit whose policy a reload changed, what became of its
/// keys: carried to the new numbers, or started fresh (another kind of
/// policy), which an operator tightening a limit during an incident must
/// know.
fn log_changed_limits(changes: &[ChangedLimit]) {
    for change in changes {
        let (before, after) = (change.before_shown(), change.after_shown());
        match change.keys {
            KeysAfterChange::Carried => tracing::info!(
                limit = %change.name,
                %before,
                %after,
                keys = %change.keys,
                "limit {}: new numbers; each key's use so far is carried over to them",
                change.name,
            ),
            KeysAfterChange::StartedFresh => tracing::warn!(
                limit = %change.name,
                %before,
                %after,
                keys = %change.keys,
                "limit {}: another kind of policy ({} to {}); every key starts with a fresh quota",
                change.name,
                change.before.kind(),
                change.after.kind(),
            ),
        }
    }
}

fn read(source: &Source, engine: &Engine) -> std::io::Result<Seen> {
    let Some(path) = &source.path else {
        return Ok(Seen {
            modified: None,
            len: DEFAULT_TOML.len() as u64,
            text: DEFAULT_TOML.to_owned(),
            secrets: secrets(engine),
            envoy: envoy_fingerprint(engine),
            limitador: limitador(engine),
            plan_tables: plan_tables(engine),
        });
    };
    let text = std::fs::read_to_string(path)?;
    let meta = std::fs::metadata(path)?;
    Ok(Seen {
        modified: meta.modified().ok(),
        len: meta.len(),
        text,
        secrets: secrets(engine),
        envoy: envoy_fingerprint(engine),
        limitador: limitador(engine),
        plan_tables: plan_tables(engine),
    })
}

/// A digest of the plan tables `engine`'s limits read
/// (`plan_from = "table:PATH"`), as they are now, so that editing one
/// reloads; `None` when no limit reads one. A file past the loader's cap
/// is told by its size and time, one that cannot be read by the error.
fn plan_tables(engine: &Engine) -> Option<[u8; 32]> {
    use sha2::{Digest, Sha256};
    let limits = engine.limits();
    let mut hasher = Sha256::new();
    let mut any = false;
    for limit in limits.iter() {
        let Some(plans) = &limit.config().plans else {
            continue;
        };
        let crate::config::PlanFrom::Table(table) = &plans.from else {
            continue;
        };
        any = true;
        hasher.update(table.path.as_os_str().as_encoded_bytes());
        match std::fs::metadata(&table.path) {
            Ok(meta) if meta.len() > crate::config::MAX_PLAN_TABLE_BYTES => {
                hasher.update(meta.len().to_be_bytes());
                hasher.update(format!("{:?}", meta.modified().ok()).as_bytes());
            }
            _ => match std::fs::read(&table.path) {
                Ok(bytes) => hasher.update(Sha256::digest(&bytes)),
                Err(error) => hasher.update(format!("unreadable: {}", error.kind()).as_bytes()),
            },
        }
    }
    any.then(|| hasher.finalize().into())
}

/// A digest of the Limitador limits file `engine` has in force (`[limitador]`),
/// so that editing it reloads as editing the TOML file does; `None`
/// without one. A file that cannot be read has a digest of its own, so
/// that it is reloaded (and the error told) once, like a broken TOML file.
fn limitador(engine: &Engine) -> Option<[u8; 32]> {
    use sha2::{Digest, Sha256};
    let limits = engine.limits();
    let path = limits.limitador().path()?;
    let mut hasher = Sha256::new();
    match std::fs::metadata(path) {
        // Past the loader's cap, the size and time tell a change: the
        // contents would be refused anyway.
        Ok(meta) if meta.len() > ratekeeper_formats::limitador::MAX_LIMITADOR_FILE_BYTES as u64 => {
            hasher.update(meta.len().to_be_bytes());
            hasher.update(format!("{:?}", meta.modified().ok()).as_bytes());
        }
        _ => match std::fs::read(path) {
            Ok(bytes) => hasher.update(&bytes),
            Err(error) => hasher.update(format!("unreadable: {}", error.kind()).as_bytes()),
        },
    }
    Some(hasher.finalize().into())
}

/// A digest of the envoyproxy/ratelimit files `engine`'s configuration
/// reads, as they are now; `None` when it reads none.
fn envoy_fingerprint(engine: &Engine) -> Option<Result<[u8; 32], String>> {
    let (dir, options) = envoy_watched(&engine.envoy_door())?;
    Some(EnvoyConfig::fingerprint_dir(dir, &options).map_err(|error| error.to_string()))
}

/// A digest of the token files `engine` has in force.
fn secrets(engine: &Engine) -> [u8; 32] {
    let files = engine.access().files();
    crate::config::access::fingerprint(files.iter().map(PathBuf::as_path))
}

/// SIGHUP, caught from the moment it is made (so a signal sent right after
/// the service says it listens is not lost); `None` where there is none.
#[cfg(unix)]
pub(crate) type Hangup = Option<tokio::signal::unix::Signal>;
/// No SIGHUP here.
#[cfg(not(unix))]
pub(crate) type Hangup = Option<()>;

/// Catches SIGHUP from now on; must run inside a tokio runtime.
#[cfg(unix)]
pub(crate) fn hangup_signal() -> Hangup {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
pub(crate) fn hangup_signal() -> Hangup {
    None
}

/// The next SIGHUP; pending forever where there is none.
async fn recv(hangup: &mut Hangup) -> Option<()> {
    #[cfg(unix)]
    if let Some(signal) = hangup {
        return signal.recv().await;
    }
    let _ = hangup;
    std::future::pending().await
}

/// The next tick; pending forever without a ticker.
async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(ticker) => {
            ticker.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ratekeeper::{clock::ManualClock, Timestamp};

    use super::*;

    fn limits(rate: &str) -> String {
        format!("[[limits]]\nname = \"one\"\nrate = \"{rate}\"\nkey = [\"global\"]\n")
    }

    /// Polled again and again (as the watcher does every interval), a
    /// broken file and then a missing one are each one refusal; a forced
    /// reload (SIGHUP) counts again.
    #[tokio::test]
    async fn a_broken_or_missing_file_is_one_refusal_however_often_it_is_polled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ratekeeper.toml");
        std::fs::write(&path, limits("5/minute")).unwrap();
        let config = Config::from_toml_str(&limits("5/minute"), "t.toml").unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
        let source = Source {
            path: Some(path.clone()),
            overrides: Vec::new(),
            serves_proxy: false,
        };
        let mut reloader = Reloader::new(source, engine.clone());
        let refused = || engine.reload_stats().snapshot().refused;

        std::fs::write(&path, limits("fast")).unwrap();
        assert!(reloader.reload(false).is_err());
        for _ in 0..5 {
            assert!(matches!(reloader.reload(false), Ok(Reloaded::Unchanged)));
        }
        assert_eq!(refused(), 1);

        std::fs::remove_file(&path).unwrap();
        for _ in 0..5 {
            assert!(matches!(
                reloader.reload(false),
                Err(ConfigError::Read { .. })
            ));
        }
        assert_eq!(refused(), 2);
        assert!(reloader.reload(true).is_err());
        assert_eq!(refused(), 3, "SIGHUP asks again");
    }

    /// envoyproxy/ratelimit's directory, removed while the service runs and
    /// polled again and again: one refusal, reported once, until it is
    /// back.
    #[tokio::test]
    async fn a_removed_envoy_directory_is_one_refusal_however_often_it_is_polled() {
        let dir = tempfile::tempdir().unwrap();
        let envoy = dir.path().join("envoy");
        std::fs::create_dir(&envoy).unwrap();
        std::fs::write(
            envoy.join("edge.yaml"),
            "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
        )
        .unwrap();
        let toml = format!(
            "[envoy]\nconfig_dir = {:?}\n{}",
            envoy.display().to_string(),
            limits("5/minute")
        );
        let path = dir.path().join("ratekeeper.toml");
        std::fs::write(&path, &toml).unwrap();
        let config = Config::from_toml_str(&toml, "t.toml").unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
        let source = Source {
            path: Some(path),
            overrides: Vec::new(),
            serves_proxy: false,
        };
        let mut reloader = Reloader::new(source, engine.clone());
        let refused = || engine.reload_stats().snapshot().refused;

        std::fs::remove_dir_all(&envoy).unwrap();
        assert!(reloader.reload(false).is_err());
        for _ in 0..5 {
            assert!(matches!(reloader.reload(false), Ok(Reloaded::Unchanged)));
        }
        assert_eq!(refused(), 1);
    }

    /// A plan table (`plan_from = "table:PATH"`) is polled with the file:
    /// an edit to it alone reloads, and an untouched one does not.
    #[tokio::test]
    async fn an_edited_plan_table_reloads_and_an_untouched_one_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("keys.toml");
        std::fs::write(&table, "\"alice\" = \"pro\"\n").unwrap();
        let toml = format!(
            "[[limits]]\nname = \"api\"\nrate = \"2/minute\"\nkey = [\"header:x-api-key\"]\n\
             plan_from = \"table:{}\"\n[limits.plans]\npro = \"5/minute\"\n",
            table.display()
        );
        let path = dir.path().join("ratekeeper.toml");
        std::fs::write(&path, &toml).unwrap();
        let config = Config::from_toml_str(&toml, "t.toml").unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
        let source = Source {
            path: Some(path),
            overrides: Vec::new(),
            serves_proxy: false,
        };
        let mut reloader = Reloader::new(source, engine.clone());
        let keys = || {
            let limits = engine.limits();
            match &limits
                .get("api")
                .unwrap()
                .config()
                .plans
                .as_ref()
                .unwrap()
                .from
            {
                crate::config::PlanFrom::Table(table) => table.len(),
                other => panic!("not a table: {other}"),
            }
        };
        assert!(matches!(reloader.reload(false), Ok(Reloaded::Unchanged)));

        std::fs::write(&table, "\"alice\" = \"pro\"\n\"bob\" = \"pro\"\n").unwrap();
        assert!(matches!(
            reloader.reload(false),
            Ok(Reloaded::Applied { .. })
        ));
        assert_eq!(keys(), 2);
        assert!(matches!(reloader.reload(false), Ok(Reloaded::Unchanged)));
    }
}
