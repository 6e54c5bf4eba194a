//! Offered and admitted traffic per time bucket, and its SVG chart.
//!
//! [`Series`] counts, per bucket of time, the units offered and the units
//! each policy admitted; [`Series::to_svg`] draws them: the offered traffic
//! as a grey area, each policy's admitted traffic as a stepped line of its
//! own colour (drawn widest first, so lines that coincide, as GCRA's and
//! the token bucket's do, stay visible), each policy's long-run limit per
//! bucket as a dashed line (one grey line when all policies share it), axes
//! with ticks and labels, and a legend with each policy's totals.
//!
//! The SVG is plain, self-contained XML: no script, no outside fonts or
//! styles. Each policy's line is a `<g class="series">` whose
//! `data-policy` attribute is the policy's label.
//!
//! ```
//! use ratekeeper::Timestamp;
//! use ratekeeper_server::simulate::{Request, Series, SimPolicy, Simulator};
//! use std::time::Duration;
//!
//! let policies = vec!["gcra:1/s".parse::<SimPolicy>().unwrap()];
//! let mut series = Series::new(&policies, Timestamp::ZERO, Timestamp::from_secs(2), Duration::from_secs(1)).unwrap();
//! let mut simulator = Simulator::new(&policies);
//! for ms in [0, 100, 1000, 1100, 1200] {
//!     let request = Request { time: Timestamp::from_millis(ms), cost: 1 };
//!     series.record(&request, simulator.decide(request));
//! }
//! assert_eq!(series.offered(), [2, 3, 0]);
//! assert_eq!(series.admitted(0), [1, 1, 0]);
//! assert!(series.to_svg("one policy").starts_with("<svg"));
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use ratekeeper::{Decision, Timestamp};
use thiserror::Error;

use super::{seconds, Request, SimPolicy};

/// The most buckets a chart has.
pub const MAX_BUCKETS: usize = 10_000;

/// The bucket widths [`auto_bucket`] picks from.
const NICE_BUCKETS: [u64; 28] = [
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    10_800_000,
    21_600_000,
    43_200_000,
    86_400_000,
    604_800_000,
];

/// Colours of the policies' lines, in order (the Okabe-Ito palette, easy to
/// tell apart for colour-blind readers), reused past seven.
const COLOURS: [&str; 7] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
];

/// Too many buckets for a chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error(
    "a bucket of {}s makes {buckets} buckets; a chart has at most {max} (choose a longer bucket)",
    seconds(*.bucket)
)]
pub struct TooManyBuckets {
    /// The bucket width asked for.
    pub bucket: Duration,
    /// The buckets it would make.
    pub buckets: u128,
    /// [`MAX_BUCKETS`].
    pub max: usize,
}

/// The bucket width for a chart spanning `span`: a round width (1 ms, 2 ms,
/// 5 ms, ..., 1 s, 2 s, 5 s, 10 s, 15 s, 30 s, 1 min, ..., 1 day, 1 week)
/// that makes about 120 buckets at most; past 120 weeks, whole days.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper_server::simulate::auto_bucket;
///
/// assert_eq!(auto_bucket(Duration::from_secs(60)), Duration::from_millis(500));
/// assert_eq!(auto_bucket(Duration::from_secs(3600)), Duration::from_secs(30));
/// // Ten years: buckets of 31 days.
/// let days = |n: u64| Duration::from_secs(n * 86_400);
/// assert_eq!(auto_bucket(days(3650)), days(31));
/// ```
pub fn auto_bucket(span: Duration) -> Duration {
    let span = span.as_nanos();
    NICE_BUCKETS
        .iter()
        .map(|&ms| Duration::from_millis(ms))
        .find(|b| span / b.as_nanos() <= 120)
        .unwrap_or_else(|| {
            // Past 120 weeks: whole days, about 120 buckets.
            let day = 86_400_000_000_000u128;
            let days = (span / 120).div_ceil(day);
            Duration::from_secs(u64::try_from(days).unwrap_or(u64::MAX / 86_400) * 86_400)
        })
}

/// Units offered and admitted per bucket of time, for each policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    origin: Timestamp,
    bucket: Duration,
    labels: Vec<String>,
    /// Each policy's long-run limit, in units per bucket.
    limits: Vec<f64>,
    offered: Vec<u64>,
    admitted: Vec<Vec<u64>>,
    offered_requests: u64,
    offered_units: u64,
}

