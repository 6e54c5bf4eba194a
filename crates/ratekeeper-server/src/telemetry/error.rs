//! Why telemetry could not start.

use thiserror::Error;

/// Why logging or the trace exporter could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub(crate) enum TelemetryError {
    /// `OTEL_TRACES_EXPORTER` names an exporter this service does not have.
    #[error("OTEL_TRACES_EXPORTER={0:?} is not supported: use otlp or none")]
    UnsupportedExporter(String),
    /// An `OTEL_EXPORTER_OTLP_*PROTOCOL` variable names another protocol.
    #[error("{variable}={value:?} is not supported: use grpc or http/protobuf")]
    UnsupportedProtocol {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// An `https://` endpoint for the `http/protobuf` exporter, which
    /// speaks plain HTTP.
    #[error("{variable}={url:?}: https endpoints need OTEL_EXPORTER_OTLP_PROTOCOL=grpc (the http/protobuf exporter speaks plain http)")]
    HttpsOverHttp {
        /// The variable.
        variable: &'static str,
        /// Its value, without credentials.
        url: String,
    },
    /// The OTLP exporter refused its settings (an endpoint that is not a
    /// URL, a header that is not one).
    #[error("cannot set up the OTLP trace exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// The exporter's thread or its runtime could not start.
    #[error("cannot start the trace exporter's thread")]
    Thread(#[source] std::io::Error),
}
