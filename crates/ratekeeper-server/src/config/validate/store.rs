//! `[store]`: the backend, its connection and its failure policy.

use super::*;

impl Checker<'_> {
    pub(super) fn store(
        &self,
        store: Option<Spanned<FileStore>>,
    ) -> Result<StoreConfig, ConfigError> {
        let Some(store) = store else {
            return Ok(StoreConfig {
                backend: Backend::Memory,
                max_keys: ratekeeper::memory::DEFAULT_MAX_KEYS,
                on_failure: FailureMode::Closed,
                fallback: false,
                start_wait: Duration::ZERO,
                tls: None,
                lease: None,
            });
        };
        let table_span = store.span();
        let store = store.into_inner();
        let (kind, kind_span) = match &store.kind {
            Some(kind) => (kind.get_ref().as_str(), kind.span()),
            None => ("memory", table_span),
        };
        let kind = match kind {
            "memory" | "sqlite" | "redis" | "redis-cluster" => kind,
            other => {
                return self.fail(
                    kind_span,
                    "store.kind",
                    format!(
                    "unknown store kind {other:?}; expected memory, sqlite, redis or redis-cluster"
                ),
                )
            }
        };
        let remote = kind != "memory";
        let redis = kind == "redis" || kind == "redis-cluster";
        let batching = ratekeeper_redis::Batching::DEFAULT;
        // A field that does not apply to this kind is refused, unless it
        // holds its default value: one file for several deployments may
        // spell the defaults out (`on_failure = "closed"` on a memory store).
        let leasing = [
            (
                "lease",
                store.lease.as_ref().map(|v| (v.span(), !*v.get_ref())),
            ),
            (
                "lease_max_chunk",
                store
                    .lease_max_chunk
                    .as_ref()
                    .map(|v| (v.span(), *v.get_ref() == LEASE_MAX_CHUNK)),
            ),
            (
                "lease_chunk_ms",
                store
                    .lease_chunk_ms
                    .as_ref()
                    .map(|v| (v.span(), *v.get_ref() == LEASE_CHUNK_MS)),
            ),
            (
                "lease_lifetime_ms",
                store
                    .lease_lifetime_ms
                    .as_ref()
                    .map(|v| (v.span(), *v.get_ref() == LEASE_LIFETIME_MS)),
            ),
            (
                "lease_spend_while_down",
                store
                    .lease_spend_while_down
                    .as_ref()
                    .map(|v| (v.span(), *v.get_ref())),
            ),
        ];
        for (field, given) in leasing {
            if let (Some((span, false)), false) = (given, remote) {
                return self.fail(
                    span,
                    format!("store.{field}"),
                    format!("{field} applies only to the sqlite and redis stores (leasing from a shared store), not to a {kind} store"),
                );
            }
        }
        let applies: [(&str, Option<Range<usize>>, bool, &str); 14] = [
            (
                "batch_in_flight",
                unless_default(
                    store.batch_in_flight.as_ref().map(Spanned::span),
                    store.batch_in_flight.as_ref().map(|n| *n.get_ref())
                        == Some(batching.in_flight() as u64),
                ),
                kind == "redis",
                "the redis store (a cluster does not batch)",
            ),
            (
                "batch_max_calls",
                unless_default(
                    store.batch_max_calls.as_ref().map(Spanned::span),
                    store.batch_max_calls.as_ref().map(|n| *n.get_ref())
                        == Some(batching.max_calls() as u64),
                ),
                kind == "redis",
                "the redis store (a cluster does not batch)",
            ),
            (
                "path",
                store.path.as_ref().map(Spanned::span),
                kind == "sqlite",
                "the sqlite store",
            ),
            (
                "url",
                store.url.as_ref().map(Spanned::span),
                kind == "redis",
                "the redis store",
            ),
            (
                "urls",
                store.urls.as_ref().map(Spanned::span),
                kind == "redis-cluster",
                "the redis-cluster store",
            ),
            (
                "sentinels",
                store.sentinels.as_ref().map(Spanned::span),
                kind == "redis",
                "the redis store",
            ),
            (
                "master_name",
                store.master_name.as_ref().map(Spanned::span),
                kind == "redis",
                "the redis store",
            ),
            (
                "master_username",
                store.master_username.as_ref().map(Spanned::span),
                kind == "redis" && store.sentinels.is_some(),
                "the redis store with sentinels",
            ),
            (
                "master_password",
                store.master_password.as_ref().map(Spanned::span),
                kind == "redis" && store.sentinels.is_some(),
                "the redis store with sentinels",
            ),
            (
                "prefix",
                unless_default(
                    store.prefix.as_ref().map(Spanned::span),
                    store.prefix.as_ref().map(|p| p.get_ref().as_str()) == Some(DEFAULT_PREFIX),
                ),
                redis,
                "the redis stores",
            ),
            (
                "timeout_ms",
                unless_default(
                    store.timeout_ms.as_ref().map(Spanned::span),
                    store.timeout_ms.as_ref().map(|n| *n.get_ref()) == Some(DEFAULT_TIMEOUT_MS),
                ),
                redis,
                "the redis stores",
            ),
            (
                "start_wait_ms",
                unless_default(
                    store.start_wait_ms.as_ref().map(Spanned::span),
                    store.start_wait_ms.as_ref().map(|n| *n.get_ref()) == Some(0),
                ),
                redis,
                "the redis stores",
            ),
            (
                "on_failure",
                unless_default(
                    store.on_failure.as_ref().map(Spanned::span),
                    store.on_failure.as_ref().map(|m| m.get_ref().as_str()) == Some("closed"),
                ),
                remote,
                "the sqlite and redis stores",
            ),
            (
                "fallback",
                unless_default(
                    store.fallback.as_ref().map(Spanned::span),
                    store.fallback.as_ref().map(|f| *f.get_ref()) == Some(false),
                ),
                remote,
                "the sqlite and redis stores",
            ),
        ];
        for (field, span, ok, which) in applies {
            if let (Some(span), false) = (span, ok) {
                return self.fail(
                    span,
                    format!("store.{field}"),
                    format!("{field} applies only to {which}, not to a {kind} store"),
                );
            }
        }
        let max_keys = match &store.max_keys {
            None => ratekeeper::memory::DEFAULT_MAX_KEYS,
            Some(value) => {
                let n = *value.get_ref();
                if n == 0 {
                    return self.fail(
                        value.span(),
                        "store.max_keys",
                        "max_keys must be greater than zero",
                    );
                }
                match usize::try_from(n) {
                    Ok(n) if n <= MAX_KEYS => n,
                    _ => {
                        return self.fail(
                            value.span(),
                            "store.max_keys",
                            format!(
                                "max_keys is {n}, above the largest supported value {MAX_KEYS}"
                            ),
                        )
                    }
                }
            }
        };
        let on_failure = match &store.on_failure {
            None => FailureMode::Closed,
            Some(mode) => match mode.get_ref().as_str() {
                "closed" => FailureMode::Closed,
                "open" => FailureMode::Open,
                other => {
                    return self.fail(
                        mode.span(),
                        "store.on_failure",
                        format!("unknown failure mode {other:?}; expected \"closed\" (refuse requests) or \"open\" (allow them)"),
                    )
                }
            },
        };
        let fallback = store.fallback.as_ref().is_some_and(|f| *f.get_ref());
        let prefix = match &store.prefix {
            None => DEFAULT_PREFIX.to_owned(),
            Some(prefix) => {
                if prefix.get_ref().contains(['{', '}']) {
                    return self.fail(
                        prefix.span(),
                        "store.prefix",
                        format!("the prefix {:?} contains a brace; braces would change Redis Cluster's hash slots", prefix.get_ref()),
                    );
                }
                prefix.get_ref().clone()
            }
        };
        let timeout = match &store.timeout_ms {
            None => Duration::from_millis(DEFAULT_TIMEOUT_MS),
            Some(ms) => {
                let n = *ms.get_ref();
                if n == 0 {
                    return self.fail(
                        ms.span(),
                        "store.timeout_ms",
                        "timeout_ms must be greater than zero",
                    );
                }
                if n > MAX_TIMEOUT_MS {
                    return self.fail(
                        ms.span(),
                        "store.timeout_ms",
                        format!(
                            "timeout_ms is {n}, above the largest supported value {MAX_TIMEOUT_MS}"
                        ),
                    );
                }
                Duration::from_millis(n)
            }
        };
        let start_wait = match &store.start_wait_ms {
            None => Duration::ZERO,
            Some(ms) if *ms.get_ref() > MAX_START_WAIT_MS => {
                return self.fail(
                    ms.span(),
                    "store.start_wait_ms",
                    format!(
                        "start_wait_ms is {}, above the largest supported value {MAX_START_WAIT_MS} (an hour)",
                        ms.get_ref()
                    ),
                );
            }
            Some(ms) => Duration::from_millis(*ms.get_ref()),
        };
        let in_flight = self.bounded(
            &store.batch_in_flight,
            "batch_in_flight",
            batching.in_flight(),
            MAX_BATCH_IN_FLIGHT,
        )?;
        let max_calls = self.bounded(
            &store.batch_max_calls,
            "batch_max_calls",
            batching.max_calls(),
            MAX_BATCH_CALLS,
        )?;
        let batching = ratekeeper_redis::Batching::new(in_flight, max_calls);
        let backend =
            match kind {
                "sqlite" => match &store.path {
                    Some(path) if !path.get_ref().trim().is_empty() => Backend::Sqlite {
                        path: self.path(path),
                    },
                    Some(path) => {
                        return self.fail(path.span(), "store.path", "the path must not be empty")
                    }
                    None => {
                        return self.fail(
                            kind_span,
                            "store.path",
                            "a sqlite store needs a path to its database file",
                        )
                    }
                },
                "redis" => {
                    match (&store.url, &store.sentinels) {
                        (Some(url), None) => {
                            if let Some(name) = &store.master_name {
                                return self.fail(
                            name.span(),
                            "store.master_name",
                            "master_name goes with sentinels; a store with a url connects to it",
                        );
                            }
                            Backend::Redis {
                                url: self.redis_url(url, "store.url")?,
                                prefix,
                                timeout,
                                batching,
                            }
                        }
                        (None, Some(sentinels)) => {
                            self.sentinel_backend(&store, sentinels, prefix, timeout, batching)?
                        }
                        (Some(url), Some(_)) => return self.fail(
                            url.span(),
                            "store.url",
                            "give url (one server) or sentinels (a primary found through Redis \
                         Sentinel), not both",
                        ),
                        (None, None) => return self.fail(
                            kind_span,
                            "store.url",
                            "a redis store needs a url, such as \"redis://127.0.0.1:6379\", or \
                         sentinels and master_name",
                        ),
                    }
                }
                "redis-cluster" => {
                    match &store.urls {
                        Some(urls) if !urls.get_ref().is_empty() => {
                            let mut checked = Vec::with_capacity(urls.get_ref().len());
                            for (index, url) in urls.get_ref().iter().enumerate() {
                                checked.push(self.redis_url(url, &format!("store.urls[{index}]"))?);
                            }
                            Backend::RedisCluster {
                                urls: checked,
                                prefix,
                                timeout,
                            }
                        }
                        Some(urls) => {
                            return self.fail(
                                urls.span(),
                                "store.urls",
                                "the list of urls must not be empty",
                            )
                        }
                        None => return self.fail(
                            kind_span,
                            "store.urls",
                            "a redis-cluster store needs urls, such as [\"redis://10.0.0.1:6379\"]",
                        ),
                    }
                }
                _ => Backend::Memory,
            };
        let tls = store_tls::check(self.at, &store, kind)?;
        let lease = self.lease(&store, max_keys)?;
        Ok(StoreConfig {
            backend,
            max_keys,
            on_failure,
            fallback,
            start_wait,
            tls,
            lease,
        })
    }

    /// A primary found through `sentinels`, named by `store.master_name`.
    fn sentinel_backend(
        &self,
        store: &FileStore,
        sentinels: &crate::config::file::Strings,
        prefix: String,
        timeout: Duration,
        batching: ratekeeper_redis::Batching,
    ) -> Result<Backend, ConfigError> {
        if sentinels.get_ref().is_empty() {
            return self.fail(
                sentinels.span(),
                "store.sentinels",
                "the list of sentinels must not be empty",
            );
        }
        let mut checked = Vec::with_capacity(sentinels.get_ref().len());
        for (index, url) in sentinels.get_ref().iter().enumerate() {
            let field = format!("store.sentinels[{index}]");
            if ratekeeper_redis::is_tls_url(url.get_ref()) {
                return self.fail(
                    url.span(),
                    field,
                    "TLS through Redis Sentinel is not supported yet: redis:// only",
                );
            }
            checked.push(self.redis_url(url, &field)?);
        }
        let master_name = match &store.master_name {
            Some(name) if !name.get_ref().trim().is_empty() => name.get_ref().trim().to_owned(),
            Some(name) => return self.fail(name.span(), "store.master_name", "must not be empty"),
            None => {
                return self.fail(
                    sentinels.span(),
                    "store.master_name",
                    "sentinels need master_name: the name the Sentinels monitor the primary \
                     by (`sentinel monitor NAME ...`)",
                )
            }
        };
        let master_auth = match (&store.master_username, &store.master_password) {
            (None, None) => None,
            (username, Some(password)) if !password.get_ref().is_empty() => Some((
                username.as_ref().map(|name| name.get_ref().clone()),
                password.get_ref().clone(),
            )),
            (_, Some(password)) => {
                return self.fail(
                    password.span(),
                    "store.master_password",
                    "must not be empty",
                )
            }
            (Some(username), None) => {
                return self.fail(
                    username.span(),
                    "store.master_username",
                    "master_username goes with master_password",
                )
            }
        };
        Ok(Backend::RedisSentinel {
            sentinels: checked,
            master_name,
            master_auth,
            prefix,
            timeout,
            batching,
        })
    }

    /// `lease` and its settings: `None` when leasing is off.
    fn lease(
        &self,
        store: &FileStore,
        max_keys: usize,
    ) -> Result<Option<LeaseSettings>, ConfigError> {
        let max_chunk = self.bounded(
            &store.lease_max_chunk,
            "lease_max_chunk",
            LEASE_MAX_CHUNK as usize,
            MAX_LEASE_CHUNK,
        )?;
        let chunk_ms = self.bounded(
            &store.lease_chunk_ms,
            "lease_chunk_ms",
            LEASE_CHUNK_MS as usize,
            MAX_LEASE_MS,
        )?;
        let lifetime_ms = self.bounded(
            &store.lease_lifetime_ms,
            "lease_lifetime_ms",
            LEASE_LIFETIME_MS as usize,
            MAX_LEASE_MS,
        )?;
        if !store.lease.as_ref().is_some_and(|on| *on.get_ref()) {
            return Ok(None);
        }
        let mut settings = LeaseSettings::default();
        settings.max_chunk = max_chunk as u64;
        settings.chunk_for = Duration::from_millis(chunk_ms as u64);
        settings.lifetime = Duration::from_millis(lifetime_ms as u64);
        settings.max_keys = max_keys;
        settings.spend_while_down = store
            .lease_spend_while_down
            .as_ref()
            .is_none_or(|on| *on.get_ref());
        Ok(Some(settings))
    }

    pub(super) fn redis_url(
        &self,
        url: &Spanned<String>,
        field: &str,
    ) -> Result<String, ConfigError> {
        let text = url.get_ref();
        let known = ["redis://", "rediss://", "redis+unix://", "unix://"];
        let rest = known.iter().find_map(|scheme| text.strip_prefix(scheme));
        match rest {
            Some(rest) if !rest.is_empty() => Ok(text.clone()),
            _ => self.fail(
                url.span(),
                field,
                format!(
                    "invalid Redis url {:?}; expected redis://HOST:PORT, rediss://HOST:PORT or redis+unix:///PATH",
                    redact_url(text)
                ),
            ),
        }
    }
}