impl Series {
    /// Empty buckets of `bucket` from the one holding `first` (aligned to
    /// multiples of `bucket`) to the one holding `last`, for `policies`.
    ///
    /// # Errors
    ///
    /// [`TooManyBuckets`] past [`MAX_BUCKETS`] (a zero `bucket` counts as
    /// too many).
    pub fn new(
        policies: &[SimPolicy],
        first: Timestamp,
        last: Timestamp,
        bucket: Duration,
    ) -> Result<Series, TooManyBuckets> {
        let width = bucket.as_nanos();
        let too_many = |buckets| TooManyBuckets {
            bucket,
            buckets,
            max: MAX_BUCKETS,
        };
        if width == 0 {
            return Err(too_many(u128::MAX));
        }
        let first = u128::from(first.as_nanos());
        let last = u128::from(last.as_nanos()).max(first);
        let origin = first - first % width;
        let buckets = (last - origin) / width + 1;
        if buckets > MAX_BUCKETS as u128 {
            return Err(too_many(buckets));
        }
        let buckets = buckets as usize;
        let limits = policies
            .iter()
            .map(|p| {
                let rate = p.rate();
                rate.amount() as f64 * width as f64 / rate.period().as_nanos() as f64
            })
            .collect();
        Ok(Series {
            origin: Timestamp::from_nanos(u64::try_from(origin).unwrap_or(u64::MAX)),
            bucket,
            labels: policies.iter().map(ToString::to_string).collect(),
            limits,
            offered: vec![0; buckets],
            admitted: vec![vec![0; buckets]; policies.len()],
            offered_requests: 0,
            offered_units: 0,
        })
    }

    /// Counts `request` and its `decisions` (one per policy, in order).
    /// A request outside the span counts in the first or the last bucket.
    pub fn record(&mut self, request: &Request, decisions: &[Decision]) {
        let offset = request
            .time
            .as_nanos()
            .saturating_sub(self.origin.as_nanos());
        let index = (u128::from(offset) / self.bucket.as_nanos().max(1))
            .min(self.offered.len().saturating_sub(1) as u128) as usize;
        self.offered_requests += 1;
        self.offered_units = self.offered_units.saturating_add(request.cost);
        if let Some(offered) = self.offered.get_mut(index) {
            *offered = offered.saturating_add(request.cost);
        }
        for (admitted, decision) in self.admitted.iter_mut().zip(decisions) {
            if decision.is_allowed() {
                if let Some(slot) = admitted.get_mut(index) {
                    *slot = slot.saturating_add(request.cost);
                }
            }
        }
    }

    /// The start of the first bucket.
    pub fn origin(&self) -> Timestamp {
        self.origin
    }

    /// The width of a bucket.
    pub fn bucket(&self) -> Duration {
        self.bucket
    }

    /// The policies' labels, in order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Units offered per bucket.
    pub fn offered(&self) -> &[u64] {
        &self.offered
    }

    /// Units the policy at `index` admitted per bucket (empty past the
    /// last policy).
    pub fn admitted(&self, index: usize) -> &[u64] {
        self.admitted.get(index).map_or(&[], Vec::as_slice)
    }

    /// The chart as an SVG document, titled `title`.
    pub fn to_svg(&self, title: &str) -> String {
        Chart::new(self).render(title)
    }
}

/// Sizes of the drawing, in SVG user units.
const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 690.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 490.0;

/// The scales of one chart.
struct Chart<'a> {
    series: &'a Series,
    y_max: f64,
    y_step: f64,
    /// Seconds per x unit of the axis labels, and their name.
    time_unit: (f64, &'static str),
    /// Whether every request cost 1 unit, so units are requests.
    requests: bool,
}

