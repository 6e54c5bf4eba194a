//! The part of `/metrics` about running the service: configuration
//! reloads and the store's latency per operation (the table in
//! [`metrics`](super::metrics) lists them).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::engine::{Engine, LatencyHistogram, ReloadSnapshot, StoreOperation};

/// What one scrape reports of reloads and store latencies.
#[derive(Debug)]
pub(super) struct Operations {
    reloads: ReloadSnapshot,
    /// `None` for the in-memory store, whose calls are not timed.
    store_latency: Option<(&'static str, Vec<(StoreOperation, LatencyHistogram)>)>,
}

impl Operations {
    /// `engine`'s counters now.
    pub(super) fn read(engine: &Engine) -> Operations {
        let store = engine.store().kind();
        Operations {
            reloads: engine.reload_stats().snapshot(),
            store_latency: (store != "memory").then(|| (store, engine.store_latency().snapshot())),
        }
    }
}

impl Collector for Operations {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let reloads = &self.reloads;
        let mut metric = encoder.encode_descriptor(
            "ratekeeper_config_reloads",
            "Configuration reloads applied, and refused (the running configuration stayed).",
            None,
            MetricType::Counter,
        )?;
        for (result, value) in [("applied", reloads.applied), ("refused", reloads.refused)] {
            metric
                .encode_family(&[("result", result)])?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
        encoder
            .encode_descriptor(
                "ratekeeper_config_last_reload_successful",
                "1 when the last reload (or the start) put its configuration in force, 0 when it was refused.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&i64::from(reloads.last_successful))?;
        encoder
            .encode_descriptor(
                "ratekeeper_config_last_reload_success_timestamp_seconds",
                "When the configuration in force was loaded, in seconds since the Unix epoch.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&reloads.last_success_seconds)?;
        if let Some((store, operations)) = &self.store_latency {
            let mut metric = encoder.encode_descriptor(
                "ratekeeper_store_operation_duration_seconds",
                "Time the store took to answer one call, by operation (failed calls included).",
                None,
                MetricType::Histogram,
            )?;
            for (operation, latency) in operations {
                metric
                    .encode_family(&[("store", *store), ("operation", operation.as_str())])?
                    .encode_histogram::<NoLabelSet>(
                        latency.sum_seconds,
                        latency.count,
                        &latency.buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }
}
