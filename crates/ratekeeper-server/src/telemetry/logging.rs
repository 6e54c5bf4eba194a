//! The process's tracing subscriber: logs to stderr as text or JSON, and
//! the OpenTelemetry layer when traces are exported.

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, Registry};

use super::export::Exporter;
use super::{OtlpSettings, TelemetryError, EXPORTING};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub(crate) enum LogFormat {
    /// Human-readable lines (colored on a terminal).
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields`
    /// (`message` and the event's fields), and the spans it is in.
    Json,
}

/// What the default filter logs when `RUST_LOG` is not set: `info`, only
/// warnings from the OpenTelemetry crates (they report each batch at
/// `info`), and only errors from h2, which warns once per connection it
/// closes for abuse (a rapid reset's thousands a second): the listeners
/// count those and log one line per interval (`listen/errors.rs`).
const DEFAULT_FILTER: &str = "info,opentelemetry=warn,opentelemetry_sdk=warn,h2=error";

/// The telemetry set up by [`init`]: keep it while the process serves,
/// then [`shutdown`](Telemetry::shutdown) it (dropping it does the same) to
/// export the traces still queued.
#[derive(Debug)]
#[must_use = "dropping it stops the trace export"]
pub(crate) struct Telemetry {
    exporter: Option<Exporter>,
}

impl Telemetry {
    /// Exports the traces still queued (within
    /// [`SHUTDOWN_LIMIT`](super::export::SHUTDOWN_LIMIT)) and stops the exporter.
    /// Blocks: call it outside any async runtime.
    pub(crate) fn shutdown(mut self) {
        if let Some(mut exporter) = self.exporter.take() {
            exporter.shutdown();
        }
    }
}

/// Sets up this process's logs (to stderr, in `format`, at the level
/// `RUST_LOG` picks) and, when the `OTEL_*` environment turns it on, the
/// trace exporter (see the [module's docs](super)).
///
/// Logging can be set up once per process: later calls keep the first
/// subscriber (and start no exporter). An error is a trace setting the
/// service does not support, or an exporter that could not start; logs
/// are then not set up either.
pub(crate) fn init(format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let settings = OtlpSettings::from_env()?;
    let exporter = match &settings {
        Some(settings) => Some(Exporter::start(settings)?),
        None => None,
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => fmt.json().with_ansi(false).boxed(),
    };
    // Only the service's own spans (the decisions) go to the collector,
    // whatever RUST_LOG says of the logs.
    let traces = exporter.as_ref().map(|exporter| {
        let tracer = exporter.provider().tracer("ratekeeper");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(
                Targets::new()
                    .with_target("ratekeeper", LevelFilter::INFO)
                    .with_default(LevelFilter::OFF),
            )
    });
    let installed = Registry::default()
        .with(fmt.with_filter(filter))
        .with(traces)
        .try_init()
        .is_ok();
    let exporter = exporter.filter(|_| installed);
    if let (Some(_), Some(settings)) = (&exporter, &settings) {
        EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
        // Where to, as set (without a URL's credentials); the exporter
        // adds the defaults and /v1/traces itself.
        let endpoint = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
        })
        .map_or_else(
            || "the default".to_owned(),
            |url| crate::config::redact_url(&url),
        );
        tracing::info!(protocol = settings.protocol.as_str(), %endpoint, "exporting traces over OTLP");
    }
    Ok(Telemetry { exporter })
}
