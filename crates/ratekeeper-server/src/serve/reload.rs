//! Reloading the limits from the configuration file, and the TLS doors'
//! certificates from theirs, on SIGHUP or when the files change.
//!
//! The file is polled (its modification time, length and contents) rather
//! than watched through inotify: polling sees a file replaced by an editor
//! or a Kubernetes ConfigMap symlink swap the same way, costs one `stat` per
//! interval, and needs no extra dependency. The token files in force
//! (`[access]`) and the Limitador limits file in force (`[limitador]`) are
//! polled with it, so rotating a token or editing the limits reloads too.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use tokio::sync::{watch, Mutex};

use crate::config::{process_vars, Config, ConfigError};
use crate::engine::Engine;
use crate::listen::tls::TlsDoors;

/// What is known of the file the running limits came from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    modified: Option<SystemTime>,
    len: u64,
    text: String,
    /// What the token files in force hold, as a digest.
    secrets: [u8; 32],
    /// What the Limitador limits file in force holds, as a digest.
    limitador: Option<[u8; 32]>,
}

/// Reloads one engine's limits from one file.
#[derive(Debug)]
pub(crate) struct Reloader {
    /// The TOML file; `None` for the built-in defaults, reloaded only for
    /// the Limitador limits file they run beside.
    path: Option<PathBuf>,
    engine: Engine,
    seen: Option<Seen>,
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
    /// A reloader of `path` into `engine`, which already runs the file's
    /// current contents.
    pub(crate) fn new(path: PathBuf, engine: Engine) -> Reloader {
        let seen = read(Some(&path), &engine).ok();
        Reloader {
            path: Some(path),
            engine,
            seen,
        }
    }

    /// The reloader of a service: of its file `path`, or, on the built-in
    /// defaults, of the Limitador limits file `--limitador-config` named
    /// (so that it reloads as it would beside a file); `None` when there
    /// is neither.
    pub(crate) fn for_service(path: Option<PathBuf>, engine: Engine) -> Option<Reloader> {
        match path {
            Some(path) => Some(Reloader::new(path, engine)),
            None if engine.limits().limitador().path().is_some() => {
                let seen = read(None, &engine).ok();
                Some(Reloader {
                    path: None,
                    engine,
                    seen,
                })
            }
            None => None,
        }
    }

    /// What the TOML is called in messages.
    fn source(&self) -> String {
        match &self.path {
            Some(path) => path.display().to_string(),
            None => DEFAULTS_SOURCE.to_owned(),
        }
    }

    /// Reads the file and, if it changed (or `force`), checks it and puts
    /// its limits in force. An invalid file is refused and the running
    /// limits kept.
    pub(crate) fn reload(&mut self, force: bool) -> Result<Reloaded, ConfigError> {
        let seen =
            read(self.path.as_deref(), &self.engine).map_err(|source| ConfigError::Read {
                path: self.path.clone().unwrap_or_default(),
                source,
            })?;
        if !force && self.seen.as_ref() == Some(&seen) {
            return Ok(Reloaded::Unchanged);
        }
        let result = Config::from_toml_str_with_env(&seen.text, &self.source(), process_vars());
        // Remember the contents even when they are refused, so a broken
        // file is reported once, not at every poll.
        self.seen = Some(seen);
        let config = result?;
        for warning in config.warnings() {
            tracing::warn!("{warning}");
        }
        if !self.engine.replace_limits(&config) {
            tracing::warn!("the [store] section changed; the store only changes on a restart");
        }
        // The token files may be others now: watch those.
        if let Some(seen) = &mut self.seen {
            seen.secrets = secrets(&self.engine);
            seen.limitador = limitador(&self.engine);
        }
        Ok(Reloaded::Applied {
            limits: config.limits.len(),
        })
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
                tracing::info!(path = %reloader.source(), limits, "configuration reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "configuration refused; the running limits stay");
            }
        }
    }
}

/// The source name of the built-in defaults in messages.
const DEFAULTS_SOURCE: &str = "<built-in defaults>";

fn read(path: Option<&Path>, engine: &Engine) -> std::io::Result<Seen> {
    let (text, modified, len) = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)?;
            let meta = std::fs::metadata(path)?;
            (text, meta.modified().ok(), meta.len())
        }
        None => {
            let text = crate::config::DEFAULT_TOML.to_owned();
            let len = text.len() as u64;
            (text, None, len)
        }
    };
    Ok(Seen {
        modified,
        len,
        text,
        secrets: secrets(engine),
        limitador: limitador(engine),
    })
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
        Ok(meta) if meta.len() > crate::config::limitador::MAX_FILE_BYTES as u64 => {
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

/// A digest of the token files `engine` has in force.
fn secrets(engine: &Engine) -> [u8; 32] {
    let files = engine.access().files();
    crate::access::fingerprint(files.iter().map(PathBuf::as_path))
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
