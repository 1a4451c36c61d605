//! The operator's Prometheus metrics: reconciles by result, errors by code, pass duration, and
//! clusters by condition, plus its process (`process_*`) and build (`quorate_build_info`) as
//! the agent serves them, at `/metrics` in the OpenMetrics text format.

use std::collections::HashMap;
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

/// Per cluster (`namespace/name`), its conditions as (type, status), and how many clusters
/// have each (type, status): what `clusters` shows.
#[derive(Debug, Default)]
struct ConditionCounts {
    clusters: HashMap<String, Vec<(String, String)>>,
    counts: HashMap<(String, String), i64>,
}

/// All metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<ResultLabel, Counter>,
    errors: Family<CodeLabel, Counter>,
    duration: Histogram,
    clusters: Family<ConditionLabels, Gauge>,
    /// Every cluster's conditions and their counts, from which `clusters` is kept.
    conditions: Arc<Mutex<ConditionCounts>>,
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

    /// Records a cluster's conditions (`None`: the cluster is gone). Every pass of every
    /// cluster calls this, so it only moves that cluster's old conditions out of the counts and
    /// its new ones in: recounting every cluster, as it did, made each pass's cost grow with
    /// the number of clusters.
    pub fn cluster_conditions(&self, cluster: &str, conditions: Option<Vec<(String, String)>>) {
        let Ok(mut state) = self.conditions.lock() else {
            return;
        };
        let ConditionCounts { clusters, counts } = &mut *state;
        if clusters.get(cluster) == conditions.as_ref() {
            return;
        }
        let new = conditions.clone().unwrap_or_default();
        let old = match conditions {
            Some(c) => clusters.insert(cluster.to_string(), c),
            None => clusters.remove(cluster),
        }
        .unwrap_or_default();
        let moves = old.into_iter().map(|k| (k, -1));
        for (key, delta) in moves.chain(new.into_iter().map(|k| (k, 1))) {
            let n = counts.entry(key.clone()).or_default();
            *n += delta;
            let n = *n;
            let (condition, status) = key;
            let labels = ConditionLabels { condition, status };
            if n > 0 {
                self.clusters.get_or_create(&labels).set(n);
            } else {
                counts.remove(&(labels.condition.clone(), labels.status.clone()));
                self.clusters.remove(&labels);
            }
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
        m.cluster_conditions("a/y", None);
        m.cluster_conditions("c/w", ready("Unknown"));
        m.cluster_conditions("c/w", ready("Unknown"));
        m.cluster_conditions("c/w", ready("False"));
        m.pass("succeeded", Duration::from_millis(20));
        m.error("ERR_SYNC_STATEFULSET");
        let text = m.encode();
        assert!(
            text.contains(r#"quorate_operator_clusters{condition="Ready",status="True"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"quorate_operator_clusters{condition="Ready",status="False"} 2"#),
            "{text}"
        );
        // A status no cluster has any more is not shown as 0, it is gone.
        assert!(!text.contains(r#"status="Unknown""#), "{text}");
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
