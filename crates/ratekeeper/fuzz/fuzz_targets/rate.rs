//! Parses arbitrary UTF-8 as a `Rate`: the parser must never panic, and a
//! rate that parses must display in a form that parses back to it.
//!
//! Run with `cargo fuzz run rate` from `crates/ratekeeper`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper::Rate;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rate) = text.parse::<Rate>() {
        let canonical = rate.to_string();
        assert_eq!(
            canonical.parse::<Rate>(),
            Ok(rate),
            "{text:?} displays as {canonical:?}, which does not parse back"
        );
    }
});
