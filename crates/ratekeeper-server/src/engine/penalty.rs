//! Penalties (`block_for`): a key that a limit refuses is blocked for a
//! while, and for longer when it offends again.
//!
//! A block is the key's debt under the limit itself: the refusal is
//! followed by a report of as many units as the block lasts, so the store
//! refuses the key until its time has paid them, on every instance and
//! every store, exactly. How many times the key offended lately is kept
//! in the store too, under a second limit (`NAME~offences`), a bucket
//! that forgets one offence per `block_forget`.
//!
//! Each instance remembers the blocks it has seen ([`Blocks`], bounded):
//! a blocked key's next requests are refused from there, without a call
//! to the store. A refusal whose wait is longer than the limit's whole
//! refill is a block in force (set by another instance): remembered, not
//! counted as a new offence.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ratekeeper::policy::Algorithm;
use ratekeeper::store::StoreError;
use ratekeeper::{Decision, Gcra, Limit, Outcome, RetryAfter, Store, Timestamp};

use super::{Engine, LimitCheck};
use crate::config::Penalty;

/// The most blocked keys an instance remembers; past it, a block is
/// still in the store and refused there, one call each.
pub const MAX_REMEMBERED_BLOCKS: usize = 10_000;

/// The blocks this instance has seen, until they end.
#[derive(Debug, Default)]
pub struct Blocks {
    /// Limit name, a 0 byte, the key (bounded): when its block ends.
    ends: Mutex<HashMap<Vec<u8>, Timestamp>>,
}

/// One blocked key, as `/v1/stats` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BlockedKey {
    /// The key (a digest past 64 bytes).
    pub key: String,
    /// Milliseconds until its block ends.
    pub ends_in_ms: u64,
}

fn entry(limit: &str, key: &[u8]) -> Vec<u8> {
    let key = ratekeeper::key::bounded(key);
    let mut entry = Vec::with_capacity(limit.len() + 1 + key.len());
    entry.extend_from_slice(limit.as_bytes());
    entry.push(0);
    entry.extend_from_slice(&key);
    entry
}

impl Blocks {
    /// How long `key`'s block under `limit` lasts from `now`, if this
    /// instance knows one.
    pub fn left(&self, limit: &str, key: &[u8], now: Timestamp) -> Option<Duration> {
        let ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
        let end = *ends.get(&entry(limit, key))?;
        let left = end.duration_since(now);
        (!left.is_zero()).then_some(left)
    }

    /// Remembers that `key` is blocked under `limit` until `end`; when
    /// full, forgets the blocks that ended first, and past that does not
    /// remember (the store still refuses the key).
    pub fn remember(&self, limit: &str, key: &[u8], end: Timestamp, now: Timestamp) {
        let mut ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
        if ends.len() >= MAX_REMEMBERED_BLOCKS {
            ends.retain(|_, end| *end > now);
            if ends.len() >= MAX_REMEMBERED_BLOCKS {
                return;
            }
        }
        ends.insert(entry(limit, key), end);
    }

    /// The keys blocked under `limit` now, the longest blocks first, at
    /// most `most`.
    pub fn of(&self, limit: &str, now: Timestamp, most: usize) -> Vec<BlockedKey> {
        let ends = self.ends.lock().unwrap_or_else(PoisonError::into_inner);
        let prefix = entry(limit, b"");
        let mut blocked: Vec<BlockedKey> = ends
            .iter()
            .filter(|(entry, end)| entry.starts_with(&prefix) && **end > now)
            .map(|(entry, end)| BlockedKey {
                key: String::from_utf8_lossy(&entry[prefix.len()..]).into_owned(),
                ends_in_ms: u64::try_from(end.duration_since(now).as_millis()).unwrap_or(u64::MAX),
            })
            .collect();
        blocked.sort_by(|a, b| b.ends_in_ms.cmp(&a.ends_in_ms).then(a.key.cmp(&b.key)));
        blocked.truncate(most);
        blocked
    }
}

/// The answer to a request of a key blocked for `left` more.
pub(super) fn blocked_answer(check: &LimitCheck, left: Duration) -> Outcome {
    let quota = check.limit.limit().policy().quota();
    Outcome::Decided(Decision::denied(quota, 0, left, RetryAfter::After(left)))
}

