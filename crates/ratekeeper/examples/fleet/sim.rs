//! A discrete-event executor in virtual time: the engine of the fleet
//! simulation.
//!
//! Tasks are futures polled one at a time on this thread; time only moves
//! when no task can run, straight to the earliest timer, so a run is the
//! same on every machine and at any speed. tokio's paused clock would do
//! most of this, but its timers fire on whole milliseconds: a 0.25 ms trip
//! to the store would take 1 ms. Here a timer fires at its nanosecond.
//!
//! The clock is a [`ManualClock`] that the executor moves: the store and
//! the nodes read it as they would read a real one.

use std::cell::Cell;
use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ratekeeper::clock::ManualClock;
use ratekeeper::{Clock, Timestamp};

/// A task: any `Send` future, so that it also fits `Leased`'s spawner.
pub(crate) type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

thread_local! {
    /// The note of the task being polled (see [`note`]).
    static NOTE: Cell<Option<Timestamp>> = const { Cell::new(None) };
}

/// Notes `at` on the task being polled, replacing its earlier note.
///
/// The store notes the moment it decided on the task that asked it: a
/// request then knows whether it went to the store, and when the store
/// counted it, without any hook in the code between them.
pub(crate) fn note(at: Timestamp) {
    NOTE.with(|n| n.set(Some(at)));
}

/// The last note made on the task being polled.
pub(crate) fn noted() -> Option<Timestamp> {
    NOTE.with(Cell::get)
}

/// A timer: the waker to wake at `at`. Timers due at the same moment fire
/// in the order they were set (`seq`), which keeps runs repeatable.
struct Timer {
    at: Timestamp,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// What tasks share with the executor.
struct Shared {
    clock: ManualClock,
    timers: Mutex<BinaryHeap<Reverse<Timer>>>,
    ready: Mutex<VecDeque<usize>>,
    spawned: Mutex<Vec<Task>>,
    seq: AtomicU64,
}

/// The single-threaded executor only ever holds one of these at a time,
/// and a panic ends the run: a poisoned lock is taken as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What tasks use to read the time, sleep and spawn: cheap to clone,
/// `Send`, and valid only while its [`Sim`] runs.
#[derive(Clone)]
pub(crate) struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// The virtual time.
    pub(crate) fn now(&self) -> Timestamp {
        self.shared.clock.now()
    }

    /// The clock the store and the nodes read.
    pub(crate) fn clock(&self) -> ManualClock {
        self.shared.clock.clone()
    }

    /// A future done `by` from now.
    pub(crate) fn sleep(&self, by: Duration) -> Sleep {
        self.sleep_until(self.now().saturating_add(by))
    }

    /// A future done at `until`.
    pub(crate) fn sleep_until(&self, until: Timestamp) -> Sleep {
        Sleep {
            shared: Arc::clone(&self.shared),
            until,
        }
    }

    /// Runs `task` from the next turn of the executor on.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        lock(&self.shared.spawned).push(Box::pin(task));
    }

    /// A spawner for `Leased::builder(..).spawn_with`.
    pub(crate) fn spawner(&self) -> impl Fn(Task) + Send + Sync + 'static {
        let handle = self.clone();
        move |task| lock(&handle.shared.spawned).push(task)
    }
}

/// [`Handle::sleep`]'s future.
pub(crate) struct Sleep {
    shared: Arc<Shared>,
    until: Timestamp,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.shared.clock.now() >= self.until {
            return Poll::Ready(());
        }
        // A spurious poll sets a second timer: the task is polled once more
        // than needed, which a future must bear anyway.
        let seq = self.shared.seq.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared.timers).push(Reverse(Timer {
            at: self.until,
            seq,
            waker: cx.waker().clone(),
        }));
        Poll::Pending
    }
}

/// Wakes a task by putting its slot on the ready queue.
struct TaskWaker {
    slot: usize,
    shared: Arc<Shared>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.shared.ready).push_back(self.slot);
    }
}