impl<'a> Chart<'a> {
    fn new(series: &'a Series) -> Chart<'a> {
        let highest = series
            .offered
            .iter()
            .chain(series.admitted.iter().flatten())
            .map(|&v| v as f64)
            .chain(series.limits.iter().copied())
            .fold(0.0, f64::max);
        let y_step = nice_step(highest / 5.0);
        let y_max = ((highest / y_step).ceil() * y_step).max(y_step);
        let span = series.bucket.as_secs_f64() * series.offered.len() as f64;
        let time_unit = if span > 3.0 * 3600.0 {
            (3600.0, "h")
        } else if span > 600.0 {
            (60.0, "min")
        } else if span >= 1.0 {
            (1.0, "s")
        } else {
            (0.001, "ms")
        };
        Chart {
            series,
            y_max,
            y_step,
            time_unit,
            requests: series.offered_requests == series.offered_units,
        }
    }

    fn x(&self, bucket: usize) -> f64 {
        let n = self.series.offered.len().max(1) as f64;
        LEFT + (RIGHT - LEFT) * bucket as f64 / n
    }

    fn y(&self, value: f64) -> f64 {
        BOTTOM - (BOTTOM - TOP) * (value / self.y_max).clamp(0.0, 1.0)
    }

    /// The stepped outline of `values`, one flat segment per bucket.
    fn steps(&self, values: &[u64]) -> String {
        let mut points = String::new();
        for (i, &v) in values.iter().enumerate() {
            let y = self.y(v as f64);
            let _ = write!(
                points,
                "{:.1},{:.1} {:.1},{:.1} ",
                self.x(i),
                y,
                self.x(i + 1),
                y
            );
        }
        points.trim_end().to_owned()
    }

    fn render(&self, title: &str) -> String {
        let s = self.series;
        let mut svg = String::new();
        let what = if self.requests { "requests" } else { "units" };
        let bucket = seconds(s.bucket);
        let _ = write!(
            svg,
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<title>{}</title>
<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>
<text x="{LEFT}" y="28" font-size="15" font-weight="bold">{}</text>
<text x="{LEFT}" y="48" fill="#555555">{what} offered and admitted per {bucket}s bucket</text>
"##,
            esc(title),
            esc(&shorten(title, 100))
        );
        self.grid(&mut svg, what, &bucket);

        // Offered: a grey area under the offered steps.
        let _ = writeln!(
            svg,
            r##"<g class="offered"><polygon fill="#d5dbe3" stroke="#aab4c0" stroke-width="1" points="{LEFT:.1},{BOTTOM:.1} {} {:.1},{BOTTOM:.1}"/></g>"##,
            self.steps(&s.offered),
            self.x(s.offered.len())
        );

        // Admitted: one stepped line per policy, widest first.
        let n = s.labels.len();
        for (i, (label, admitted)) in s.labels.iter().zip(&s.admitted).enumerate() {
            let width = 1.5 + (n - 1 - i) as f64;
            let _ = writeln!(
                svg,
                r##"<g class="series" data-policy="{}"><polyline fill="none" stroke="{}" stroke-width="{width}" stroke-linejoin="round" stroke-opacity="0.9" points="{}"/></g>"##,
                esc(label),
                colour(i),
                self.steps(admitted)
            );
        }

        // Limits: one grey line when shared, else one per policy.
        let shared = s.limits.windows(2).all(|w| w[0] == w[1]);
        let limits: Vec<(f64, &str)> = if shared {
            s.limits
                .first()
                .map(|&l| (l, "#333333"))
                .into_iter()
                .collect()
        } else {
            s.limits
                .iter()
                .enumerate()
                .map(|(i, &l)| (l, colour(i)))
                .collect()
        };
        for (limit, stroke) in &limits {
            let y = self.y(*limit);
            let _ = writeln!(
                svg,
                r##"<line class="limit" x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}" stroke="{stroke}" stroke-width="1.5" stroke-dasharray="6 4"/>"##
            );
        }

        self.legend(&mut svg, shared, what, &bucket);
        svg.push_str("</svg>\n");
        svg
    }

    /// Grid lines, axes, ticks and axis titles.
    fn grid(&self, svg: &mut String, what: &str, bucket: &str) {
        let s = self.series;
        svg.push_str(r##"<g class="axes" stroke="#cccccc" stroke-width="1">"##);
        svg.push('\n');
        // y ticks.
        let ticks = (self.y_max / self.y_step).round() as usize;
        for k in 0..=ticks {
            let value = self.y_step * k as f64;
            let y = self.y(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}"/><text x="{:.1}" y="{:.1}" text-anchor="end" stroke="none" fill="#333333">{}</text>"##,
                LEFT - 8.0,
                y + 4.0,
                number(value)
            );
        }
        // x ticks, in round steps of the time unit.
        let (unit, unit_name) = self.time_unit;
        let span = s.bucket.as_secs_f64() * s.offered.len() as f64 / unit;
        let step = nice_step(span / 8.0);
        let origin = s.origin.as_duration().as_secs_f64() / unit;
        let mut k = 0.0;
        while k * step <= span + step * 1e-9 {
            let x = LEFT + (RIGHT - LEFT) * (k * step / span.max(f64::MIN_POSITIVE));
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{BOTTOM}" x2="{x:.1}" y2="{:.1}"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" stroke="none" fill="#333333">{}</text>"##,
                BOTTOM + 5.0,
                BOTTOM + 20.0,
                number(k * step)
            );
            k += 1.0;
        }
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{BOTTOM}" x2="{RIGHT}" y2="{BOTTOM}" stroke="#333333"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{BOTTOM}" stroke="#333333"/>"##
        );
        svg.push_str("</g>\n");
        let from = if origin == 0.0 {
            String::new()
        } else {
            format!(" after {}s", seconds(s.origin.as_duration()))
        };
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333333">time ({unit_name}{})</text>"##,
            (LEFT + RIGHT) / 2.0,
            BOTTOM + 45.0,
            esc(&from)
        );
        let _ = writeln!(
            svg,
            r##"<text transform="translate(22,{:.1}) rotate(-90)" text-anchor="middle" fill="#333333">{what} per {bucket}s</text>"##,
            (TOP + BOTTOM) / 2.0
        );
    }

    /// The legend, right of the plot: offered, each policy with its totals,
    /// and the limit.
    fn legend(&self, svg: &mut String, shared: bool, what: &str, bucket: &str) {
        let s = self.series;
        let x = RIGHT + 25.0;
        let mut y = TOP + 6.0;
        svg.push_str("<g class=\"legend\">\n");
        let _ = writeln!(
            svg,
            r##"<rect x="{x}" y="{:.1}" width="18" height="10" fill="#d5dbe3" stroke="#aab4c0"/><text x="{:.1}" y="{:.1}">offered: {} {what}</text>"##,
            y - 9.0,
            x + 26.0,
            y,
            s.offered_units
        );
        y += 26.0;
        for (i, label) in s.labels.iter().enumerate() {
            let admitted: u64 = s.admitted[i].iter().sum();
            let share = if s.offered_units == 0 {
                0.0
            } else {
                100.0 * admitted as f64 / s.offered_units as f64
            };
            // Say when a line lies on an earlier one ("= token_bucket").
            let same = (0..i)
                .find(|&j| s.admitted[j] == s.admitted[i])
                .map(|j| {
                    let kind = s.labels[j].split(':').next().unwrap_or("");
                    format!(" = {kind}")
                })
                .unwrap_or_default();
            let _ = writeln!(
                svg,
                r##"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text><text x="{:.1}" y="{:.1}" fill="#555555">admitted {admitted} ({share:.1}%){}</text>"##,
                y - 4.0,
                x + 18.0,
                y - 4.0,
                colour(i),
                x + 26.0,
                y,
                esc(label),
                x + 26.0,
                y + 15.0,
                esc(&same)
            );
            y += 38.0;
        }
        let limit = if shared {
            format!(
                "limit: {} {what} per {bucket}s",
                number(s.limits.first().copied().unwrap_or(0.0))
            )
        } else {
            "limits (dashed, per policy)".to_owned()
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333333" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}">{}</text>"##,
            y - 4.0,
            x + 18.0,
            y - 4.0,
            x + 26.0,
            y,
            esc(&limit)
        );
        svg.push_str("</g>\n");
    }
}

/// `text` cut to `max` characters, with "…" where it was cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(max.saturating_sub(1)).collect();
        short.push('…');
        short
    }
}

fn colour(i: usize) -> &'static str {
    COLOURS[i % COLOURS.len()]
}

/// A round step (1, 2 or 5 times a power of ten) of at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&step| step >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// A tick value: whole numbers without decimals, others with up to three.
fn number(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// `text` escaped for XML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{FFFD}'),
            '\u{FFFE}' | '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}
