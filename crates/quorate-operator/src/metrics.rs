//! The operator's Prometheus metrics: reconciles by result, errors by code, pass duration, and
//! clusters by condition, plus its process (`process_*`) and build (`quorate_build_info`) as
//! the agent serves them, at `/metrics` in the OpenMetrics text format.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of a reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `succeeded`, `requeue`, `error`, `suspended`, `not_run`, `deleting`, `deleted`.
    pub result: String,
}

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    /// The `lastErrors` code.
    pub code: String,
}

/// Labels of the clusters-by-condition gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    /// Condition type (`Ready`, `Quorate`, ...).
    pub condition: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// Per cluster (`namespace/name`), its conditions as (type, status).
type ClusterConditions = BTreeMap<String, Vec<(String, String)>>;

/// All metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<ResultLabel, Counter>,
    errors: Family<CodeLabel, Counter>,
    duration: Histogram,
    clusters: Family<ConditionLabels, Gauge>,
    /// Every cluster's conditions, from which `clusters` is recounted.
    conditions: Arc<Mutex<ClusterConditions>>,
}

impl Default for Metrics {
    fn default() -> Self {
        // `process_*` and `quorate_build_info` at the top, as the agent serves them; the
        // operator's own metrics under `quorate_operator_`.
        let mut root = Registry::default();
        quorate_metrics::register_common(&mut root, "operator");
        let registry = root.sub_registry_with_prefix("quorate_operator");
        let reconciles = Family::<ResultLabel, Counter>::default();
        registry.register(
            "reconciles",
            "Reconcile passes by result",
            reconciles.clone(),
        );
        let errors = Family::<CodeLabel, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconcile errors by lastErrors code",
            errors.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile pass",
            duration.clone(),
        );
        let clusters = Family::<ConditionLabels, Gauge>::default();
        registry.register(
            "clusters",
            "Etcd clusters by condition and status",
            clusters.clone(),
        );
        // Every result and error code at zero, so `increase()` sees the first one.
        for result in [
            "succeeded",
            "requeue",
            "error",
            "suspended",
            "not_run",
            "deleting",
            "deleted",
        ] {
            let _ = reconciles.get_or_create(&ResultLabel {
                result: result.to_string(),
            });
        }
        for code in quorate_core::last_operation::ErrorCode::ALL {
            let _ = errors.get_or_create(&CodeLabel {
                code: code.as_str().to_string(),
            });
        }
        Metrics {
            registry: Arc::new(root),
            reconciles,
            errors,
            duration,
            clusters,
            conditions: Arc::default(),
        }
    }
}

impl Metrics {
    /// Counts one pass with its result and duration.
    pub fn pass(&self, result: &str, took: Duration) {
        self.reconciles
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// Counts one error by code.
    pub fn error(&self, code: &str) {
        self.errors
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }

    /// Records a cluster's conditions (`None`: the cluster is gone).
    pub fn cluster_conditions(&self, cluster: &str, conditions: Option<Vec<(String, String)>>) {
        let Ok(mut all) = self.conditions.lock() else {
            return;
        };
        match conditions {
            Some(c) => all.insert(cluster.to_string(), c),
            None => all.remove(cluster),
        };
        let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
        for (condition, status) in all.values().flatten() {
            *counts
                .entry((condition.clone(), status.clone()))
                .or_default() += 1;
        }
        self.clusters.clear();
        for ((condition, status), n) in counts {
            self.clusters
                .get_or_create(&ConditionLabels { condition, status })
                .set(n);
        }
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_are_counted_by_condition() {
        let m = Metrics::default();
        let ready = |s: &str| Some(vec![("Ready".to_string(), s.to_string())]);
        m.cluster_conditions("a/x", ready("True"));
        m.cluster_conditions("a/y", ready("True"));
        m.cluster_conditions("b/z", ready("False"));
        m.cluster_conditions("a/y", None);
        m.pass("succeeded", Duration::from_millis(20));
        m.error("ERR_SYNC_STATEFULSET");
        let text = m.encode();
        assert!(
            text.contains(r#"quorate_operator_clusters{condition="Ready",status="True"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"quorate_operator_clusters{condition="Ready",status="False"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"quorate_operator_reconciles_total{result="succeeded"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"quorate_operator_reconcile_errors_total{code="ERR_SYNC_STATEFULSET"} 1"#
            ),
            "{text}"
        );
        // The process and the build, unprefixed, as the agent serves them.
        for series in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "quorate_build_info{version=\"",
        ] {
            assert!(text.contains(series), "{series} in:\n{text}");
        }
        assert!(!text.contains("quorate_operator_process"), "{text}");
    }
}
