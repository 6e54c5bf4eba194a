//! Coalescing: calls made while a server is busy with earlier ones share one
//! script call.
//!
//! Most of what a decision costs Redis is not the decision: `FCALL` itself,
//! reading `TIME`, and each `redis.call` with its reply made into Lua
//! values. A script that decides many calls pays the first two once and, for
//! a key many calls share, one `GET` and one write in all. So each store
//! lets a few script calls run at once ([`Batching::in_flight`]), each call
//! on its own as soon as it is made; calls made while all of those are
//! running wait in a queue, and the next script to go takes every call
//! waiting (at most [`Batching::max_calls`]). At low load nothing waits and
//! nothing changes; under load one script decides many calls, each as if it
//! ran alone, in the order they were queued.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ratekeeper::store::StoreError;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::reply::{numbers, ReplyError};
use crate::store::{Caller, Now, REFUND};

/// How a [`RedisStore`](crate::RedisStore) on one server coalesces
/// concurrent calls into one script call; set with
/// [`RedisStoreBuilder::batching`](crate::RedisStoreBuilder::batching).
///
/// Up to [`in_flight`](Batching::in_flight) script calls run at once,
/// each made as soon as its call is. Calls made while that many are running
/// wait, and go together, at most [`max_calls`](Batching::max_calls) in
/// one script, as soon as one of them returns. Each is decided as if it ran
/// alone (a batch is one atomic script, in queue order), and each keeps its
/// own timeout, the wait in the queue included.
///
/// Redis Cluster connections do not coalesce: one script may only touch one
/// hash slot, and concurrent calls rarely share one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Batching {
    in_flight: usize,
    max_calls: usize,
}

impl Batching {
    /// Every call its own script, however many run at once.
    pub const OFF: Batching = Batching {
        in_flight: usize::MAX,
        max_calls: 1,
    };

    /// The default: 4 script calls at once, at most 64 calls in one.
    pub const DEFAULT: Batching = Batching {
        in_flight: 4,
        max_calls: 64,
    };

    /// At most `in_flight` script calls at once (at least 1), and at most
    /// `max_calls` calls in one (at least 1, at most 1,000; 1 turns
    /// coalescing off).
    pub fn new(in_flight: usize, max_calls: usize) -> Batching {
        if max_calls <= 1 {
            return Batching::OFF;
        }
        Batching {
            in_flight: in_flight.max(1),
            max_calls: max_calls.min(MAX_CALLS),
        }
    }

    /// How many script calls may run at once before calls wait to go
    /// together.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The most calls one script decides.
    pub fn max_calls(&self) -> usize {
        self.max_calls
    }

    /// Whether calls are ever coalesced.
    pub fn is_on(&self) -> bool {
        self.max_calls > 1
    }
}

impl Default for Batching {
    fn default() -> Self {
        Batching::DEFAULT
    }
}

/// What a store's coalescing has done since the store was built, read with
/// [`RedisStore::batch_stats`](crate::RedisStore::batch_stats): enough to
/// tell whether calls wait and how many go together, to tune
/// [`Batching`].
///
/// `batched_calls / batches` is the mean number of calls per script among
/// those that waited; `queued - batched_calls - abandoned` are waiting now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchStats {
    /// Calls sent as a script of their own as soon as they were made (fewer
    /// than [`Batching::in_flight`] scripts were running).
    pub sent_at_once: u64,
    /// Calls that waited in the queue because that many were running.
    pub queued: u64,
    /// Scripts sent for calls that had waited.
    pub batches: u64,
    /// Calls that had waited, decided by those scripts.
    pub batched_calls: u64,
    /// Calls that had waited and were dropped undecided: their caller had
    /// stopped waiting (its timeout, or the call's future dropped) before
    /// their script went.
    pub abandoned: u64,
}

/// The live counters behind [`BatchStats`]; relaxed, since each is read on
/// its own.
#[derive(Debug, Default)]
struct Counters {
    sent_at_once: AtomicU64,
    queued: AtomicU64,
    batches: AtomicU64,
    batched_calls: AtomicU64,
    abandoned: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn read(&self) -> BatchStats {
        BatchStats {
            sent_at_once: self.sent_at_once.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            batched_calls: self.batched_calls.load(Ordering::Relaxed),
            abandoned: self.abandoned.load(Ordering::Relaxed),
        }
    }
}

/// The most calls one script takes (its reply is built from a table of one
/// string per call; the bound keeps a batch's reply and key list modest).
const MAX_CALLS: usize = 1_000;

/// The script's operation for a batch.
const BATCH: u8 = 4;

/// One call waiting in the queue: its keys, its arguments as a script call
/// of its own would take them, and where its reply goes.
pub(crate) struct Job {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) arg: Vec<u8>,
    pub(crate) now: Now,
    pub(crate) done: oneshot::Sender<Result<Vec<i64>, StoreError>>,
}

impl Job {
    /// How many numbers the script replies for this call.
    fn reply_len(&self) -> usize {
        if self.arg[0] == REFUND {
            1
        } else {
            self.keys.len() * 6 + 2
        }
    }
}

