//! The policies a test runs on.

use ratekeeper::{policy::PolicyKind, Policy, Rate};

/// One policy of every kind at `rate` (a bucket's burst, a window's limit:
/// the rate's amount), in [`PolicyKind::ALL`]'s order.
pub fn every_kind(rate: &Rate) -> Vec<Policy> {
    PolicyKind::ALL
        .iter()
        .map(|&kind| Policy::new(kind, rate).expect("every kind takes a valid rate"))
        .collect()
}
