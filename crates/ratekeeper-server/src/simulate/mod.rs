//! `ratekeeper simulate`: run policies over a request trace, offline, and
//! see what they admit.
//!
//! The requests come from a trace file ([`parse_trace`]: one request a line,
//! a time and an optional cost) or a one-line [`Pattern`] such as
//! `steady:50/s,burst:200@10s`. Each [`SimPolicy`] (`[KIND:]RATE`, such as
//! `sliding_log:100/minute`) decides them with the core's policies on the
//! requests' own timestamps, so a run is deterministic: the same input
//! always gives the same decisions. [`run()`] writes the decisions as CSV
//! ([`CsvWriter`]) and counts them per time bucket ([`Series`]), which
//! [`Series::to_svg`] draws: offered against admitted over time, with the
//! limit.
//!
//! One module per step, their items also here: [`pattern`] and [`trace`]
//! make requests (each documents its grammar), [`run`](mod@run) decides them,
//! [`csv`] and [`chart`] write them out.
//!
//! # Example
//!
//! Five requests at once under 3 per second, GCRA against a fixed window:
//!
//! ```
//! use ratekeeper_server::simulate::{self, SimulationOptions, Pattern, SimPolicy, Totals};
//!
//! let requests = "burst:5".parse::<Pattern>()?.requests();
//! let policies: Vec<SimPolicy> = ["gcra:3/s", "fixed_window:3/s"]
//!     .iter()
//!     .map(|p| p.parse())
//!     .collect::<Result<_, _>>()?;
//!
//! let mut csv = Vec::new();
//! let report = simulate::run(&policies, &requests, &SimulationOptions::default(), Some(&mut csv))?;
//! for totals in report.totals() {
//!     assert_eq!((totals.offered, totals.admitted, totals.refused), (5, 3, 2));
//! }
//! let csv = String::from_utf8(csv)?;
//! assert_eq!(csv.lines().nth(4), Some("0,1,false,0,0.333333334,false,0,1"));
//!
//! let svg = report.series().to_svg("burst:5");
//! assert_eq!(svg.matches(r#"class="series""#).count(), 2);
//! print!("{}", report.summary());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, Write};
use std::time::Duration;

use ratekeeper::Timestamp;
use thiserror::Error;

pub mod chart;
pub mod csv;
pub mod pattern;
pub mod run;
pub mod trace;

pub use chart::{auto_bucket, Series, TooManyBuckets, MAX_BUCKETS};
pub use csv::CsvWriter;
pub use pattern::{Pattern, PatternError, PatternErrorKind, Phase, DEFAULT_PHASE, MAX_SPAN};
pub use run::{ParsePolicyError, SimPolicy, Simulator, Totals};
pub use trace::{parse_trace, TraceError, TraceErrorKind};

/// The most requests one simulation takes, from a trace or a pattern: ten
/// million.
pub const MAX_REQUESTS: usize = 10_000_000;

/// Runs of at least this many requests show a progress bar (when asked,
/// and when stderr is a terminal).
pub const PROGRESS_MIN: usize = 200_000;

/// One request: when it comes and what it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// When, from the trace's or pattern's zero.
    pub time: Timestamp,
    /// Units it takes; 0 only asks.
    pub cost: u64,
}

/// How [`run()`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimulationOptions {
    /// The chart's bucket width; [`auto_bucket`] of the requests' span when
    /// `None`.
    pub bucket: Option<Duration>,
    /// Show a progress bar on stderr for runs of at least
    /// [`PROGRESS_MIN`] requests, when stderr is a terminal.
    pub progress: bool,
}

impl SimulationOptions {
    /// The options with `bucket` as the bucket width.
    pub fn with_bucket(mut self, bucket: Duration) -> SimulationOptions {
        self.bucket = Some(bucket);
        self
    }

    /// The options with the progress bar on or off.
    pub(crate) fn with_progress(mut self, progress: bool) -> SimulationOptions {
        self.progress = progress;
        self
    }
}

/// Why [`run()`] failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SimulateError {
    /// No policy to run.
    #[error("no policy to simulate")]
    NoPolicies,
    /// The bucket makes too many buckets for a chart.
    #[error(transparent)]
    TooManyBuckets(#[from] TooManyBuckets),
    /// Writing the CSV failed.
    #[error("cannot write the CSV: {0}")]
    Csv(#[source] io::Error),
}

/// What [`run()`] found: each policy's totals and the per-bucket series.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    policies: Vec<SimPolicy>,
    totals: Vec<Totals>,
    series: Series,
}

