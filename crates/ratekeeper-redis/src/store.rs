//! The store: its connection, the script call and the decisions it makes.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::{ReservationError, ReservationId, MAX_OPEN_RESERVATIONS};
use ratekeeper::{
    policy::Algorithm,
    store::{take_by, Check, MultiOutcome, StoreError, Taken},
    Decision, Limit, Outcome, Store, Timestamp,
};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind};
use thiserror::Error;

use crate::batch::{BatchStats, Batcher, Batching};
use crate::builder::{ConnectError, CrossSlot, RedisStoreBuilder};
use crate::key::{redis_key, KeyTags};
use crate::params::{Params, MAX_EXACT};
use crate::reply::{numbers, parse, ReplyError};
use crate::script::{
    function_missing, function_name, functions_unavailable, library, script_arg, script_cmd, SCRIPT,
};
use crate::slot::{hash_slot, slot_tag};

#[derive(Clone)]
pub(crate) enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
    /// One primary, found through Sentinels.
    Sentinel(crate::sentinel::SentinelPrimary),
}

impl Connection {
    async fn query(&mut self, cmd: &Cmd) -> Result<Vec<u8>, RedisError> {
        match self {
            Connection::Node(c) => cmd.query_async(c).await,
            Connection::Cluster(c) => cmd.query_async(c).await,
            // Boxed: its future (the Sentinels' lookup inside) would
            // otherwise grow every future that awaits a call.
            Connection::Sentinel(primary) => Box::pin(primary.query(cmd)).await,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) caller: Arc<Caller>,
    /// The queue of calls waiting to go together (one server, batching on).
    pub(crate) batcher: Option<Batcher>,
    pub(crate) batching: Batching,
    pub(crate) prefix: Vec<u8>,
    pub(crate) tags: KeyTags,
    pub(crate) cross_slot: CrossSlot,
}

/// What runs the script: the connection, and how to call the script on it.
pub(crate) struct Caller {
    pub(crate) connection: Connection,
    pub(crate) timeout: Duration,
    pub(crate) sha: String,
    /// Whether to call the function (Redis 7+); cleared for good once the
    /// server says it has no functions (`FCALL` unknown, or not permitted).
    pub(crate) functions: AtomicBool,
}

/// Why a script call failed; cloned for each call of a failed batch.
#[derive(Clone)]
pub(crate) enum CallError {
    Timeout(Duration),
    Redis(Arc<RedisError>, Duration),
}

impl CallError {
    pub(crate) fn to_store_error(&self) -> StoreError {
        match self {
            CallError::Timeout(timeout) => StoreError::Timeout(*timeout),
            CallError::Redis(error, timeout) if error.is_timeout() => StoreError::Timeout(*timeout),
            CallError::Redis(error, _) => match error.kind() {
                ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
                    StoreError::invalid_reply(Arc::clone(error))
                }
                _ => StoreError::unavailable(Arc::clone(error)),
            },
        }
    }
}

impl Caller {
    /// Runs the script once, within the timeout, and reads its reply.
    pub(crate) async fn call(&self, keys: &[&[u8]], arg: &[u8]) -> Result<Vec<i64>, StoreError> {
        match self.call_raw(keys, arg).await {
            Ok(reply) => Ok(numbers(&reply)?),
            Err(error) => Err(error.to_store_error()),
        }
    }

