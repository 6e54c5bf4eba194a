//! Any bytes as a plan table (`plan_from = "table:PATH"`): no panic; it
//! loads, every key it lists on one of the plans, or gives an error that
//! names the file.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ratekeeper_server::config::PlanTable;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("keys.toml");
    match PlanTable::parse(data, path, &["pro", "internal"]) {
        Ok(table) => assert!(table.len() <= ratekeeper_server::config::MAX_PLAN_TABLE_KEYS),
        Err(error) => assert!(error.contains("keys.toml"), "{error}"),
    }
});
