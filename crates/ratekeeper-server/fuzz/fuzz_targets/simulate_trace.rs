//! Any bytes as a `ratekeeper simulate --trace` file: no panic; an error
//! names a line of the input, and the requests of a trace that parses are in
//! time order.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_server::simulate::parse_trace;

fuzz_target!(|data: &[u8]| {
    let lines = data.split(|&b| b == b'\n').count();
    match parse_trace(data) {
        Ok(requests) => assert!(requests.windows(2).all(|w| w[0].time <= w[1].time)),
        Err(error) => assert!((1..=lines).contains(&error.line), "{error}"),
    }
});
