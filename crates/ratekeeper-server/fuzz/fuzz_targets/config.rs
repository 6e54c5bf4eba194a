//! Any text as a configuration file: no panic; it loads, and explains
//! itself, or gives an error that says something.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_server::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml_str(text, "fuzz.toml") {
        Ok(config) => {
            let _ = config.explain();
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
