//! Limitador's limits as the engine runs them: see [`LimitadorLimits`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::stats::Stats;
use ratekeeper::{FixedWindow, Limit, Rate};
use ratekeeper_formats::limitador::{Descriptors, LimitadorConfig, LimitadorLimit};

use super::limits::active_with_stats;
use super::{ActiveLimit, LimitCheck};
use crate::config::{KeyPart, LimitConfig, LimitadorSource, Match, OnSaturated};

/// The prefix of every Limitador limit's name.
pub const NAME_PREFIX: &str = "limitador/";

/// The longest namespace part of a name: the prefix, a `/` and 16 hex
/// digits leave this much of ratekeeper's 64 bytes.
const NAMESPACE_BYTES: usize = 64 - NAME_PREFIX.len() - 1 - 16;

/// Limitador's limits ([`ratekeeper_formats::limitador`]) as the engine runs
/// them: each an [`ActiveLimit`] with statistics, checked by the doors that
/// speak Limitador's language (the Envoy door for a domain that is a
/// Limitador namespace, and Limitador's HTTP routes).
///
/// Each limit counts in a fixed window of `max_value` hits per `seconds`
/// (see the loader's documentation for how that window differs from
/// Limitador's), keyed by its variables' values. Its name, which the
/// statistics, the store's keys and `/metrics` use, is
/// `limitador/NAMESPACE/HASH`: the namespace (at most 37 bytes, characters
/// a limit name refuses written `_`) and 16 hex digits of what Limitador
/// tells limits apart by ([`LimitadorLimit::identity`]), so a limit keeps
/// its counts and statistics across reloads while its namespace, window,
/// conditions and variables stay, as Limitador keeps its counters.
///
/// ```
/// use std::sync::Arc;
/// use ratekeeper::{Timestamp, clock::ManualClock};
/// use ratekeeper_formats::limitador::Descriptors;
/// use ratekeeper_server::engine::Engine;
/// use ratekeeper_server::Config;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dir = std::env::temp_dir().join(format!("rk-limitador-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let file = dir.join("limits.yaml");
/// std::fs::write(
///     &file,
///     "- namespace: example.org\n  max_value: 2\n  seconds: 60\n  \
///      conditions: [\"descriptors[0].method == 'GET'\"]\n  variables: [\"descriptors[0].user\"]\n",
/// )?;
/// let toml = format!(
///     "[limitador]\nconfig_file = {:?}\n[[limits]]\nname = \"unused\"\nrate = \"1/s\"\nkey = [\"global\"]\n",
///     file.display().to_string()
/// );
/// let config = Config::from_toml_str(&toml, "ratekeeper.toml")?;
/// let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
/// let engine = Engine::builder(&config).clock(clock).start().await?;
///
/// let request = [vec![("method", "GET"), ("user", "alice")]];
/// let descriptors = Descriptors::new(request.iter().map(|d| d.iter().copied()));
/// let limits = engine.limits();
/// let decide = || async {
///     let checks = limits.limitador().checks("example.org", &descriptors, 1);
///     let checks = checks.into_iter().filter_map(|c| c.check).collect();
///     engine.check(checks).await.map(|verdict| verdict.is_allowed())
/// };
/// assert!(decide().await?);
/// assert!(decide().await?);
/// assert!(!decide().await?);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
///
/// The limits are kept by namespace.
#[derive(Debug, Default)]
pub struct LimitadorLimits {
    source: Option<LimitadorSource>,
    by_namespace: HashMap<String, Vec<Running>>,
}

/// One limit of the file, ready to check.
#[derive(Debug)]
struct Running {
    /// Its index in the file's limits.
    index: usize,
    /// `None` for `max_value: 0`, which refuses every hit (no policy
    /// allows nothing).
    active: Option<Arc<ActiveLimit>>,
    /// The first descriptor its expressions read.
    descriptor: usize,
}

/// One Limitador limit that applies to a request.
#[derive(Debug)]
pub struct LimitadorCheck<'a> {
    /// The limit, as its file has it.
    pub limit: &'a LimitadorLimit,
    /// The engine's check: the limit, the counter's key (its variables'
    /// values) and the hits; `None` when `max_value` is 0, which refuses
    /// any hit and counts nothing.
    pub check: Option<LimitCheck>,
    /// The request descriptor whose status reports it on the Envoy door:
    /// the first its expressions read, or the last the request has.
    pub descriptor: usize,
}

impl LimitadorLimits {
    /// The limits of `source`, recording their decisions in `stats` (a
    /// limit already there keeps its statistics); `taken` says which names
    /// other limits have.
    pub fn new(
        source: Option<&LimitadorSource>,
        stats: &Stats,
        taken: &dyn Fn(&str) -> bool,
    ) -> LimitadorLimits {
        let Some(source) = source else {
            return LimitadorLimits::default();
        };
        let mut names = HashSet::new();
        let mut by_namespace: HashMap<String, Vec<Running>> = HashMap::new();
        for (index, limit) in source.limits.limits().iter().enumerate() {
            let active = build(limit, source.shadow, stats, &mut |name: &str| {
                taken(name) || !names.insert(name.to_owned())
            });
            by_namespace
                .entry(limit.namespace().to_owned())
                .or_default()
                .push(Running {
                    index,
                    active,
                    descriptor: usize::try_from(limit.first_descriptor()).unwrap_or(usize::MAX),
                });
        }
        LimitadorLimits {
            source: Some(source.clone()),
            by_namespace,
        }
    }

