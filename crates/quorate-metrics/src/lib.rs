//! Prometheus pieces every quorate program serves the same way, so one dashboard reads the
//! agents and the operator alike: the process metrics (`process_*`, from `/proc`) and the
//! build-info metric (`quorate_build_info{version}`).

pub mod process;

use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Registers `quorate_build_info{version="<crate version>"} 1` and the `process_*` collector
/// at the top of `registry` (no prefix: their names are the conventional ones).
pub fn register_common(registry: &mut Registry, program: &str) {
    registry.register(
        "quorate_build",
        format!("The quorate build this {program} runs (always 1)"),
        Info::new(vec![(
            "version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )]),
    );
    registry.register_collector(Box::new(process::ProcessCollector));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_and_process_metrics_are_encoded() {
        let mut registry = Registry::default();
        register_common(&mut registry, "test");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for series in [
            "quorate_build_info{version=\"",
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(series), "{series} in:\n{text}");
        }
        assert!(!text.contains("etcdbr_"), "{text}");
    }
}
