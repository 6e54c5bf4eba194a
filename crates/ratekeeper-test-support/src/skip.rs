//! Tests that cannot run because an outside program (redis-server, nginx,
//! Chromium) is missing: said where nobody can miss it, counted, and a
//! failure under `CI=true`.
//!
//! libtest has no "skipped" outcome, and it captures `eprintln!` of passing
//! tests, so a test that returns early looks like one that passed. Here a
//! skip is instead
//! - written straight to the process's standard error, which the harness
//!   does not capture, as a banner naming the test and the program;
//! - under `cargo test`, appended to a list under the target directory (one
//!   list per cargo process), and once cargo has exited, that list is
//!   printed as a summary with the count, after everything cargo printed
//!   (a small `sh` started with the first skip waits for cargo to end);
//! - under `CI=true`, a panic: CI must test everything.
//!
//! See `docs/testing.md`.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// Declares that the running test cannot run because `program` is missing,
/// `install` saying how to get it: panics under `CI=true`, otherwise shows
/// and counts the skip. The test should return right after.
pub fn program_missing(program: &str, install: &str) {
    missing(
        std::env::var("CI").is_ok_and(|v| v == "true"),
        program,
        install,
    );
}

/// [`program_missing`], with `ci` for whether `CI=true`.
fn missing(ci: bool, program: &str, install: &str) {
    let reason = format!("`{program}` is not installed ({install})");
    if ci {
        panic!("{reason}, and CI=true requires it");
    }
    record(&reason);
}

/// The tests of this process already counted: a test that starts two
/// servers is still one skip.
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn record(reason: &str) {
    let test = current_test();
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !seen.get_or_insert_with(HashSet::new).insert(test.clone()) {
        return;
    }
    let line = format!("{} {test}: {reason}", crate_name());
    let run = CargoRun::current();
    let count = run.as_ref().and_then(|run| run.list.append(&line).ok());
    if count == Some(1) {
        if let Some(run) = &run {
            // Nothing to do if `sh` is missing: the banners were shown.
            let _ = watch(run.cargo_pid, &run.list.0, Stdio::inherit());
        }
    }
    let _ = std::io::stderr()
        .lock()
        .write_all(banner(&line, count).as_bytes());
}

/// The banner of one skip; `count` is its number in this cargo run, when
/// run by cargo.
pub fn banner(line: &str, count: Option<usize>) -> String {
    let bar = "!".repeat(72);
    let counted = match count {
        Some(n) => format!("\n!!! skip {n} of this `cargo test`; all are listed when it ends."),
        None => String::new(),
    };
    format!("\n{bar}\n!!! SKIPPED, NOTHING TESTED: {line}{counted}\n{bar}\n\n")
}

/// The libtest test running on this thread (libtest names each test's
/// thread after it).
fn current_test() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "(a test)".to_string(),
    }
}

/// The package under test: cargo sets `CARGO_PKG_NAME` when it runs a test
/// binary; otherwise the binary's name.
fn crate_name() -> String {
    std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_default()
    })
}

/// A list of skips, one line each, in a file.
#[derive(Debug)]
pub struct SkipList(pub PathBuf);

impl SkipList {
    /// Appends `line` and returns how many lines the list now has.
    pub fn append(&self, line: &str) -> std::io::Result<usize> {
        if let Some(dir) = self.0.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new().create(true).append(true).open(&self.0)?;
        file.write_all(format!("{line}\n").as_bytes())?;
        Ok(std::fs::read_to_string(&self.0)?.lines().count())
    }
}

/// The `cargo test` process this test binary was started by, and its list
/// of skips.
struct CargoRun {
    cargo_pid: u32,
    list: SkipList,
}

impl CargoRun {
    /// `None` when the parent is not cargo (a binary run by hand, or a
    /// worker started by a test), or off Linux.
    fn current() -> Option<CargoRun> {
        let parent = std::os::unix::process::parent_id();
        let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
        if comm.trim_end() != "cargo" {
            return None;
        }
        // The start time tells this cargo from an earlier one that had the
        // same pid: field 22 of `stat`, counted after the name's `)`.
        let stat = std::fs::read_to_string(format!("/proc/{parent}/stat")).ok()?;
        let started = stat.rsplit_once(')')?.1.split_whitespace().nth(19)?;
        let dir = target_dir()?.join("test-skips");
        Some(CargoRun {
            cargo_pid: parent,
            list: SkipList(dir.join(format!("cargo-{parent}-{started}.txt"))),
        })
    }
}

/// `target/<profile>`: test binaries live in its `deps`.
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    (deps.file_name()? == "deps").then(|| deps.parent().map(Path::to_path_buf))?
}

/// Starts `sh` to wait for `pid` to exit, then print the list at `list`
/// with its count to `stderr`, and remove it.
pub fn watch(pid: u32, list: &Path, stderr: Stdio) -> std::io::Result<Child> {
    // Polled: a process cannot wait for one that is not its child.
    const SCRIPT: &str = r#"
while kill -0 "$1" 2>/dev/null; do sleep 0.1; done
n=$(wc -l < "$2" | tr -d ' ')
bar='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
printf '\n%s\n!!! %s test(s) SKIPPED: they passed without testing anything\n' "$bar" "$n" >&2
sed 's/^/!!!   /' "$2" >&2
printf '!!! Install what they name; CI=true makes each a failure.\n%s\n' "$bar" >&2
rm -f "$2"
"#;
    Command::new("/bin/sh")
        .args(["-c", SCRIPT, "sh", &pid.to_string()])
        .arg(list)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_list_counts_its_lines() {
        let dir = tempfile::tempdir().unwrap();
        let list = SkipList(dir.path().join("sub").join("skips.txt"));
        assert_eq!(list.append("a t1: `x` is not installed").unwrap(), 1);
        assert_eq!(list.append("a t2: `x` is not installed").unwrap(), 2);
    }

    #[test]
    fn the_banner_names_the_skip_and_its_number() {
        let text = banner("pkg mod::t: `nginx` is not installed", Some(3));
        assert!(text.contains("SKIPPED, NOTHING TESTED: pkg mod::t: `nginx`"));
        assert!(text.contains("skip 3 of this `cargo test`"));
        assert!(!banner("pkg t", None).contains("skip "));
    }

    /// The summary comes once the watched process has ended, with the
    /// count and every line, and the list is gone after it.
    #[test]
    fn the_summary_follows_the_end_of_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let list = SkipList(dir.path().join("skips.txt"));
        list.append("pkg a::one: `nginx` is not installed").unwrap();
        list.append("pkg b::two: `chromium` is not installed")
            .unwrap();
        // Stands in for cargo: runs until its standard input closes.
        let mut cargo = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut watcher = watch(cargo.id(), &list.0, Stdio::piped()).unwrap();
        drop(cargo.stdin.take());
        cargo.wait().unwrap();
        let mut summary = String::new();
        watcher
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut summary)
            .unwrap();
        assert!(watcher.wait().unwrap().success());
        assert!(summary.contains("!!! 2 test(s) SKIPPED"), "{summary}");
        assert!(summary.contains("!!!   pkg a::one: `nginx`"), "{summary}");
        assert!(
            summary.contains("!!!   pkg b::two: `chromium`"),
            "{summary}"
        );
        assert!(!list.0.exists());
    }

    #[test]
    #[should_panic(expected = "`x` is not installed (get x), and CI=true requires it")]
    fn under_ci_a_missing_program_fails() {
        missing(true, "x", "get x");
    }
}