    /// Runs the script once, within the timeout: the function (`FCALL`),
    /// loaded first if the server lacks it, or `EVALSHA` on servers without
    /// functions, with `EVAL` after a `NOSCRIPT`.
    pub(crate) async fn call_raw(&self, keys: &[&[u8]], arg: &[u8]) -> Result<Vec<u8>, CallError> {
        let call = async {
            let mut connection = self.connection.clone();
            if self.functions.load(Ordering::Relaxed) {
                let fcall = script_cmd("FCALL", function_name(), keys, arg);
                match connection.query(&fcall).await {
                    Err(e) if function_missing(&e) => {
                        let mut load = redis::cmd("FUNCTION");
                        load.arg("LOAD").arg("REPLACE").arg(library());
                        match connection.query(&load).await {
                            Ok(_) => return connection.query(&fcall).await,
                            Err(e) if functions_unavailable(&e) => {
                                self.functions.store(false, Ordering::Relaxed);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Err(e) if functions_unavailable(&e) => {
                        self.functions.store(false, Ordering::Relaxed);
                    }
                    other => return other,
                }
            }
            let evalsha = script_cmd("EVALSHA", &self.sha, keys, arg);
            match connection.query(&evalsha).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    // EVAL runs the script and caches it on that node.
                    let eval = script_cmd("EVAL", SCRIPT, keys, arg);
                    connection.query(&eval).await
                }
                other => other,
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(error)) => Err(CallError::Redis(Arc::new(error), self.timeout)),
            Err(_) => Err(CallError::Timeout(self.timeout)),
        }
    }
}

/// A rate-limit [`Store`] on Redis or Redis Cluster.
///
/// Each decision is one round trip running one Lua script, atomic, on
/// Redis's own clock: on Redis 7 and later a Redis function the store
/// loads itself (`FCALL`; after `Function not found` the library is loaded with
/// `FUNCTION LOAD REPLACE`, on every primary of a cluster, and the call
/// made again), else, when the server has no functions (before Redis 7, or
/// a user not permitted them), `EVALSHA` of the same script, loaded again by
/// `EVAL` after a `NOSCRIPT`. Either way the script is the same, and reads
/// Redis's clock (`TIME`), so clients whose clocks disagree get the same
/// decisions. A
/// limit's key for `key` is [`RedisStore::key`]; it expires when its
/// state is fresh again, never before (a GCRA key up to a quarter of its
/// state's lifetime later; see the crate's documentation). Every call is
/// bounded by the timeout.
///
/// Decisions equal the pure policies' ([`Algorithm::decide`]) at the
/// server's time in whole microseconds, for every policy that
/// [`check_policy`](crate::check_policy) accepts; others are refused with
/// [`StoreError::Unsupported`].
///
/// Clones share the connection.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.inner.caller.connection {
            Connection::Node(_) => "node",
            Connection::Sentinel(_) => "sentinel",
            Connection::Cluster(_) => "cluster",
        };
        f.debug_struct("RedisStore")
            .field("connection", &kind)
            .field("prefix", &String::from_utf8_lossy(&self.inner.prefix))
            .field("timeout", &self.inner.caller.timeout)
            .field("cross_slot", &self.inner.cross_slot)
            .field("batching", &self.inner.batching)
            .finish()
    }
}

/// One limit of a call: its key, script parameters, quota and cost.
#[derive(Clone)]
pub(crate) struct Prepared {
    key: Vec<u8>,
    pub(crate) params: Params,
    pub(crate) quota: u64,
    /// What the call takes from this key (the units given back, for a
    /// refund; ignored by a peek).
    pub(crate) cost: u64,
}

/// The script's operations.
pub(crate) const CHECK: u8 = 1;
pub(crate) const PEEK: u8 = 2;
pub(crate) const REFUND: u8 = 3;
/// A refund applied only before a deadline on Redis's clock.
pub(crate) const REFUND_BEFORE: u8 = 5;
/// Units counted whatever the limit says.
pub(crate) const REPORT: u8 = 6;
/// A reservation decided and kept.
const HOLD: u8 = 7;
/// A reservation settled.
const SETTLE: u8 = 8;
/// An in-flight slot taken.
const TAKE_SLOT: u8 = 9;
/// An in-flight slot freed.
const FREE_SLOT: u8 = 10;

/// What is done to a reservation.
enum ReservationOp {
    /// `units` decided and kept for `ttl`.
    Hold { units: u64, ttl: Duration },
    /// Settled at `actual` units (`None`: cancelled).
    Settle { actual: Option<u64> },
}

/// The pinned time (µs) of a test hook, or Redis's clock.
pub(crate) type Now = Option<u64>;

