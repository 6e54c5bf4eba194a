//! The OTLP trace exporter, on a thread of its own.
//!
//! The exporter runs on a single-threaded tokio runtime in a thread named
//! `rk-otel`: its batches, connections and retries never take a worker
//! from the decisions, and it outlives the service's runtime long enough
//! to flush at shutdown (which happens after that runtime has stopped).

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::runtime::Tokio;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tokio::sync::oneshot;

use super::{OtlpProtocol, OtlpSettings, TelemetryError};

/// How long [`Telemetry::shutdown`](super::Telemetry::shutdown) waits for
/// the spans still queued to be exported before giving up on them.
pub(crate) const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// The running exporter: its tracer provider and its thread.
#[derive(Debug)]
pub(super) struct Exporter {
    provider: SdkTracerProvider,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Starts the exporter `settings` describe (the endpoint and the rest
    /// are read from the environment by `opentelemetry-otlp`).
    pub(super) fn start(settings: &OtlpSettings) -> Result<Exporter, TelemetryError> {
        let settings = settings.clone();
        let (ready, started) = mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("rk-otel".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = ready.send(Err(TelemetryError::Thread(error)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    // The exporter's connections and the batch task are
                    // made here, so that they belong to this runtime.
                    let built = provider(&settings);
                    let running = built.is_ok();
                    let _ = ready.send(built);
                    if running {
                        // Until the provider has been shut down.
                        let _ = stopped.await;
                    }
                });
            })
            .map_err(TelemetryError::Thread)?;
        let provider = match started.recv() {
            Ok(result) => result?,
            Err(mpsc::RecvError) => {
                let _ = thread.join();
                return Err(TelemetryError::Thread(std::io::Error::other(
                    "the exporter's thread stopped while starting",
                )));
            }
        };
        Ok(Exporter {
            provider,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The provider whose tracer the tracing layer uses.
    pub(super) fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Exports what is queued, waiting at most [`SHUTDOWN_LIMIT`], then
    /// stops the thread. Must not be called from an async runtime's thread
    /// (it blocks); `serve` and `proxy` call it after theirs has stopped.
    pub(super) fn shutdown(&mut self) {
        let Some(stop) = self.stop.take() else {
            return;
        };
        let provider = self.provider.clone();
        let (done, finished) = mpsc::channel();
        // The provider's shutdown has no deadline of its own with this
        // processor: a thread waits for it, so that this wait can end.
        let waiter = std::thread::Builder::new()
            .name("rk-otel-flush".to_owned())
            .spawn(move || {
                let _ = done.send(provider.shutdown());
            });
        let flushed = match waiter {
            Ok(_) => finished.recv_timeout(SHUTDOWN_LIMIT),
            Err(_) => Err(mpsc::RecvTimeoutError::Disconnected),
        };
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the last traces could not be exported"),
            Err(_) => tracing::warn!(
                limit = ?SHUTDOWN_LIMIT,
                "the last traces were not exported in time; they are dropped"
            ),
        }
        let _ = stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The tracer provider: the exporter for `settings`, batched on this
/// thread's runtime, with the resource of the environment.
fn provider(settings: &OtlpSettings) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = match settings.protocol {
        OtlpProtocol::Grpc => SpanExporter::builder().with_tonic().build(),
        OtlpProtocol::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build(),
    }
    .map_err(TelemetryError::Exporter)?;
    let mut resource = Resource::builder();
    if let Some(name) = settings.default_service_name {
        resource = resource.with_service_name(name);
    }
    let processor = BatchSpanProcessor::builder(exporter, Tokio).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build())
}
