//! The fleet simulation: N nodes leasing one limit from a shared store a
//! set latency away, in virtual time, on the real `Leased` code. It prints
//! a markdown table of over-admission (must be 0), under-admission, store
//! calls per decision and decision latency for each scenario.
//!
//! ```sh
//! cargo run --release -p ratekeeper --example fleet -- [--svg docs/fleet.svg] [--quick]
//! ```
//!
//! `--svg` also draws the steady rows as a chart; `--quick` runs only 2 and
//! 16 nodes; `--only TEXT` only the scenarios whose label (as printed on
//! stderr, e.g. `bursts gcra n=16 one-way 1ms`) contains it. Runs are deterministic: the same build prints the same table
//! on any machine (see `sim.rs` for how time is simulated, and
//! `tests/fleet.rs`, which runs small scenarios through the same engine).

mod metrics;
mod remote;
mod rng;
mod scenario;
mod sim;
mod svg;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ratekeeper::policy::PolicyKind;

use metrics::Report;
use scenario::{Scenario, Shape};

/// The policies compared: a window, a bucket, and the counter that slides.
const KINDS: [PolicyKind; 3] = [
    PolicyKind::FixedWindow,
    PolicyKind::Gcra,
    PolicyKind::SlidingWindow,
];

/// The store's latency each way: a store in the same zone, and one a
/// little further.
const ONE_WAY: [Duration; 2] = [Duration::from_micros(250), Duration::from_millis(1)];

fn main() {
    let mut svg_path = None;
    let mut quick = false;
    let mut only = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--svg" => svg_path = Some(args.next().expect("--svg takes a path")),
            "--quick" => quick = true,
            "--only" => only = Some(args.next().expect("--only takes a text")),
            other => {
                eprintln!("usage: fleet [--svg PATH] [--quick] [--only TEXT]; unknown {other:?}");
                std::process::exit(2);
            }
        }
    }
    let all: &[usize] = if quick { &[2, 16] } else { &[2, 16, 64, 256] };
    let some: &[usize] = if quick { &[2, 16] } else { &[2, 16, 256] };

    let mut plan: Vec<Scenario> = Vec::new();
    for &one_way in &ONE_WAY {
        for kind in KINDS {
            for &n in all {
                plan.push(Scenario::new(Shape::Steady, kind, n, one_way));
            }
        }
    }
    for (shape, nodes) in [
        (Shape::Below, all),
        (Shape::Bursts, all),
        (Shape::ManyKeys, some),
        (Shape::NodeDies, some),
    ] {
        for kind in KINDS {
            for &n in nodes {
                plan.push(Scenario::new(shape, kind, n, ONE_WAY[1]));
            }
        }
    }

    if let Some(only) = &only {
        plan.retain(|s| s.label().contains(only.as_str()));
    }

    let started = Instant::now();
    let mut rows = Vec::new();
    for s in plan {
        let run = scenario::run(&s);
        let report = metrics::report(&s, &run);
        eprintln!(
            "{:>6.1}s  {}: over {} under {:?} (after 1 s {:?}), {:?}",
            started.elapsed().as_secs_f64(),
            s.label(),
            report.over,
            report.under_pct,
            report.under_later_pct,
            run.totals,
        );
        rows.push((s, report));
    }
    print!("{}", table(&rows));
    if let Some(path) = svg_path {
        std::fs::write(&path, svg::chart(&rows)).expect("the chart can be written");
        eprintln!("wrote {path}");
    }
}

/// The rows as markdown, one table per shape.
fn table(rows: &[(Scenario, Report)]) -> String {
    let mut out = String::new();
    let mut shape = None;
    for (s, r) in rows {
        if shape != Some(s.shape) {
            shape = Some(s.shape);
            let _ = write!(
                out,
                "\n**{}**\n\n\
                 | policy | nodes | one-way | requests | admitted | ideal | over | under % | \
                 under % after 1 s | store calls / decision | decisions / store call | \
                 decided on node | p50 | p99 |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                s.shape
            );
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.1} | {:.1}% | {} | {} |",
            s.kind,
            s.nodes,
            ms(s.one_way),
            r.requests,
            r.admitted,
            r.ideal,
            r.over,
            pct(r.under_pct),
            pct(r.under_later_pct),
            r.calls_per_decision,
            1.0 / r.calls_per_decision.max(f64::MIN_POSITIVE),
            100.0 * r.local_share,
            ms(r.p50),
            ms(r.p99),
        );
    }
    out
}

/// A percentage, or `-` where no key's demand exceeded its limit.
fn pct(p: Option<f64>) -> String {
    p.map_or("-".to_owned(), |p| format!("{p:.2}"))
}

/// A duration in milliseconds, as short as it reads.
fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1_000.0;
    if ms == 0.0 {
        "0".to_owned()
    } else {
        format!("{ms:.2} ms")
    }
}