/// A call in a batch met a key that holds a value of another type (not a
/// string): that call fails, and changes nothing; the others go on.
#[derive(Debug, Error)]
#[error("a key of this call holds a Redis value that is not a string (WRONGTYPE)")]
pub(crate) struct WrongType;

/// The queue of one store; dropping it ends its task.
pub(crate) struct Batcher {
    permits: Arc<Semaphore>,
    queue: mpsc::UnboundedSender<Job>,
    counters: Arc<Counters>,
}

impl Batcher {
    /// Starts the task that sends queued calls (on the current Tokio
    /// runtime); it ends when the batcher is dropped and the queue is empty.
    pub(crate) fn start(caller: Arc<Caller>, batching: Batching) -> Batcher {
        let permits = Arc::new(Semaphore::new(
            batching.in_flight.min(Semaphore::MAX_PERMITS),
        ));
        let (queue, receiver) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        tokio::spawn(dispatch(
            caller,
            receiver,
            Arc::clone(&permits),
            batching.max_calls,
            Arc::clone(&counters),
        ));
        Batcher {
            permits,
            queue,
            counters,
        }
    }

    /// A permit to run a script call now, if fewer than `in_flight` run and
    /// none are queued.
    pub(crate) fn try_now(&self) -> Option<OwnedSemaphorePermit> {
        // Released permits go to the dispatcher first when it waits, so a
        // call never overtakes those queued before it.
        let permit = Arc::clone(&self.permits).try_acquire_owned().ok()?;
        Counters::add(&self.counters.sent_at_once, 1);
        Some(permit)
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> BatchStats {
        self.counters.read()
    }

    /// Queues a call; its reply comes through the receiver.
    pub(crate) fn enqueue(
        &self,
        keys: Vec<Vec<u8>>,
        arg: Vec<u8>,
        now: Now,
    ) -> oneshot::Receiver<Result<Vec<i64>, StoreError>> {
        let (done, reply) = oneshot::channel();
        Counters::add(&self.counters.queued, 1);
        // The task outlives every sender, so the send only fails when the
        // runtime is shutting down; the dropped job then closes `reply`.
        let _ = self.queue.send(Job {
            keys,
            arg,
            now,
            done,
        });
        reply
    }
}

/// Takes queued calls, as many as are waiting, into a script call whenever
/// fewer than `in_flight` are running.
async fn dispatch(
    caller: Arc<Caller>,
    mut queue: mpsc::UnboundedReceiver<Job>,
    permits: Arc<Semaphore>,
    max_calls: usize,
    counters: Arc<Counters>,
) {
    // Calls pinned to another time than the batch's (a test hook) wait for
    // a batch of their own, first in line.
    let mut held: VecDeque<Job> = VecDeque::new();
    loop {
        let first = match held.pop_front() {
            Some(job) => job,
            None => match queue.recv().await {
                Some(job) => job,
                None => return,
            },
        };
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let mut jobs = Vec::with_capacity(8);
        let mut later = VecDeque::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            // A call whose caller stopped waiting (its timeout) is dropped
            // undecided, rather than charged for nobody.
            if job.done.is_closed() {
                Counters::add(&counters.abandoned, 1);
            } else if jobs.first().is_none_or(|j: &Job| j.now == job.now) {
                jobs.push(job);
            } else {
                later.push_back(job);
            }
            if jobs.len() < max_calls {
                next = held.pop_front().or_else(|| queue.try_recv().ok());
            }
        }
        later.append(&mut held);
        held = later;
        if jobs.is_empty() {
            continue;
        }
        Counters::add(&counters.batches, 1);
        Counters::add(&counters.batched_calls, jobs.len() as u64);
        tokio::spawn(send(Arc::clone(&caller), jobs, permit));
    }
}

/// Runs one script for `jobs` and hands each its reply.
async fn send(caller: Arc<Caller>, jobs: Vec<Job>, permit: OwnedSemaphorePermit) {
    if jobs.len() == 1 {
        // One call: its own script, as if it had not waited.
        let job = jobs.into_iter().next().expect("one job");
        let keys: Vec<&[u8]> = job.keys.iter().map(Vec::as_slice).collect();
        let result = caller.call(&keys, &job.arg).await;
        drop(permit);
        let _ = job.done.send(result);
        return;
    }
    let keys: Vec<&[u8]> = jobs
        .iter()
        .flat_map(|job| job.keys.iter().map(Vec::as_slice))
        .collect();
    let result = caller.call_raw(&keys, &encode(&jobs)).await;
    drop(permit);
    let error = match result.map(|reply| numbers(&reply)) {
        Ok(Ok(numbers)) => return hand_out(jobs, &numbers),
        Ok(Err(error)) => error,
        Err(error) => {
            for job in jobs {
                let _ = job.done.send(Err(error.to_store_error()));
            }
            return;
        }
    };
    for job in jobs {
        let _ = job.done.send(Err(error.clone().into()));
    }
}

