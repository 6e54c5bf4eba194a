//! The synchronization primitives of the in-memory tables, swapped for
//! loom's models under `--cfg ratekeeper_loom` so the slot protocol can be model-checked.

#[cfg(not(ratekeeper_loom))]
pub(crate) use portable_atomic::AtomicU128;
#[cfg(not(ratekeeper_loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(ratekeeper_loom))]
pub(crate) use std::sync::Mutex;

#[cfg(ratekeeper_loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(ratekeeper_loom)]
pub(crate) use loom::sync::Mutex;

/// loom has no 128-bit atomic; a slot is modelled as one word behind a
/// lock, which is what a 128-bit compare-and-swap is: one indivisible step.
#[cfg(ratekeeper_loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(ratekeeper_loom)]
impl AtomicU128 {
    pub(crate) fn new(value: u128) -> Self {
        AtomicU128(loom::sync::Mutex::new(value))
    }

    pub(crate) fn load(&self, _order: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        _success: Ordering,
        _failure: Ordering,
    ) -> Result<u128, u128> {
        let mut value = self.0.lock().unwrap();
        if *value == current {
            *value = new;
            Ok(current)
        } else {
            Err(*value)
        }
    }
}