impl Report {
    /// The policies, in order.
    pub fn policies(&self) -> &[SimPolicy] {
        &self.policies
    }

    /// Each policy's totals, in the policies' order.
    pub fn totals(&self) -> &[Totals] {
        &self.totals
    }

    /// Offered and admitted units per bucket, for the chart.
    pub fn series(&self) -> &Series {
        &self.series
    }

    /// A table of requests offered, admitted and refused per policy, with
    /// the share admitted, for a terminal.
    ///
    /// ```text
    /// policy                     offered  admitted  refused  admitted%
    /// gcra:3/second                    5         3        2       60.0
    /// ```
    pub fn summary(&self) -> String {
        let width = self
            .policies
            .iter()
            .map(|p| p.to_string().chars().count())
            .max()
            .unwrap_or(0)
            .max("policy".len());
        let mut out = format!(
            "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9}\n",
            "policy", "offered", "admitted", "refused", "admitted%"
        );
        for (policy, t) in self.policies.iter().zip(&self.totals) {
            let share = if t.offered == 0 {
                0.0
            } else {
                100.0 * t.admitted as f64 / t.offered as f64
            };
            out.push_str(&format!(
                "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9.1}\n",
                policy.to_string(),
                t.offered,
                t.admitted,
                t.refused,
                share
            ));
        }
        out
    }
}

/// Runs `policies` over `requests` (in the order given, each policy from a
/// fresh state), writing the decisions as CSV to `csv` if given, and
/// counting them per bucket for the chart.
///
/// # Errors
///
/// [`SimulateError::NoPolicies`] for an empty `policies`,
/// [`SimulateError::TooManyBuckets`] when `options.bucket` is too short for
/// the requests' span, and [`SimulateError::Csv`] when writing fails.
pub fn run(
    policies: &[SimPolicy],
    requests: &[Request],
    options: &SimulationOptions,
    csv: Option<&mut dyn Write>,
) -> Result<Report, SimulateError> {
    if policies.is_empty() {
        return Err(SimulateError::NoPolicies);
    }
    let first = requests.iter().map(|r| r.time).min().unwrap_or_default();
    let last = requests.iter().map(|r| r.time).max().unwrap_or_default();
    let bucket = options
        .bucket
        .unwrap_or_else(|| auto_bucket(last.duration_since(first)));
    let mut series = Series::new(policies, first, last, bucket)?;
    let mut csv = csv
        .map(|out| CsvWriter::new(out, policies))
        .transpose()
        .map_err(SimulateError::Csv)?;
    let progress = progress_bar(options, requests.len());
    let mut simulator = Simulator::new(policies);
    for (i, request) in requests.iter().enumerate() {
        let decisions = simulator.decide(*request);
        series.record(request, decisions);
        if let Some(csv) = &mut csv {
            csv.write(request, decisions).map_err(SimulateError::Csv)?;
        }
        if i % 65_536 == 65_535 {
            progress.inc(65_536);
        }
    }
    progress.finish_and_clear();
    if let Some(csv) = csv {
        csv.finish().map_err(SimulateError::Csv)?;
    }
    Ok(Report {
        policies: policies.to_vec(),
        totals: simulator.totals().to_vec(),
        series,
    })
}

/// A progress bar on stderr for long runs, hidden otherwise (indicatif
/// draws nothing when stderr is not a terminal).
fn progress_bar(options: &SimulationOptions, len: usize) -> indicatif::ProgressBar {
    if !options.progress || len < PROGRESS_MIN {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "simulating {bar:40} {human_pos}/{human_len} requests ({eta} left)",
    ) {
        bar.set_style(style);
    }
    bar
}

/// `d` in seconds, with as many decimals as it needs: `0`, `1.5`,
/// `0.333333334`.
pub(crate) fn seconds(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if nanos == 0 {
        secs.to_string()
    } else {
        let fraction = format!("{nanos:09}");
        format!("{secs}.{}", fraction.trim_end_matches('0'))
    }
}
