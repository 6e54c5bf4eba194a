//! What the service tells about itself besides `/metrics`: its logs, as
//! text or JSON lines, and OpenTelemetry traces of its decisions, exported
//! over OTLP.
//!
//! # Logs
//!
//! [`init`] logs to stderr at the level `RUST_LOG` picks (`info` by
//! default), as text or, with [`LogFormat::Json`] (`--log-format json`, or
//! `RATEKEEPER_LOG_FORMAT=json`), as one JSON object a line: `timestamp`,
//! `level`, `target`, `fields` (with `message`), and `span` / `spans` when
//! inside a decision span.
//!
//! # Traces
//!
//! Off by default. The exporter is on when the environment asks for it in
//! the OpenTelemetry way ([`OtlpSettings::from_vars`] decides):
//!
//! | variable | effect |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` | set and not empty: traces are exported there (the first is the full URL; HTTP appends `/v1/traces` to the second) |
//! | `OTEL_TRACES_EXPORTER` | `otlp` turns the exporter on even without an endpoint (to `localhost:4317` for gRPC, `localhost:4318` for HTTP); `none` keeps it off; anything else is refused at start |
//! | `OTEL_SDK_DISABLED` | `true` keeps it off, whatever else is set |
//! | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf` (the default, as the specification says) or `grpc`; `http/json` is refused at start |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource; the service is `ratekeeper` unless they name it |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | the sampler (`parentbased_always_on` by default: a caller's sampled flag is followed) |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT`, `_HEADERS`, `_COMPRESSION` and their `_TRACES_` forms, `OTEL_BSP_*` | as the specification says |
//!
//! gRPC endpoints may be `https://` (rustls, the system's roots); HTTP
//! endpoints are plain `http://` (a collector beside the service), and an
//! `https://` one is refused at start.
//!
//! Each decision (the engine's `Engine::check`, which hands this module
//! plain data: the limits' names and costs, and what each decided) is one
//! span named `ratekeeper.decide`, of kind server, with these attributes:
//!
//! | attribute | value |
//! |---|---|
//! | `ratekeeper.door` | `http`, `nginx` (`/v1/auth`), `grpc` (Envoy), `proxy`, or `unknown` for a decision not made for a door |
//! | `ratekeeper.store` | `memory`, `sqlite` or `redis` |
//! | `ratekeeper.limits` | the limits checked, in order (string array) |
//! | `ratekeeper.costs` | what the request cost under each (int array) |
//! | `ratekeeper.decision` | `allowed`, `denied` or `error` (the store failed; the span's status is then an error with the cause) |
//! | `ratekeeper.denied_by` | the limits, not in shadow mode, that refused it (string array, empty when allowed) |
//! | `ratekeeper.shadow_denied_by` | the shadow limits that would have refused it |
//! | `ratekeeper.saturated` | the limits whose store had no room for the key |
//!
//! Keys are never exported: they are clients' addresses and API keys.
//!
//! The trace context comes from the request: a W3C `traceparent` (and
//! `tracestate`) header on the HTTP doors, the same entries of the gRPC
//! metadata at the Envoy door. The decision span is then a child of the
//! caller's span, in the caller's trace; without one it starts a trace.
//!
//! Spans are handed to a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, spans
//! dropped when full) and exported in batches from a thread of their own,
//! so a slow collector never holds a decision up. [`Telemetry::shutdown`]
//! (on the way out of `serve` and `proxy`) exports what is queued, waiting
//! at most [`SHUTDOWN_LIMIT`].
//!
//! With the exporter off, a decision costs one relaxed atomic load more:
//! no span is made, nothing is allocated or formatted.

mod decision;
mod error;
mod export;
mod logging;
mod propagation;
mod settings;

use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) use error::TelemetryError;
pub(crate) use logging::{init, LogFormat, Telemetry};
pub(crate) use settings::{OtlpProtocol, OtlpSettings};

pub(crate) use decision::{current_span, decision_span, record_verdict, Decided, LimitTrace};
pub(crate) use propagation::{request_trace, scope_request, RequestScoped};

/// Whether decisions are traced: set once, when the exporter starts.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces (see the module's docs): the
/// decision path asks this before doing any tracing work.
pub(crate) fn is_exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}
