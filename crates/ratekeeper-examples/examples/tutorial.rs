//! A tutorial on rate limiting, its printed outputs reproduced (seed 002,
//! a tutorial).
//!
//! 1. A token bucket of 3, one more token every 200 ms: four requests at
//!    once, then one at 150 ms and two at 200 ms.
//! 2. One bucket per key (2 tokens, one a second) on a clock the program
//!    moves: alice's third request waits, bob is not affected.
//! 3. 100 threads hit a fixed window of 10 at the same moment: exactly 10
//!    get through, because each take is one atomic step.
//! 4. The boundary burst: 5 requests at 999 ms and 5 at 1,001 ms under 5
//!    per second. A fixed window admits all 10; a sliding window counter, a
//!    sliding log and a token bucket admit 5.
//! 5. Old windows do not stay in the table: the sweep evicts them.
//! 6. Limits in one process's memory are per process: four "nodes" with a
//!    limit of 10 each admit 40; sharing one store (a SQLite file) they
//!    admit 10.
//!
//! Time comes from a [`ManualClock`] or is passed in, so the output never
//! depends on the machine's speed.
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example tutorial
//! ```

use futures_executor::block_on;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, policy::Algorithm, FixedWindow, Limit, MemoryLimiter, Outcome, Policy,
    RetryAfter, SlidingLog, SlidingWindow, Store, Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;

/// Anything that can go wrong here.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

fn ms(t: u64) -> Timestamp {
    Timestamp::from_millis(t)
}

fn retry_ms(retry: RetryAfter) -> String {
    match retry {
        RetryAfter::After(wait) => format!("{} ms", wait.as_millis()),
        RetryAfter::Never => "never".to_owned(),
    }
}

/// Part 1: one bucket, as a pure state passed along.
pub(crate) fn bucket() -> Result<Vec<String>, Error> {
    let policy = TokenBucket::new(1, Duration::from_millis(200), 3)?;
    let mut state = policy.fresh();
    let mut lines = Vec::new();
    for n in 1..=4 {
        let (decision, next) = policy.decide(&state, ms(0), 1);
        state = next;
        lines.push(if decision.is_allowed() {
            format!("t=0    request {n}: ok")
        } else {
            format!(
                "t=0    request {n}: refused, retry in {}",
                retry_ms(decision.retry_after())
            )
        });
    }
    let (refused, next) = policy.decide(&state, ms(150), 1);
    state = next;
    if refused.is_allowed() {
        return Err("t=150 should be refused".into());
    }
    lines.push(format!(
        "t=150  refused, retry in {}",
        retry_ms(refused.retry_after())
    ));
    let (ok, next) = policy.decide(&state, ms(200), 1);
    state = next;
    lines.push(format!(
        "t=200  {}",
        if ok.is_allowed() { "ok" } else { "refused" }
    ));
    let (again, _) = policy.decide(&state, ms(200), 1);
    lines.push(format!(
        "t=200  {}",
        if again.is_allowed() {
            "ok"
        } else {
            "refused again"
        }
    ));
    Ok(lines)
}

fn outcome_text(outcome: Outcome) -> String {
    match outcome {
        o if o.is_allowed() => "ok".to_owned(),
        Outcome::Decided(d) => format!("retry in {}", retry_ms(d.retry_after())),
        Outcome::Saturated { .. } => "saturated".to_owned(),
    }
}

/// Part 2: a bucket per key, on a clock the program moves.
pub(crate) fn per_key() -> Result<Vec<String>, Error> {
    let clock = ManualClock::new(ms(0));
    let limiter = MemoryLimiter::builder(TokenBucket::new(1, Duration::from_secs(1), 2)?)
        .clock(clock.clone())
        .background_sweep(false)
        .build()?;
    let results: Vec<String> = ["alice", "alice", "alice", "bob"]
        .iter()
        .map(|key| format!("{key}: {}", outcome_text(limiter.check(key, 1))))
        .collect();
    clock.set(ms(1_000));
    Ok(vec![
        format!("at t=0: [{}]", results.join(", ")),
        format!(
            "alice at t=1000: {}",
            outcome_text(limiter.check("alice", 1))
        ),
    ])
}