impl RedisStore {
    /// A builder with the defaults: prefix [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX), timeout
    /// [`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT).
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }

    /// Connects to one Redis server with the default settings.
    pub async fn connect(url: &str) -> Result<RedisStore, ConnectError> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster with the default settings.
    pub async fn cluster<I, S>(urls: I) -> Result<RedisStore, ConnectError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().cluster(urls).await
    }

    /// The Redis key under which `limit` keeps `key`'s state:
    /// `{prefix}{length of the name}:{name}:{key}`, the key bounded to 64
    /// bytes ([`ratekeeper::key::bounded`]) and its `%` and `:` (and, unless
    /// [`hash_tags_in_keys`](RedisStoreBuilder::hash_tags_in_keys), `{` and
    /// `}`) percent-encoded; for example `ratekeeper:6:per-ip:203.0.113.7`.
    /// So no key chooses its Redis Cluster slot, and no two (prefix, limit,
    /// key) share a Redis key, even under nested prefixes.
    pub fn key(&self, limit: &Limit, key: &[u8]) -> Vec<u8> {
        redis_key(&self.inner.prefix, limit.name(), key, self.inner.tags)
    }

    /// Whether this store talks to a Redis Cluster (where a check of keys
    /// in different hash slots is decided one slot at a time, see
    /// [`CrossSlot`](crate::CrossSlot)) rather than one server.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.caller.connection, Connection::Cluster(_))
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.caller.timeout
    }

    /// How concurrent calls share script calls ([`Batching::OFF`] on Redis
    /// Cluster).
    pub fn batching(&self) -> Batching {
        self.inner.batching
    }

    /// What coalescing has done since the store was built; `None` when it
    /// is off ([`Batching::OFF`], or Redis Cluster). Clones share the
    /// counters.
    pub fn batch_stats(&self) -> Option<BatchStats> {
        self.inner.batcher.as_ref().map(Batcher::stats)
    }

    /// Like [`Store::check`], also returning the Redis server's time the
    /// decision was made at (whole microseconds since the Unix epoch).
    pub async fn check_with_time(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<(Outcome, Timestamp), StoreError> {
        self.check_at(limit, key, cost, None).await
    }

    /// **Test hook**: a view of this store whose scripts take `now` (rounded
    /// down to whole microseconds since the Unix epoch) instead of reading
    /// Redis's clock, so tests can replay a sequence of times. Keys it
    /// writes live at least an hour from the write that set their expiry,
    /// whatever their state. Never use it to
    /// decide real requests: it is the caller's clock, which is exactly what
    /// the store exists to avoid.
    pub fn pinned(&self, now: Timestamp) -> Pinned<'_> {
        Pinned {
            store: self,
            now_us: now.as_nanos() / 1_000,
        }
    }

    fn prepare(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Prepared, StoreError> {
        let policy = limit.policy();
        let params = Params::of(policy).map_err(|e| StoreError::Unsupported(e.kind))?;
        Ok(Prepared {
            key: self.key(limit, key),
            params,
            quota: policy.quota(),
            cost,
        })
    }

    async fn check_at(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        now: Now,
    ) -> Result<(Outcome, Timestamp), StoreError> {
        let prepared = [self.prepare(limit, key, cost)?];
        let reply = self.run(CHECK, &prepared, now).await?;
        let (outcomes, _, at) = parse(&prepared, &reply)?;
        Ok((outcomes[0], at))
    }

    async fn peek_at(&self, limit: &Limit, key: &[u8], now: Now) -> Result<Decision, StoreError> {
        let prepared = [self.prepare(limit, key, 0)?];
        let reply = self.run(PEEK, &prepared, now).await?;
        let (outcomes, _, _) = parse(&prepared, &reply)?;
        outcomes[0]
            .decision()
            .copied()
            .ok_or_else(|| ReplyError::PeekUndecided.into())
    }

    async fn refund_at(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        now: Now,
    ) -> Result<(), StoreError> {
        let prepared = [self.prepare(limit, key, units)?];
        self.run(REFUND, &prepared, now).await.map(|_| ())
    }

    async fn report_at(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        now: Now,
    ) -> Result<Outcome, StoreError> {
        let prepared = [self.prepare(limit, key, units)?];
        let reply = self.run(REPORT, &prepared, now).await?;
        let (outcomes, _, _) = parse(&prepared, &reply)?;
        Ok(outcomes[0])
    }

    /// The key of `state_key`'s reservations: in its hash slot (a tag of
    /// that slot first), and apart from every state key (which begins with
    /// the prefix, never a brace).
    fn reservations_key(state_key: &[u8]) -> Vec<u8> {
        Self::beside(state_key, b":reservations")
    }

    /// `state_key` behind its slot's tag and before `suffix`: a key of the
    /// same hash slot that no state key is.
    fn beside(state_key: &[u8], suffix: &[u8]) -> Vec<u8> {
        let tag = slot_tag(hash_slot(state_key));
        let mut key = Vec::with_capacity(tag.len() + state_key.len() + 2 + suffix.len());
        key.push(b'{');
        key.extend_from_slice(tag.as_bytes());
        key.push(b'}');
        key.extend_from_slice(state_key);
        key.extend_from_slice(suffix);
        key
    }

    /// The sorted set of `key`'s slots under the in-flight cap `limit`:
    /// beside the state key a rate limit of the same name would have, and
    /// apart from it and its reservations.
    fn slots_key(&self, limit: &InFlight, key: &[u8]) -> Vec<u8> {
        let state_key = redis_key(&self.inner.prefix, limit.name(), key, self.inner.tags);
        Self::beside(&state_key, b":in-flight")
    }

    /// A take (`op` [`TAKE_SLOT`]) or a free ([`FREE_SLOT`]) of slot `id`:
    /// one script on the key's sorted set; the slots taken before it, for
    /// a take.
    async fn slot_at(
        &self,
        op: u8,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
        now: Now,
    ) -> Result<u64, StoreError> {
        // The header's shape (op, cap, time; then a limit's code, its lease
        // in µs and three numbers unused), then the id.
        let lease_us = limit.lease().as_micros().min(u128::from(MAX_EXACT)) as f64;
        let mut arg = Vec::with_capacity(66);
        arg.push(op);
        arg.extend_from_slice(&(limit.max() as f64).to_le_bytes());
        arg.extend_from_slice(&(now.unwrap_or(0).min(MAX_EXACT) as f64).to_le_bytes());
        arg.push(0);
        for value in [lease_us, 0.0, 0.0, 0.0] {
            arg.extend_from_slice(&value.to_le_bytes());
        }
        arg.extend_from_slice(&id.to_bytes());
        let slots = self.slots_key(limit, key);
        let reply = self.inner.caller.call(&[&slots[..]], &arg).await?;
        match (op, &reply[..]) {
            (_, [-5]) => Err(ReservationError::Unknown.into()),
            (TAKE_SLOT, [taken, _now]) => Ok(u64::try_from(*taken).unwrap_or(0)),
            (FREE_SLOT, [_now]) => Ok(0),
            _ => Err(StoreError::unavailable(format!(
                "the script's reply to an in-flight slot was {reply:?}"
            ))),
        }
    }

    /// A hold or a settle of reservation `id`; never batched, as its
    /// arguments are its own.
    async fn reservation_at(
        &self,
        op: ReservationOp,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        now: Now,
    ) -> Result<Outcome, StoreError> {
        // After the limit: the ttl in µs (hold), or the actual units (-1
        // cancels).
        let (op, units, extra) = match op {
            ReservationOp::Hold { units, ttl } => {
                let ttl_us = ttl.as_micros().min(u128::from(MAX_EXACT)) as f64;
                (HOLD, units, ttl_us)
            }
            ReservationOp::Settle { actual } => {
                let actual = actual.map_or(-1.0, |units| units.min(MAX_EXACT) as f64);
                (SETTLE, 0, actual)
            }
        };
        let prepared = [self.prepare(limit, key, units)?];
        let mut arg = script_arg(op, &prepared, now);
        arg.extend_from_slice(&id.to_bytes());
        arg.extend_from_slice(&extra.to_le_bytes());
        arg.extend_from_slice(&(MAX_OPEN_RESERVATIONS as f64).to_le_bytes());
        let registry = Self::reservations_key(&prepared[0].key);
        let keys = [&prepared[0].key[..], &registry[..]];
        let reply = self.inner.caller.call(&keys, &arg).await?;
        match reply[..] {
            [-4] => Err(ReservationError::TooMany.into()),
            [-5] => Err(ReservationError::Unknown.into()),
            _ => {
                let (outcomes, _, _) = parse(&prepared, &reply)?;
                Ok(outcomes[0])
            }
        }
    }

    async fn check_all_at(
        &self,
        checks: &[Check<'_>],
        now: Now,
    ) -> Result<MultiOutcome, StoreError> {
        let prepared = checks
            .iter()
            .map(|check| self.prepare(check.limit, check.key, check.cost))
            .collect::<Result<Vec<_>, _>>()?;
        if prepared.is_empty() {
            return Ok(MultiOutcome::new(Vec::new(), None));
        }
        let groups = match self.inner.caller.connection {
            Connection::Node(_) | Connection::Sentinel(_) => {
                vec![(0..prepared.len()).collect::<Vec<_>>()]
            }
            Connection::Cluster(_) => by_slot(&prepared),
        };
        if groups.len() == 1 {
            let reply = self.run(CHECK, &prepared, now).await?;
            let (outcomes, denied, _) = parse(&prepared, &reply)?;
            return Ok(MultiOutcome::new(outcomes, denied));
        }
        if self.inner.cross_slot == CrossSlot::Refuse {
            return Err(StoreError::UnsupportedOperation(
                "check limits whose keys are in different Redis Cluster hash slots at once",
            ));
        }
        // One script per slot; refund the slots already charged if a later
        // one denies or fails.
        let mut outcomes: Vec<Option<Outcome>> = vec![None; prepared.len()];
        let parts: Vec<Vec<Prepared>> = groups
            .iter()
            .map(|group| group.iter().map(|&i| prepared[i].clone()).collect())
            .collect();
        for (g, part) in parts.iter().enumerate() {
            let result = match self.run(CHECK, part, now).await {
                Ok(reply) => parse(part, &reply),
                Err(error) => Err(error),
            };
            let (group_outcomes, denied, _) = match result {
                Ok(parsed) => parsed,
                Err(error) => {
                    self.refund_parts(&parts[..g], now).await;
                    return Err(error);
                }
            };
            for (&i, outcome) in groups[g].iter().zip(group_outcomes) {
                outcomes[i] = Some(outcome);
            }
            if let Some(d) = denied {
                self.refund_parts(&parts[..g], now).await;
                for (later, part) in parts.iter().enumerate().skip(g + 1) {
                    let reply = self.run(PEEK, part, now).await?;
                    let (peeked, _, _) = parse(part, &reply)?;
                    for (&i, outcome) in groups[later].iter().zip(peeked) {
                        outcomes[i] = Some(outcome);
                    }
                }
                let outcomes = outcomes.into_iter().map(Option::unwrap).collect();
                return Ok(MultiOutcome::new(outcomes, Some(groups[g][d])));
            }
        }
        let outcomes = outcomes.into_iter().map(Option::unwrap).collect();
        Ok(MultiOutcome::new(outcomes, None))
    }

    async fn refund_parts(&self, parts: &[Vec<Prepared>], now: Now) {
        for part in parts {
            // A refund that fails leaves the limit stricter, never looser.
            let _ = self.run(REFUND, part, now).await;
        }
    }

    /// Runs the script once over `prepared`, within the timeout: now, or
    /// with other calls when enough are running (see [`Batching`]).
    async fn run(&self, op: u8, prepared: &[Prepared], now: Now) -> Result<Vec<i64>, StoreError> {
        let inner = &*self.inner;
        if prepared.len() > MAX_LIMITS {
            return Err(StoreError::UnsupportedOperation(
                "check more than 1,000 limits in one call",
            ));
        }
        let arg = script_arg(op, prepared, now);
        let Some(batcher) = &inner.batcher else {
            let keys: Vec<&[u8]> = prepared.iter().map(|p| &p.key[..]).collect();
            return inner.caller.call(&keys, &arg).await;
        };
        if let Some(_permit) = batcher.try_now() {
            let keys: Vec<&[u8]> = prepared.iter().map(|p| &p.key[..]).collect();
            return inner.caller.call(&keys, &arg).await;
        }
        let keys = prepared.iter().map(|p| p.key.clone()).collect();
        let reply = batcher.enqueue(keys, arg, now);
        let timeout = inner.caller.timeout;
        match tokio::time::timeout(timeout, reply).await {
            Ok(Ok(result)) => result,
            // the runtime is shutting down
            Ok(Err(_)) => Err(StoreError::unavailable(Stopped)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

/// The store's queue stopped before the call was made (its runtime is
/// shutting down).
#[derive(Debug, Error)]
#[error("the Redis store's queue stopped (its runtime is shutting down)")]
struct Stopped;

/// The most limits one call takes (the script unpacks its reply's numbers
/// on Lua's stack).
const MAX_LIMITS: usize = 1_000;

/// Groups the limits by hash slot, in order of first appearance.
fn by_slot(prepared: &[Prepared]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, p) in prepared.iter().enumerate() {
        let slot = hash_slot(&p.key);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, members)) => members.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

impl Store for RedisStore {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.check_at(limit, key, cost, None).await.map(|(o, _)| o)
    }

    /// One script when the key has `up_to` left (a leasing node's usual
    /// case, as it asks for at most half of what is left), a second of
    /// what is left otherwise; with Redis's time of the take.
    async fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> Result<Taken, StoreError> {
        take_by(cost, up_to, |units| async move {
            let (outcome, at) = self.check_at(limit, key, units, None).await?;
            Ok((outcome, Some(at)))
        })
        .await
    }

    /// One script that refunds only while Redis's clock is before
    /// `deadline` (read in whole microseconds, rounded down). Never
    /// batched: the deadline travels in the call's own header.
    async fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> Result<bool, StoreError> {
        let prepared = [self.prepare(limit, key, units)?];
        let mut arg = script_arg(REFUND_BEFORE, &prepared, None);
        let deadline_us = (deadline.as_nanos() / 1_000).min(MAX_EXACT) as f64;
        arg[1..9].copy_from_slice(&deadline_us.to_le_bytes());
        let keys = [&prepared[0].key[..]];
        let reply = self.inner.caller.call(&keys, &arg).await?;
        Ok(reply.first().is_some_and(|&now| now >= 0))
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.peek_at(limit, key, None).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.refund_at(limit, key, units, None).await
    }

    /// One script, on Redis's clock: the units are counted whatever the
    /// limit says (past 2^53, they count as 2^53).
    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.report_at(limit, key, units, None).await
    }

    /// One script: the key's open reservations (a hash beside its state,
    /// in its slot) counted, the check, and the reservation kept with its
    /// expiry on Redis's clock.
    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let hold = ReservationOp::Hold { units, ttl };
        self.reservation_at(hold, limit, key, id, None).await
    }

    /// One script: the reservation taken while open and the state charged.
    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let settle = ReservationOp::Settle { actual };
        self.reservation_at(settle, limit, key, id, None).await
    }

    /// One script: the key's slots past their lease forgotten, the rest
    /// counted, and the new one kept when under the cap.
    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let taken = self.slot_at(TAKE_SLOT, limit, key, id, None).await?;
        Ok(Outcome::Decided(limit.decide(taken)))
    }

    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.slot_at(FREE_SLOT, limit, key, id, None)
            .await
            .map(drop)
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.check_all_at(checks, None).await
    }
}

