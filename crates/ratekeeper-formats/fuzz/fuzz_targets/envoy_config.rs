//! Any text as an envoyproxy/ratelimit configuration file: no panic; it
//! loads and answers lookups, or gives an error that names a place.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_formats::envoy::EnvoyConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match EnvoyConfig::from_yaml_str(text, "fuzz.yaml") {
        Ok(config) => {
            // Lookups shaped by the text itself: its words as keys and values.
            let words: Vec<&str> = text.split_whitespace().take(8).collect();
            let entries: Vec<(&str, &str)> = words
                .chunks(2)
                .map(|pair| (pair[0], pair.get(1).copied().unwrap_or("")))
                .collect();
            for domain in config.domains() {
                for end in 0..=entries.len() {
                    if let Some(matched) = domain.get_limit(&entries[..end]) {
                        let _ = matched.stats_key();
                        let _ = matched.counter_key.envoy_cache_key("");
                    }
                }
            }
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
