//! `ratekeeper simulate`: policies run offline over a trace or a pattern.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Rate limiting as a service.

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "pattern"])))]
pub(super) struct SimulateArgs {
    /// A policy, RATE or KIND:RATE, such as "100/minute burst 20" (a token
    /// bucket, the service's default) or
    /// "sliding_log:100/minute"; KIND is token_bucket, gcra, fixed_window,
    /// sliding_log or sliding_window. Repeat to put several on one chart.
    #[arg(long = "policy", required = true, value_name = "[KIND:]RATE")]
    policies: Vec<String>,
    /// Run each --policy given without a KIND under all five kinds (the
    /// window kinds without the burst), on one chart.
    #[arg(long)]
    compare: bool,
    /// A trace file: one request a line, "TIME" or "TIME,COST", TIME in seconds
    /// ("1.5") or milliseconds ("1500ms"), "#" comments.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// A request pattern, such as "steady:50/s,burst:200@10s"; phases
    /// steady:R/U, ramp:A..B/U (each optionally "for D"), idle:D, burst:N
    /// and burst:N@T.
    #[arg(long, value_name = "SPEC")]
    pattern: Option<String>,
    /// Write the decisions as CSV here ("-" for stdout; the summary then
    /// goes to stderr).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the chart as SVG here.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The chart's bucket width, such as "1s" or "250ms"; chosen from the
    /// span when left out.
    #[arg(long, value_name = "DURATION")]
    bucket: Option<String>,
}

/// `ratekeeper simulate`: exit 2 on bad input, 1 when an output cannot be
/// written.
pub(super) fn simulate(args: &SimulateArgs) -> ExitCode {
    use crate::simulate::{self, Pattern, SimPolicy, SimulationOptions};
    use ratekeeper::duration::parse as parse_duration;

    fn bad(message: impl std::fmt::Display) -> ExitCode {
        eprintln!("error: {message}");
        ExitCode::from(2)
    }
    // A caret under the column an error names.
    fn caret(text: &str, column: usize) -> String {
        format!("  {text}\n  {}^", " ".repeat(column.saturating_sub(1)))
    }

    let mut policies: Vec<SimPolicy> = Vec::new();
    for text in &args.policies {
        let has_kind = text.contains(':');
        let policy = match text.parse::<SimPolicy>() {
            Ok(policy) => policy,
            Err(error) => return bad(format_args!("--policy {text:?}: {error}")),
        };
        let expanded = if args.compare && !has_kind {
            // The five kinds refuse nothing that GCRA took, but be safe.
            match SimPolicy::compare(policy.rate()) {
                Ok(all) => all,
                Err(error) => return bad(format_args!("--policy {text:?}: {error}")),
            }
        } else {
            vec![policy]
        };
        for policy in expanded {
            if !policies.contains(&policy) {
                policies.push(policy);
            }
        }
    }

    let (requests, source) = match (&args.trace, &args.pattern) {
        (Some(path), _) => {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(error) => return bad(format_args!("cannot read {}: {error}", path.display())),
            };
            match simulate::parse_trace(&bytes) {
                Ok(requests) => (requests, format!("trace {}", path.display())),
                Err(error) => return bad(format_args!("{}: {error}", path.display())),
            }
        }
        (None, Some(text)) => match text.parse::<Pattern>() {
            Ok(pattern) => (pattern.requests(), format!("pattern {pattern}")),
            Err(error) => {
                return bad(format_args!(
                    "--pattern: {error}\n{}",
                    caret(text, error.column)
                ))
            }
        },
        (None, None) => return bad("give --trace FILE or --pattern SPEC"),
    };
    if requests.is_empty() {
        return bad(format_args!("the {source} has no requests"));
    }

    let mut options = SimulationOptions::default().with_progress(true);
    if let Some(text) = &args.bucket {
        match parse_duration(text) {
            Ok(bucket) if !bucket.is_zero() => options = options.with_bucket(bucket),
            Ok(_) => return bad("--bucket must be longer than 0"),
            Err(error) => return bad(format_args!("--bucket: {error}")),
        }
    }

    // `--csv -` writes the CSV to stdout, and the summary to stderr.
    let csv_to_stdout = args.csv.as_deref() == Some(Path::new("-"));
    let mut csv_out: Option<Box<dyn std::io::Write>> = match &args.csv {
        Some(_) if csv_to_stdout => Some(Box::new(std::io::stdout().lock())),
        Some(path) => match std::fs::File::create(path) {
            Ok(file) => Some(Box::new(file)),
            Err(error) => {
                eprintln!("error: cannot create {}: {error}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let csv = csv_out.as_mut().map(|out| out as &mut dyn std::io::Write);
    let report = match simulate::run(&policies, &requests, &options, csv) {
        Ok(report) => report,
        Err(error @ simulate::SimulateError::Csv(_)) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
        Err(error) => return bad(error),
    };
    drop(csv_out);
    if let Some(path) = &args.svg {
        let svg = report
            .series()
            .to_svg(&format!("ratekeeper simulate: {source}"));
        if let Err(error) = std::fs::write(path, svg) {
            eprintln!("error: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let mut out: Box<dyn std::io::Write> = if csv_to_stdout {
        Box::new(std::io::stderr().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    let _ = write!(out, "{}", report.summary());
    for (what, path) in [("decisions", &args.csv), ("chart", &args.svg)] {
        if let Some(path) = path.as_deref().filter(|p| *p != Path::new("-")) {
            let _ = writeln!(out, "wrote the {what} to {}", path.display());
        }
    }
    ExitCode::SUCCESS
}