/// The limit a penalty limit's offences are counted under: one offence
/// forgotten per `block_forget`, at most [`Penalty::MAX_OFFENCES`].
fn offences_limit(limit: &Limit, penalty: &Penalty) -> Result<Limit, StoreError> {
    const SUFFIX: &str = Penalty::OFFENCES_SUFFIX;
    let name = limit.name();
    let name = match name.len() + SUFFIX.len() <= ratekeeper::store::MAX_LIMIT_NAME {
        true => format!("{name}{SUFFIX}"),
        // A long name: a digest of it, which no configured name is.
        false => {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(name.as_bytes());
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}{SUFFIX}")
        }
    };
    let policy = Gcra::new(1, penalty.block_forget, Penalty::MAX_OFFENCES)
        .map_err(|error| StoreError::unavailable(error.to_string()))?;
    Limit::new(name, policy).map_err(|error| StoreError::unavailable(error.to_string()))
}

impl Engine {
    /// Whether `check`'s key is blocked, by what this instance knows: the
    /// answer, taking nothing from the store.
    pub(super) fn known_block(&self, check: &LimitCheck) -> Option<Outcome> {
        check.limit.config().penalty?;
        if check.cost == 0 || check.limit.is_shadow() {
            return None;
        }
        let now = self.inner.clock.now();
        let left = self
            .inner
            .blocks
            .left(check.limit.name(), &check.key, now)?;
        self.inner.metrics.record_block(check.limit.name(), false);
        Some(blocked_answer(check, left))
    }

    /// The answer to `check`, refused by its store as `outcome`, once its
    /// penalty is applied: a new offence blocks the key (charged as debt,
    /// the longer the more it offended lately); a refusal that is already
    /// a block is remembered. Other answers are returned as they are.
    pub(super) async fn penalize(
        &self,
        check: &LimitCheck,
        outcome: Outcome,
    ) -> Result<Outcome, StoreError> {
        let Some(penalty) = check.limit.config().penalty else {
            return Ok(outcome);
        };
        let Outcome::Decided(decision) = outcome else {
            return Ok(outcome);
        };
        let limit = check.limit.limit();
        let policy = limit.policy();
        let (Some(unit), RetryAfter::After(wait)) =
            (policy.unit_interval(), decision.retry_after())
        else {
            // Allowed, or never (a cost over the burst): no offence.
            return Ok(outcome);
        };
        if decision.is_allowed() || check.cost == 0 {
            return Ok(outcome);
        }
        let now = self.inner.clock.now();
        let refill = Duration::from_nanos(
            u64::try_from(unit.as_nanos().saturating_mul(u128::from(policy.quota())))
                .unwrap_or(u64::MAX),
        );
        if wait > refill {
            // Longer than any refusal of a key's own use: a block already.
            self.inner
                .blocks
                .remember(limit.name(), &check.key, now.saturating_add(wait), now);
            return Ok(outcome);
        }
        let store = self.timed_store();
        let counted = store
            .report(&offences_limit(limit, &penalty)?, &check.key, 1)
            .await?;
        let offences = match counted {
            Outcome::Decided(counted) if counted.is_allowed() => {
                Penalty::MAX_OFFENCES - counted.remaining().min(Penalty::MAX_OFFENCES - 1)
            }
            _ => Penalty::MAX_OFFENCES,
        };
        let block = penalty.block(offences);
        // The key waits a unit for its next one already: the debt is the
        // rest of the block.
        let units = block.as_nanos().div_ceil(unit.as_nanos().max(1));
        let units = u64::try_from(units).unwrap_or(u64::MAX).saturating_sub(1);
        let blocked = match units {
            0 => outcome,
            units => store.report(limit, &check.key, units).await?,
        };
        let end = match blocked.retry_after() {
            RetryAfter::After(wait) => now.saturating_add(wait),
            RetryAfter::Never => now.saturating_add(block),
        };
        self.inner
            .blocks
            .remember(limit.name(), &check.key, end, now);
        self.inner.metrics.record_block(limit.name(), true);
        Ok(match blocked {
            Outcome::Decided(_) => blocked_answer(check, end.duration_since(now)),
            saturated => saturated,
        })
    }

    /// The keys blocked under `limit` that this instance knows of, the
    /// longest blocks first, at most `most`.
    pub fn blocked_keys(&self, limit: &str, most: usize) -> Vec<BlockedKey> {
        self.inner.blocks.of(limit, self.inner.clock.now(), most)
    }
}