/// **Test hook**: a [`RedisStore`] whose scripts use a pinned time instead of
/// Redis's clock; made by [`RedisStore::pinned`]. Only for tests that replay
/// a sequence of times.
#[derive(Clone, Copy, Debug)]
pub struct Pinned<'a> {
    store: &'a RedisStore,
    now_us: u64,
}

impl Pinned<'_> {
    /// Like [`Store::check`], also returning the time the script used (the
    /// pinned one).
    pub async fn check_with_time(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<(Outcome, Timestamp), StoreError> {
        self.store
            .check_at(limit, key, cost, Some(self.now_us))
            .await
    }
}

impl Store for Pinned<'_> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        let now = Some(self.now_us);
        self.store
            .check_at(limit, key, cost, now)
            .await
            .map(|(o, _)| o)
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.store.peek_at(limit, key, Some(self.now_us)).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.store
            .refund_at(limit, key, units, Some(self.now_us))
            .await
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.store
            .report_at(limit, key, units, Some(self.now_us))
            .await
    }

    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let hold = ReservationOp::Hold { units, ttl };
        let now = Some(self.now_us);
        self.store.reservation_at(hold, limit, key, id, now).await
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let settle = ReservationOp::Settle { actual };
        let now = Some(self.now_us);
        self.store.reservation_at(settle, limit, key, id, now).await
    }

    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let now = Some(self.now_us);
        let taken = self.store.slot_at(TAKE_SLOT, limit, key, id, now).await?;
        Ok(Outcome::Decided(limit.decide(taken)))
    }

    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        let now = Some(self.now_us);
        self.store
            .slot_at(FREE_SLOT, limit, key, id, now)
            .await
            .map(drop)
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.store.check_all_at(checks, Some(self.now_us)).await
    }
}
