//! Any text as a `ratekeeper simulate --pattern`: no panic; an error names
//! a column inside the text (or just past it), and a pattern that parses
//! prints as text that parses back to it. (`--bucket` is a duration of the
//! core's grammar: the core's `duration` target.)

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_server::simulate::Pattern;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let columns = text.chars().count() + 1;
    match text.parse::<Pattern>() {
        Ok(pattern) => {
            assert_eq!(pattern.to_string().parse::<Pattern>().as_ref(), Ok(&pattern));
            // Making the requests is bounded by MAX_REQUESTS; keep runs quick.
            if pattern.len() <= 10_000 {
                let requests = pattern.requests();
                assert_eq!(requests.len(), pattern.len());
                assert!(requests.windows(2).all(|w| w[0].time <= w[1].time));
            }
        }
        Err(error) => assert!((1..=columns).contains(&error.column), "{error}"),
    }
});