    /// The file the limits came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.source.as_ref().map(|source| source.path.as_path())
    }

    /// The loaded file, if any.
    pub fn config(&self) -> Option<&LimitadorConfig> {
        self.source.as_ref().map(|source| source.limits.as_ref())
    }

    /// Whether the limits decide and report but never refuse
    /// (`[enforcement] shadow_mode`).
    pub fn shadow(&self) -> bool {
        self.source.as_ref().is_some_and(|source| source.shadow)
    }

    /// Whether `namespace` has limits.
    pub fn knows(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace)
    }

    /// The limits as the engine checks them (those with `max_value: 0`,
    /// which count nothing, left out), in no particular order.
    pub(crate) fn active(&self) -> impl Iterator<Item = &Arc<ActiveLimit>> {
        self.by_namespace
            .values()
            .flatten()
            .filter_map(|running| running.active.as_ref())
    }

    /// The names of the limits' [`ActiveLimit`]s.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.active().map(|active| active.name())
    }

    /// How many namespaces have limits.
    pub(crate) fn namespace_count(&self) -> usize {
        self.by_namespace.len()
    }

    /// The limits of `namespace`, in the file's order.
    pub fn limits<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a LimitadorLimit> + 'a {
        let config = self.config();
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flatten()
            .filter_map(move |running| config?.limits().get(running.index))
    }

    /// The limits of `namespace` that apply to a request's `descriptors`,
    /// each with its check of `hits`, in the file's order. The work is one
    /// evaluation of each limit's expressions, linear in their size.
    pub fn checks(
        &self,
        namespace: &str,
        descriptors: &Descriptors<'_>,
        hits: u64,
    ) -> Vec<LimitadorCheck<'_>> {
        let (Some(config), Some(running)) = (self.config(), self.by_namespace.get(namespace))
        else {
            return Vec::new();
        };
        let last = descriptors.len().saturating_sub(1);
        running
            .iter()
            .filter_map(|running| {
                let limit = config.limits().get(running.index)?;
                let values = limit.variable_values(descriptors)?;
                let check = running
                    .active
                    .as_ref()
                    .map(|active| LimitCheck::new(Arc::clone(active), counter_key(&values), hits));
                Some(LimitadorCheck {
                    limit,
                    check,
                    descriptor: running.descriptor.min(last),
                })
            })
            .collect()
    }
}

/// The counter's key: the variables' values, each after its length, so
/// that no two combinations share a key (the limit's name keeps limits
/// apart).
fn counter_key(values: &[String]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + values.iter().map(|v| v.len() + 4).sum::<usize>());
    // Never empty, whatever the store makes of an empty key.
    key.push(b'L');
    for value in values {
        let len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        key.extend_from_slice(&len.to_be_bytes());
        key.extend_from_slice(value.as_bytes());
    }
    key
}

/// The limit as an [`ActiveLimit`]; `None` for `max_value: 0`. `taken`
/// says whether a name is used (and claims it when not).
fn build(
    limit: &LimitadorLimit,
    shadow: bool,
    stats: &Stats,
    taken: &mut dyn FnMut(&str) -> bool,
) -> Option<Arc<ActiveLimit>> {
    let window = Duration::from_secs(limit.seconds());
    // The loader checked both against the policy's bounds; a value it let
    // through that the policy refuses leaves the limit out rather than
    // panicking.
    let rate = Rate::new(limit.max_value(), window).ok()?;
    // Limitador's counters: a window opens at a counter's first hit.
    let policy = FixedWindow::from_first_hit(limit.max_value(), window).ok()?;
    let name = name_for(limit, taken);
    let limit_name = Limit::new(name.clone(), policy).ok()?;
    let config = LimitConfig {
        limit: limit_name,
        rate,
        ban: false,
        key: vec![KeyPart::Global],
        shadow,
        on_saturated: OnSaturated::default(),
        allow_overrides: false,
        allow_refunds: false,
        // Limitador's `/report`.
        allow_reports: true,
        count_refused: false,
        after_response: None,
        max_wait: None,
        penalty: None,
        plans: None,
        matcher: Match {
            domain: Some(limit.namespace().to_owned()),
            ..Match::default()
        },
    };
    Some(active_with_stats(&config, stats))
}

/// `limitador/NAMESPACE/HASH`, or with the namespace part replaced by a
/// number when that name is taken (a native limit named so, or the 2^-64
/// chance of two limits' digests starting alike).
fn name_for(limit: &LimitadorLimit, taken: &mut dyn FnMut(&str) -> bool) -> String {
    let hash: String = limit.identity()[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let namespace: String = limit
        .namespace()
        .chars()
        .map(|c| match c {
            c if !c.is_ascii_graphic() || matches!(c, '"' | '\\' | '{' | '}' | ':') => '_',
            c => c,
        })
        .take(NAMESPACE_BYTES)
        .collect();
    let name = format!("{NAME_PREFIX}{namespace}/{hash}");
    if !taken(&name) {
        return name;
    }
    let mut n = 0u64;
    loop {
        let name = format!("{NAME_PREFIX}{n}/{hash}");
        if !taken(&name) {
            return name;
        }
        n += 1;
    }
}
