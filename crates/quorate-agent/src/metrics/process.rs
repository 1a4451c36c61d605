//! etcd-backup-restore's `etcdbr_network_{transmitted,received}_bytes`: the bytes of the pod's
//! network interfaces, as etcd-backup-restore reads them, from `/proc` on each scrape. The
//! `process_*` metrics come from `quorate-metrics`, shared with the operator.
//!
//! A value `/proc` does not give is left out rather than reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

/// Reads `/proc/self/net/dev` on each scrape.
#[derive(Debug, Default)]
pub struct NetworkCollector;

impl Collector for NetworkCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some((rx, tx)) = quorate_metrics::process::network_now() else {
            return Ok(());
        };
        for (name, help, v) in [
            (
                "etcdbr_network_transmitted_bytes",
                "Number of bytes transmitted over network.",
                tx,
            ),
            (
                "etcdbr_network_received_bytes",
                "Number of bytes received over network.",
                rx,
            ),
        ] {
            let c = ConstCounter::new(v);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        Ok(())
    }
}
