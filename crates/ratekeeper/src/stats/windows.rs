//! Traffic per calendar window: this and the previous minute, hour, day
//! and week, and a ring of the last 60 minutes.
//!
//! # Design
//!
//! Only the current ("live") minute is counted per request, in two atomic
//! counters, one for allowed and one for denied requests, beside the live
//! minute's number, which changes once a minute and so stays cached in
//! every core. Recording is one load and one `fetch_add`; nothing
//! allocates or locks.
//!
//! When a recorder finds its minute is after the live one, it rolls the
//! minute over under a small lock: it swaps both counters for zero,
//! publishes the new minute and folds the counts the swaps returned into
//! the closed windows (the ring and the hour, day and week sums), which
//! only that lock guards. Every increment and the swap act on the same
//! atomic counter, so each increment lands either before the swap, and is
//! folded with the old minute, or after it, and counts in the new one:
//! none is lost or counted twice, however many threads race. A recorder
//! that reads the new minute's number reads it after the swaps (release
//! and acquire), so its increment follows them.
//!
//! A recorder whose minute is before the live one (its clock read raced a
//! rollover, or time went backwards) counts in the live minute: a request
//! may be attributed to a later minute than its own, never an earlier one.
//! Readers take the lock, so they see the live counters and the closed
//! windows at one consistent point, never halfway through a rollover.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::calendar::{minute_of, minute_start, Period};
use super::counters::Padded;
use super::snapshot::{PeriodTraffic, TrafficWindows, WindowTraffic};
use crate::Timestamp;

/// How many minutes the history ring keeps, the current one included.
pub(crate) const HISTORY_MINUTES: usize = 60;

/// Counts of one minute or window: allowed and denied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    allowed: u64,
    denied: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.allowed = self.allowed.saturating_add(other.allowed);
        self.denied = self.denied.saturating_add(other.denied);
    }

    fn plus(mut self, other: Counts) -> Counts {
        self.add(other);
        self
    }

    fn is_zero(self) -> bool {
        self.allowed == 0 && self.denied == 0
    }
}

/// The sums of one window: which window, and its counts.
#[derive(Clone, Copy, Debug)]
struct Sum {
    index: u64,
    counts: Counts,
}

/// A period's last two windows with traffic.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    current: Option<Sum>,
    previous: Option<Sum>,
}

impl Sums {
    /// Adds `counts` to window `index`. Minutes are folded in order, so
    /// `index` never goes back past the previous window; if it did, the
    /// counts would belong to a window nobody reports, and are dropped.
    fn add(&mut self, index: u64, counts: Counts) {
        match (&mut self.current, &mut self.previous) {
            (Some(current), _) if current.index == index => current.counts.add(counts),
            (Some(current), _) if current.index > index => {
                if let Some(previous) = self.previous.as_mut().filter(|p| p.index == index) {
                    previous.counts.add(counts);
                }
            }
            _ => {
                self.previous = self.current.filter(|c| c.index.saturating_add(1) == index);
                self.current = Some(Sum { index, counts });
            }
        }
    }

    /// The counts of window `index`.
    fn get(&self, index: u64) -> Counts {
        [self.current, self.previous]
            .into_iter()
            .flatten()
            .find(|sum| sum.index == index)
            .map(|sum| sum.counts)
            .unwrap_or_default()
    }
}

/// The closed minutes: the ring and each period's sums. The live minute is
/// not in them until it closes.
#[derive(Debug)]
struct Closed {
    /// Minute `m` sits at `m % 60`, with its number.
    ring: [Option<Sum>; HISTORY_MINUTES],
    hour: Sums,
    day: Sums,
    week: Sums,
}

impl Closed {
    fn close(&mut self, minute: u64, counts: Counts) {
        if counts.is_zero() {
            return;
        }
        self.ring[ring_slot(minute)] = Some(Sum {
            index: minute,
            counts,
        });
        self.hour.add(Period::Hour.index(minute), counts);
        self.day.add(Period::Day.index(minute), counts);
        self.week.add(Period::Week.index(minute), counts);
    }

    /// The closed counts of `period`'s window `index`.
    fn window(&self, period: Period, index: u64) -> Counts {
        match period {
            Period::Minute => self.ring[ring_slot(index)]
                .filter(|sum| sum.index == index)
                .map(|sum| sum.counts)
                .unwrap_or_default(),
            Period::Hour => self.hour.get(index),
            Period::Day => self.day.get(index),
            Period::Week => self.week.get(index),
        }
    }
}

fn ring_slot(minute: u64) -> usize {
    (minute % HISTORY_MINUTES as u64) as usize
}

/// Calendar-window traffic of one limit.
#[derive(Debug)]
pub(crate) struct Traffic {
    /// The live minute's allowed requests.
    allowed: Padded<AtomicU64>,
    /// The live minute's denied requests.
    denied: Padded<AtomicU64>,
    /// The live minute, in minutes since the epoch; changed only under the
    /// `closed` lock, after the counters are swapped.
    live: Padded<AtomicU64>,
    closed: Mutex<Closed>,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            allowed: Padded(AtomicU64::new(0)),
            denied: Padded(AtomicU64::new(0)),
            live: Padded(AtomicU64::new(0)),
            closed: Mutex::new(Closed {
                ring: [None; HISTORY_MINUTES],
                hour: Sums::default(),
                day: Sums::default(),
                week: Sums::default(),
            }),
        }
    }
}

