//! The service's modules depend one way: `config` at the bottom, then
//! `engine`; the doors (`http`, `envoy`, `proxy`, `admin`) on those and
//! never on each other. Read from the source, as a reviewer would: every
//! `crate::MODULE` path a module's files name (code, imports and doc links).

use std::collections::BTreeSet;
use std::path::Path;

const DOORS: [&str; 4] = ["http", "envoy", "proxy", "admin"];

/// The top-level modules that `module`'s files name as `crate::NAME`.
fn named_from(module: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    let mut files = vec![dir.clone()];
    let mut named = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("crate::") {
            let preceded = text[..at].chars().next_back();
            if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let name: String = text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name != module {
                named.insert(name);
            }
        }
    }
    assert!(dir.is_dir(), "no module {module}");
    named
}

#[test]
fn no_door_depends_on_another_door() {
    for door in DOORS {
        let named = named_from(door);
        let others: Vec<_> = DOORS
            .iter()
            .filter(|&&d| d != door && named.contains(d))
            .collect();
        assert!(others.is_empty(), "{door} names {others:?}");
        assert!(!named.contains("serve"), "{door} names serve");
    }
}

#[test]
fn the_engine_and_the_configuration_depend_on_no_door() {
    for bottom in ["engine", "config"] {
        let named = named_from(bottom);
        for above in DOORS.iter().chain(&["serve", "cli"]) {
            assert!(!named.contains(*above), "{bottom} names {above}: {named:?}");
        }
    }
    assert!(
        !named_from("config").contains("engine"),
        "config names engine"
    );
}

#[test]
fn telemetry_depends_on_no_door() {
    let named = named_from("telemetry");
    for above in DOORS.iter().chain(&["serve", "cli"]) {
        assert!(
            !named.contains(*above),
            "telemetry names {above}: {named:?}"
        );
    }
}