/// Part 3: how many of `callers` threads, released together at 5,000 ms,
/// a fixed window of `limit` per second admits.
pub(crate) fn concurrent(callers: usize, limit: u64) -> Result<u64, Error> {
    let clock = ManualClock::new(ms(5_000));
    let limiter = MemoryLimiter::builder(FixedWindow::new(limit, Duration::from_secs(1))?)
        .clock(clock)
        .background_sweep(false)
        .build()?;
    let allowed = AtomicU64::new(0);
    let start = Barrier::new(callers);
    std::thread::scope(|s| {
        for _ in 0..callers {
            s.spawn(|| {
                start.wait();
                if limiter.check("api", 1).is_allowed() {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Ok(allowed.into_inner())
}

/// Part 4: 5 requests at 999 ms and 5 at 1,001 ms under 5 per second.
pub(crate) fn boundary(policy: &Policy) -> u64 {
    let mut state = policy.fresh();
    let mut allowed = 0;
    for t in [999; 5].into_iter().chain([1_001; 5]) {
        let (decision, next) = policy.decide(&state, ms(t), 1);
        state = next;
        allowed += u64::from(decision.is_allowed());
    }
    allowed
}

/// Part 4 for each policy, as lines.
pub(crate) fn boundaries() -> Result<Vec<String>, Error> {
    let second = Duration::from_secs(1);
    let policies: [(&str, Policy); 4] = [
        ("fixed window", FixedWindow::new(5, second)?.into()),
        ("sliding window", SlidingWindow::new(5, second)?.into()),
        ("sliding log", SlidingLog::new(5, second)?.into()),
        ("token bucket", TokenBucket::new(5, second, 5)?.into()),
    ];
    Ok(policies
        .iter()
        .map(|(name, policy)| {
            format!(
                "allowed between t=999 and t=1001 ({name}): {}",
                boundary(policy)
            )
        })
        .collect())
}

/// Part 5: a window's key is swept once the window is over.
pub(crate) fn sweep() -> Result<String, Error> {
    let clock = ManualClock::new(ms(5_000));
    let limiter = MemoryLimiter::builder(FixedWindow::new(10, Duration::from_secs(1))?)
        .clock(clock.clone())
        .background_sweep(false)
        .build()?;
    for key in ["alice", "bob", "carol"] {
        let _ = limiter.check(key, 1);
    }
    let before = limiter.len();
    clock.set(ms(6_000));
    let evicted = limiter.sweep();
    Ok(format!(
        "keys kept: {before} at t=5000, {} after the sweep at t=6000 (evicted {evicted})",
        limiter.len()
    ))
}

/// Part 6: four nodes, 25 requests each, a limit of 10, first each in its
/// own memory, then all in one SQLite file.
pub(crate) fn nodes() -> Result<Vec<String>, Error> {
    let clock = ManualClock::new(ms(5_000));
    let window = FixedWindow::new(10, Duration::from_secs(1))?;
    let mut in_memory = 0;
    for _node in 0..4 {
        let limiter = MemoryLimiter::builder(window)
            .clock(clock.clone())
            .background_sweep(false)
            .build()?;
        in_memory += (0..25)
            .filter(|_| limiter.check("api", 1).is_allowed())
            .count();
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shared.db");
    let limit = Limit::new("api", window)?;
    let mut shared = 0;
    for _node in 0..4 {
        let store = SqliteStore::builder(&path).clock(clock.clone()).open()?;
        for _ in 0..25 {
            shared += usize::from(block_on(store.check(&limit, b"api", 1))?.is_allowed());
        }
    }
    Ok(vec![
        format!("four nodes, each its own memory: {in_memory} allowed"),
        format!("four nodes, one shared store: {shared} allowed"),
    ])
}

/// Everything the example prints, in order.
pub(crate) fn transcript() -> Result<Vec<String>, Error> {
    let mut lines = bucket()?;
    lines.extend(per_key()?);
    lines.push(format!("allowed out of 100: {}", concurrent(100, 10)?));
    lines.extend(boundaries()?);
    lines.push(sweep()?);
    lines.extend(nodes()?);
    Ok(lines)
}

fn main() -> Result<(), Error> {
    for line in transcript()? {
        println!("{line}");
    }
    Ok(())
}