/// A consistent reading: the closed windows and the live minute.
struct Reading<'a> {
    closed: MutexGuard<'a, Closed>,
    live: u64,
    live_counts: Counts,
}

impl Reading<'_> {
    /// The counts of `period`'s window `index`, live minute included.
    fn window(&self, period: Period, index: u64) -> Counts {
        let closed = self.closed.window(period, index);
        if period.index(self.live) == index {
            closed.plus(self.live_counts)
        } else {
            closed
        }
    }

    fn traffic(&self, period: Period, index: u64) -> WindowTraffic {
        let counts = self.window(period, index);
        WindowTraffic {
            start_unix_secs: minute_start(period.first_minute(index)).as_nanos() / 1_000_000_000,
            requests: counts.allowed.saturating_add(counts.denied),
            denied: counts.denied,
        }
    }

    fn period(&self, period: Period, now_minute: u64) -> PeriodTraffic {
        let index = period.index(now_minute);
        PeriodTraffic {
            current: self.traffic(period, index),
            previous: match index.checked_sub(1) {
                Some(previous) => self.traffic(period, previous),
                None => WindowTraffic::default(),
            },
        }
    }
}

impl Traffic {
    /// Counts one request at `now` (Unix time).
    #[inline]
    pub(crate) fn record(&self, now: Timestamp, allowed: bool) {
        let word = if allowed {
            &self.allowed.0
        } else {
            &self.denied.0
        };
        let minute = minute_of(now);
        if minute > self.live.0.load(Ordering::Acquire) {
            self.roll(minute);
        }
        word.fetch_add(1, Ordering::Relaxed);
    }

    /// Closes the live minute and opens `minute`, unless another thread
    /// already opened it or a later one.
    #[cold]
    fn roll(&self, minute: u64) {
        let mut closed = lock(&self.closed);
        let live = self.live.0.load(Ordering::Relaxed);
        if minute <= live {
            return;
        }
        let counts = Counts {
            allowed: self.allowed.0.swap(0, Ordering::AcqRel),
            denied: self.denied.0.swap(0, Ordering::AcqRel),
        };
        self.live.0.store(minute, Ordering::Release);
        closed.close(live, counts);
    }

    fn read(&self) -> Reading<'_> {
        let closed = lock(&self.closed);
        Reading {
            live: self.live.0.load(Ordering::Relaxed),
            live_counts: Counts {
                allowed: self.allowed.0.load(Ordering::Acquire),
                denied: self.denied.0.load(Ordering::Acquire),
            },
            closed,
        }
    }

    /// Traffic in the windows holding `now` and the ones before them.
    pub(crate) fn windows(&self, now: Timestamp) -> TrafficWindows {
        let reading = self.read();
        let minute = minute_of(now);
        TrafficWindows {
            minute: reading.period(Period::Minute, minute),
            hour: reading.period(Period::Hour, minute),
            day: reading.period(Period::Day, minute),
            week: reading.period(Period::Week, minute),
        }
    }

    /// Traffic in each of the 60 minutes up to the one holding `now`,
    /// oldest first.
    pub(crate) fn history(&self, now: Timestamp) -> Vec<WindowTraffic> {
        let reading = self.read();
        let last = minute_of(now);
        let first = last.saturating_sub(HISTORY_MINUTES as u64 - 1);
        (first..=last)
            .map(|minute| reading.traffic(Period::Minute, minute))
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while the lock is held, and every step leaves the sums
    // consistent, so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(m: u64) -> Timestamp {
        minute_start(m)
    }

    #[test]
    fn sums_keep_the_last_two_windows() {
        let mut sums = Sums::default();
        let one = Counts {
            allowed: 1,
            denied: 0,
        };
        sums.add(3, one);
        sums.add(3, one);
        sums.add(4, one);
        assert_eq!(sums.get(3).allowed, 2);
        assert_eq!(sums.get(4).allowed, 1);
        sums.add(6, one); // 5 had nothing: 4 is no longer "previous"
        assert_eq!(sums.get(4).allowed, 0);
        assert_eq!(sums.get(5).allowed, 0);
        assert_eq!(sums.get(6).allowed, 1);
    }

    #[test]
    fn a_late_recorder_counts_in_the_live_minute() {
        let traffic = Traffic::default();
        traffic.record(minute(10), true);
        traffic.record(minute(9), true); // behind: counts in minute 10
        let windows = traffic.windows(minute(10));
        assert_eq!(windows.minute.current.requests, 2);
        assert_eq!(windows.minute.previous.requests, 0);
    }

    #[test]
    fn time_zero_and_the_end_of_time_do_not_panic() {
        let traffic = Traffic::default();
        traffic.record(Timestamp::ZERO, false);
        traffic.record(Timestamp::MAX, true);
        let windows = traffic.windows(Timestamp::MAX);
        assert_eq!(windows.minute.current.requests, 1);
        assert_eq!(traffic.history(Timestamp::ZERO).len(), 1);
        assert_eq!(traffic.history(Timestamp::MAX).len(), HISTORY_MINUTES);
    }
}