/// A task in its slot, with its waker and its note.
struct Slot {
    task: Task,
    waker: Waker,
    note: Option<Timestamp>,
}

/// The executor: its tasks, and the clock it moves.
pub(crate) struct Sim {
    handle: Handle,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
}

impl Sim {
    /// An executor whose clock reads `start`.
    pub(crate) fn new(start: Timestamp) -> Self {
        Sim {
            handle: Handle {
                shared: Arc::new(Shared {
                    clock: ManualClock::new(start),
                    timers: Mutex::default(),
                    ready: Mutex::default(),
                    spawned: Mutex::default(),
                    seq: AtomicU64::new(0),
                }),
            },
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The handle tasks use.
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Runs tasks, moving the clock from timer to timer, until nothing is
    /// left to run before `end` (the clock then reads at most `end`).
    /// Tasks still waiting are dropped with the executor.
    pub(crate) fn run_until(&mut self, end: Timestamp) {
        loop {
            self.admit_spawned();
            let next = lock(&self.handle.shared.ready).pop_front();
            if let Some(slot) = next {
                self.poll(slot);
                continue;
            }
            if !self.fire_next_timers(end) {
                return;
            }
        }
    }

    /// Moves the clock to the earliest timer due by `end` and wakes every
    /// task due then; false when none is.
    fn fire_next_timers(&mut self, end: Timestamp) -> bool {
        let shared = &self.handle.shared;
        let mut due = Vec::new();
        {
            let mut timers = lock(&shared.timers);
            let at = match timers.peek() {
                Some(Reverse(timer)) if timer.at <= end => timer.at,
                _ => return false,
            };
            if at > shared.clock.now() {
                shared.clock.set(at);
            }
            while let Some(Reverse(timer)) = timers.peek() {
                if timer.at > at {
                    break;
                }
                let Some(Reverse(timer)) = timers.pop() else {
                    break;
                };
                due.push(timer.waker);
            }
        }
        for waker in due {
            waker.wake();
        }
        true
    }

    /// Gives the tasks spawned since the last turn a slot each, ready.
    fn admit_spawned(&mut self) {
        let spawned = std::mem::take(&mut *lock(&self.handle.shared.spawned));
        for task in spawned {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            let waker = Waker::from(Arc::new(TaskWaker {
                slot,
                shared: Arc::clone(&self.handle.shared),
            }));
            self.slots[slot] = Some(Slot {
                task,
                waker,
                note: None,
            });
            lock(&self.handle.shared.ready).push_back(slot);
        }
    }

    /// Polls the task in `slot`, if one is there (a waker may outlive its
    /// task: a wake of a slot since reused only polls its new task once
    /// more than needed).
    fn poll(&mut self, slot: usize) {
        let Some(entry) = self.slots[slot].as_mut() else {
            return;
        };
        NOTE.with(|n| n.set(entry.note));
        let waker = entry.waker.clone();
        let mut cx = Context::from_waker(&waker);
        let done = entry.task.as_mut().poll(&mut cx).is_ready();
        entry.note = NOTE.with(Cell::take);
        if done {
            self.slots[slot] = None;
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_at_their_nanosecond_in_order() {
        let mut sim = Sim::new(Timestamp::from_secs(1));
        let h = sim.handle();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for (i, micros) in [250u64, 1, 250, 1_000].into_iter().enumerate() {
            let (h2, seen) = (h.clone(), Arc::clone(&seen));
            h.spawn(async move {
                h2.sleep(Duration::from_micros(micros)).await;
                lock(&seen).push((i, h2.now()));
            });
        }
        sim.run_until(Timestamp::MAX);
        let at = |us| Timestamp::from_secs(1).saturating_add(Duration::from_micros(us));
        assert_eq!(
            *lock(&seen),
            vec![(1, at(1)), (0, at(250)), (2, at(250)), (3, at(1_000))]
        );
    }
}
