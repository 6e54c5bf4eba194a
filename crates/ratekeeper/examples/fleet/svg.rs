//! The chart: under-admission and decisions per store call against the
//! number of nodes, a line per policy and latency, for the steady rows
//! (three times the limit, and 0.8 times it). Plain SVG written by hand,
//! readable without any script or font file.

use std::fmt::Write as _;
use std::time::Duration;

use ratekeeper::policy::PolicyKind;

use crate::metrics::Report;
use crate::scenario::{Scenario, Shape};

const WIDTH: f64 = 1_000.0;
const HEIGHT: f64 = 330.0;
/// Each panel's plot area: left edge, top, width, height.
const PANELS: [(f64, f64, f64, f64); 3] = [
    (60.0, 40.0, 250.0, 200.0),
    (390.0, 40.0, 250.0, 200.0),
    (720.0, 40.0, 250.0, 200.0),
];

/// One line: a policy at one latency, its points (nodes, value).
struct Line {
    kind: PolicyKind,
    one_way: Duration,
    points: Vec<(usize, f64)>,
}

/// The lines of the rows of `shape`, each point `value` of a row.
fn lines(rows: &[(Scenario, Report)], shape: Shape, value: impl Fn(&Report) -> f64) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for (s, r) in rows.iter().filter(|(s, _)| s.shape == shape) {
        let point = (s.nodes, value(r));
        match lines
            .iter_mut()
            .find(|l| l.kind == s.kind && l.one_way == s.one_way)
        {
            Some(line) => line.points.push(point),
            None => lines.push(Line {
                kind: s.kind,
                one_way: s.one_way,
                points: vec![point],
            }),
        }
    }
    lines
}

/// The chart of `rows`.
pub(crate) fn chart(rows: &[(Scenario, Report)]) -> String {
    let per_call = |r: &Report| 1.0 / r.calls_per_decision.max(f64::MIN_POSITIVE);
    let under = lines(rows, Shape::Steady, |r| r.under_pct.unwrap_or(0.0));
    let over_limit = lines(rows, Shape::Steady, per_call);
    let below = lines(rows, Shape::Below, per_call);
    let mut nodes: Vec<usize> = rows.iter().map(|(s, _)| s.nodes).collect();
    nodes.sort_unstable();
    nodes.dedup();

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    panel(
        &mut svg,
        PANELS[0],
        "Under-admission, % of the limit (3x, 5 s)",
        &nodes,
        &under,
        false,
    );
    panel(
        &mut svg,
        PANELS[1],
        "Decisions per store call (3x the limit)",
        &nodes,
        &over_limit,
        false,
    );
    panel(
        &mut svg,
        PANELS[2],
        "Decisions per store call (0.8x, log)",
        &nodes,
        &below,
        true,
    );
    let mut keys: Vec<(PolicyKind, Duration)> = Vec::new();
    for line in under.iter().chain(&below) {
        if !keys.contains(&(line.kind, line.one_way)) {
            keys.push((line.kind, line.one_way));
        }
    }
    legend(&mut svg, &keys);
    svg.push_str("</svg>\n");
    svg
}

/// One panel: axes, grid, and its lines; on a log scale if `log` (every
/// value then at least 1).
fn panel(
    svg: &mut String,
    area: (f64, f64, f64, f64),
    title: &str,
    nodes: &[usize],
    lines: &[Line],
    log: bool,
) {
    let (x0, y0, w, h) = area;
    let max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let top = if log {
        10f64.powf(max.max(10.0).log10().ceil())
    } else {
        nice_max(max)
    };
    let (lo, hi) = (
        (*nodes.first().unwrap_or(&2) as f64).log2(),
        (*nodes.last().unwrap_or(&256) as f64).log2(),
    );
    // Nodes on a log scale: 2 to 256 doubles at each step.
    let x = |n: usize| x0 + w * ((n as f64).log2() - lo) / (hi - lo).max(1.0);
    let y = |v: f64| {
        let share = if log {
            v.max(1.0).log10() / top.log10()
        } else {
            v / top
        };
        y0 + h - h * share
    };
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle" font-weight="bold">{title}</text>"#,
        x0 + w / 2.0,
        y0 - 15.0
    );
    let ticks: Vec<f64> = if log {
        (0..=top.log10() as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=4).map(|i| top * f64::from(i) / 4.0).collect()
    };
    for v in ticks {
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 + w,
            x0 - 5.0,
            y(v) + 4.0,
            short(v),
            yy = y(v),
        );
    }
    for &n in nodes {
        let _ = writeln!(
            svg,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{y0}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{n}</text>"##,
            y0 + h,
            y0 + h + 15.0,
            xx = x(n),
        );
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#444"/><text x="{}" y="{}" text-anchor="middle">nodes</text>"##,
        x0 + w / 2.0,
        y0 + h + 32.0
    );
    for line in lines {
        let points: Vec<String> = line
            .points
            .iter()
            .map(|&(n, v)| format!("{:.1},{:.1}", x(n), y(v)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>"#,
            points.join(" "),
            color(line.kind),
            dash(line.one_way)
        );
        for &(n, v) in &line.points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                x(n),
                y(v),
                color(line.kind)
            );
        }
    }
}

/// Which line is which, under the panels.
fn legend(svg: &mut String, keys: &[(PolicyKind, Duration)]) {
    for (i, &(kind, one_way)) in keys.iter().enumerate() {
        let x = 60.0 + 300.0 * (i % 3) as f64;
        let y = HEIGHT - 35.0 + 16.0 * (i / 3) as f64;
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" x2="{}" y1="{y}" y2="{y}" stroke="{}" stroke-width="2"{}/><text x="{}" y="{}">{kind}, {} ms one-way</text>"#,
            x + 24.0,
            color(kind),
            dash(one_way),
            x + 30.0,
            y + 4.0,
            one_way.as_secs_f64() * 1_000.0
        );
    }
}

fn color(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::FixedWindow => "#1f77b4",
        PolicyKind::Gcra => "#d62728",
        PolicyKind::SlidingWindow => "#2ca02c",
        PolicyKind::TokenBucket => "#9467bd",
        PolicyKind::SlidingLog => "#8c564b",
    }
}

/// The farther store's lines are dashed.
fn dash(one_way: Duration) -> &'static str {
    if one_way >= Duration::from_millis(1) {
        r#" stroke-dasharray="6 3""#
    } else {
        ""
    }
}

/// The axis' top: `max` rounded up to 1, 2 or 5 times a power of ten.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&top| top >= max)
        .unwrap_or(10.0 * power)
}

/// An axis label: whole numbers without decimals.
fn short(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
