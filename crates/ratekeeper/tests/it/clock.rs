//! Clocks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratekeeper::{
    clock::{ManualClock, MonotonicClock, UnixClock},
    Clock, Timestamp,
};

#[test]
fn manual_clock_moves_only_when_told() {
    let clock = ManualClock::new(Timestamp::from_secs(5));
    let shared = clock.clone();
    assert_eq!(clock.now(), Timestamp::from_secs(5));
    shared.advance(Duration::from_millis(1));
    assert_eq!(clock.now(), Timestamp::from_millis(5_001));
    shared.advance(Duration::MAX);
    assert_eq!(clock.now(), Timestamp::MAX, "saturates");
    shared.set(Timestamp::ZERO);
    assert_eq!(clock.now(), Timestamp::ZERO);
}

#[test]
fn monotonic_clock_never_goes_back() {
    let clock = MonotonicClock::new();
    let mut last = clock.now();
    for _ in 0..1_000 {
        let now = clock.now();
        assert!(now >= last);
        last = now;
    }
    // Its epoch is its creation: far from the Unix epoch.
    assert!(last < Timestamp::from_secs(3_600));
}

/// Anchored to the Unix epoch, the monotonic clock reads the wall time it
/// was made at plus what elapsed since: fixed windows then fall on the wall
/// clock's minutes. Never backwards, whatever the system time does later.
#[test]
fn a_monotonic_clock_since_the_unix_epoch_reads_unix_time() {
    let before = UnixClock.now();
    let clock = MonotonicClock::since_unix_epoch();
    let mut last = clock.now();
    assert!(last >= before, "{last:?} before {before:?}");
    for _ in 0..1_000 {
        let now = clock.now();
        assert!(now >= last);
        last = now;
    }
    // Elapsed time only: the readings are the wall time's, not a count
    // from the clock's creation (a day of slack for the slowest machine).
    assert!(last < before.saturating_add(Duration::from_secs(86_400)));
    let clone = clock.clone();
    assert!(clone.now() >= last, "clones share the epoch");
}

#[test]
fn unix_clock_reads_the_system_time() {
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let now = UnixClock.now();
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(Timestamp::from_duration(before) <= now && now <= Timestamp::from_duration(after));
}

#[test]
fn clocks_work_through_references_and_pointers() {
    fn read(clock: impl Clock) -> Timestamp {
        clock.now()
    }
    let clock = ManualClock::new(Timestamp::from_secs(1));
    assert_eq!(read(&clock), Timestamp::from_secs(1));
    assert_eq!(
        read(std::sync::Arc::new(clock.clone())),
        Timestamp::from_secs(1)
    );
    let boxed: Box<dyn Clock> = Box::new(clock);
    assert_eq!(read(boxed), Timestamp::from_secs(1));
}

#[test]
fn timestamps_saturate() {
    assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
    assert_eq!(Timestamp::ZERO - Duration::from_secs(1), Timestamp::ZERO);
    assert_eq!(Timestamp::from_secs(u64::MAX), Timestamp::MAX);
    assert_eq!(Timestamp::from_duration(Duration::MAX), Timestamp::MAX);
    assert_eq!(Timestamp::from_millis(1_500).as_millis(), 1_500);
    assert_eq!(
        format!("{:?}", Timestamp::from_millis(1_500)),
        "Timestamp(1.500000000s)"
    );
}
