//! Parses arbitrary UTF-8 as a duration: the parser must never panic, a
//! duration that parses must parse the same written in nanoseconds, and a
//! rate over it (when it is a valid period) must have it as its period.
//!
//! Run with `cargo fuzz run duration` from `crates/ratekeeper`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper::{duration, Rate};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(parsed) = duration::parse(text) {
        let nanos = format!("{}ns", parsed.as_nanos());
        assert_eq!(duration::parse(&nanos), Ok(parsed), "{text:?}");
        if let Ok(rate) = format!("1/{}", text.trim()).parse::<Rate>() {
            assert_eq!(rate.period(), parsed, "{text:?}");
        }
    }
});
