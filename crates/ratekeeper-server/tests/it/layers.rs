//! The service's modules depend one way, down the layers that `lib.rs`'s
//! docs give: `config` at the bottom (above two helpers), then `access`
//! and `telemetry`, then `engine` and `listen`, the doors (`http`,
//! `envoy`, `proxy`, `admin`) on those and never on each other, then
//! `serve` (and `simulate`), and `cli` on top. Read from the source, as a
//! reviewer would: every `crate::MODULE` path a module's files name (code,
//! imports and doc links, tests included).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DOORS: [&str; 4] = ["http", "envoy", "proxy", "admin"];

/// The layers of the top-level modules, bottom first: a module names only
/// modules of the layers below its own (as `lib.rs`'s docs say).
const LAYERS: [&[&str]; 7] = [
    // Helpers that name no module.
    &["error_chain", "plural"],
    &["config"],
    &["access", "telemetry"],
    &["engine", "listen"],
    &DOORS,
    &["serve", "simulate"],
    &["cli"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares, and what each name that
/// `lib.rs` re-exports (`pub use config::{Config, ..}`) comes from.
fn top_level() -> (BTreeSet<String>, BTreeMap<String, String>) {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut modules = BTreeSet::new();
    let mut exports = BTreeMap::new();
    for line in lib.lines().map(str::trim) {
        if line.starts_with("//") {
            continue;
        }
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            modules.insert(name.trim().to_owned());
        } else if let Some(path) = line.strip_prefix("use ").and_then(|l| l.strip_suffix(';')) {
            let (module, names) = path.split_once("::").expect("a re-export from a module");
            let names = names.trim_start_matches('{').trim_end_matches('}');
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let name = name
                    .rsplit(" as ")
                    .next()
                    .unwrap()
                    .rsplit("::")
                    .next()
                    .unwrap();
                exports.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    assert!(modules.contains("config"), "no modules read from lib.rs");
    (modules, exports)
}

/// The top-level modules that `module`'s files name as `crate::NAME`
/// (a name `lib.rs` re-exports counts as its module).
fn named_from(module: &str) -> BTreeSet<String> {
    let dir = src().join(module);
    let file = src().join(format!("{module}.rs"));
    assert!(dir.is_dir() || file.is_file(), "no module {module}");
    let mut files = vec![dir, file];
    let exports = top_level().1;
    let mut named = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if !path.is_file() || path.extension().is_none_or(|ext| ext != "rs") {
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
            let name = exports.get(&name).cloned().unwrap_or(name);
            if name != module {
                named.insert(name);
            }
        }
    }
    named
}

/// Every top-level module and the top-level modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    top_level()
        .0
        .into_iter()
        .map(|module| {
            let named = named_from(&module);
            (module, named)
        })
        .collect()
}

/// A cycle of `graph`, as the path around it (its first module again at
/// the end), if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    /// Depth first from `module`, with `path` the modules being visited.
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut cycle = path[at..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}

#[test]
fn the_modules_name_each_other_without_a_cycle() {
    let graph = graph();
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the top-level modules name each other in a cycle: {}\n(all: {graph:?})",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn each_module_names_only_the_layers_below_its_own() {
    let layer = |module: &str| LAYERS.iter().position(|layer| layer.contains(&module));
    let graph = graph();
    let placed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|l| l.iter().map(|m| m.to_string()))
        .collect();
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    assert_eq!(
        modules, placed,
        "every top-level module of lib.rs has a layer in LAYERS (and the docs of lib.rs)"
    );
    let mut upward = Vec::new();
    for (module, named) in &graph {
        let own = layer(module).unwrap();
        for name in named {
            match layer(name) {
                Some(below) if below < own => {}
                Some(_) => upward.push(format!("{module} names {name}")),
                None => upward.push(format!("{module} names crate::{name}, no top-level module")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "modules name their own layer or one above ({LAYERS:?}): {upward:?}"
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_its_path() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            graph.entry(to.to_string()).or_default();
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
        }
        graph
    };
    let down = graph(&[
        ("cli", "serve"),
        ("serve", "engine"),
        ("cli", "engine"),
        ("engine", "config"),
    ]);
    assert_eq!(find_cycle(&down), None);
    let looped = graph(&[
        ("cli", "serve"),
        ("serve", "engine"),
        ("engine", "config"),
        ("config", "serve"),
    ]);
    assert_eq!(
        find_cycle(&looped)
            .map(|cycle| cycle.join(" -> "))
            .as_deref(),
        Some("serve -> engine -> config -> serve")
    );
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