/// The batch's argument: `'<Bdd'` 4, the number of calls, the time; then
/// each call's own argument without its time (its op and key count, then
/// its keys' limits and costs).
fn encode(jobs: &[Job]) -> Vec<u8> {
    let size = 17 + jobs.iter().map(|job| job.arg.len() - 8).sum::<usize>();
    let mut arg = Vec::with_capacity(size);
    arg.push(BATCH);
    arg.extend_from_slice(&(jobs.len() as f64).to_le_bytes());
    // every job of a batch has the same time (see `dispatch`)
    arg.extend_from_slice(&jobs[0].arg[9..17]);
    for job in jobs {
        arg.extend_from_slice(&job.arg[..9]);
        arg.extend_from_slice(&job.arg[17..]);
    }
    arg
}

/// Splits a batch's reply into its calls' replies.
fn hand_out(jobs: Vec<Job>, numbers: &[i64]) {
    let mut at = 0;
    let mut jobs = jobs.into_iter();
    for job in jobs.by_ref() {
        if numbers.get(at) == Some(&-2) {
            at += 1;
            let _ = job.done.send(Err(StoreError::unavailable(WrongType)));
            continue;
        }
        let len = job.reply_len();
        let Some(reply) = numbers.get(at..at + len) else {
            let _ = job.done.send(Err(short_reply(numbers.len())));
            break;
        };
        at += len;
        let _ = job.done.send(Ok(reply.to_vec()));
    }
    for job in jobs {
        let _ = job.done.send(Err(short_reply(numbers.len())));
    }
}

fn short_reply(len: usize) -> StoreError {
    ReplyError::ShortBatch(len).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CHECK;

    fn job(
        op: u8,
        keys: usize,
        now: Now,
    ) -> (Job, oneshot::Receiver<Result<Vec<i64>, StoreError>>) {
        let (done, reply) = oneshot::channel();
        let mut arg = vec![op];
        arg.extend_from_slice(&(keys as f64).to_le_bytes());
        arg.extend_from_slice(&(now.unwrap_or(0) as f64).to_le_bytes());
        for k in 0..keys {
            arg.push(2);
            // the limit's three numbers, then the cost
            for v in [k as f64, 2.0, 3.0, 5.0] {
                arg.extend_from_slice(&v.to_le_bytes());
            }
        }
        let keys = (0..keys).map(|k| vec![b'k', k as u8]).collect();
        (
            Job {
                keys,
                arg,
                now,
                done,
            },
            reply,
        )
    }

    #[test]
    fn a_batch_argument_gives_each_call_its_key_count() {
        let (a, _ra) = job(CHECK, 1, Some(7));
        let (b, _rb) = job(REFUND, 2, Some(7));
        let arg = encode(&[a, b]);
        let f = |at: usize| f64::from_le_bytes(arg[at..at + 8].try_into().unwrap());
        assert_eq!(arg[0], BATCH);
        assert_eq!((f(1), f(9)), (2.0, 7.0));
        // first call: op, 1 key, its limit and cost
        assert_eq!((arg[17], f(18)), (CHECK, 1.0));
        assert_eq!((arg[26], f(27), f(51)), (2, 0.0, 5.0));
        // second call after the first's 33 bytes of limit and cost
        let second = 17 + 9 + 33;
        assert_eq!((arg[second], f(second + 1)), (REFUND, 2.0));
        assert_eq!(arg.len(), 17 + (9 + 33) + (9 + 66));
    }

    #[test]
    fn a_batch_reply_is_split_by_call_and_a_wrong_type_fails_one_call() {
        let (a, ra) = job(CHECK, 1, None);
        let (b, rb) = job(CHECK, 2, None);
        let (c, rc) = job(REFUND, 1, None);
        let mut numbers: Vec<i64> = (0..8).collect();
        numbers.push(-2);
        numbers.push(99);
        hand_out(vec![a, b, c], &numbers);
        assert_eq!(
            ra.blocking_recv().unwrap().unwrap(),
            (0..8).collect::<Vec<_>>()
        );
        assert!(matches!(
            rb.blocking_recv().unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(rc.blocking_recv().unwrap().unwrap(), vec![99]);
    }

    #[test]
    fn a_short_batch_reply_fails_the_calls_it_does_not_cover() {
        let (a, ra) = job(CHECK, 1, None);
        let (b, rb) = job(CHECK, 1, None);
        hand_out(vec![a, b], &(0..12).collect::<Vec<_>>());
        assert!(ra.blocking_recv().unwrap().is_ok());
        assert!(matches!(
            rb.blocking_recv().unwrap(),
            Err(StoreError::InvalidReply(_))
        ));
    }

    #[test]
    fn batching_settings_are_clamped() {
        assert_eq!(Batching::new(8, 1), Batching::OFF);
        assert!(!Batching::OFF.is_on());
        let b = Batching::new(0, 5_000);
        assert_eq!((b.in_flight(), b.max_calls()), (1, MAX_CALLS));
        assert!(Batching::default().is_on());
    }
}
