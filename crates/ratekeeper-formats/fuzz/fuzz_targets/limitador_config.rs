//! Any text as a Limitador limits file: no panic; it loads and answers
//! which limits apply, or gives an error that names a place (or the
//! file, for one too large). The same text as one CEL expression too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_formats::limitador::{Descriptors, Expression, LimitadorConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Requests shaped by the text itself: its words as keys and values.
    let words: Vec<&str> = text.split_whitespace().take(8).collect();
    let entries: Vec<(&str, &str)> = words
        .chunks(2)
        .map(|pair| (pair[0], pair.get(1).copied().unwrap_or("")))
        .collect();
    let request = [entries.clone(), entries];
    let descriptors = Descriptors::new(request.iter().map(|d| d.iter().copied()));
    match LimitadorConfig::from_yaml_str(text, "fuzz.yaml") {
        Ok(config) => {
            for limit in config.limits() {
                let _ = limit.variable_values(&descriptors);
                let _ = limit.first_descriptor();
            }
        }
        Err(error) => assert!(error.position().is_some() || text.len() > 1 << 20),
    }
    if let Ok(expression) = Expression::parse(text) {
        let _ = expression.test(&descriptors);
        let _ = expression.value(&descriptors);
    }
});
