//! The agent's Prometheus metrics on `/metrics`, under etcd-backup-restore's names and labels
//! where it has the metric (so Gardener's dashboards and alerts read them unchanged), plus
//! quorate's own under `quorate_`:
//!
//! - `etcdbr_snapshot_duration_seconds{kind,succeeded}`, `etcdbr_snapshot_latest_revision{kind}`,
//!   `etcdbr_snapshot_latest_timestamp{kind}` (kind `Full` or `Incr`, as BR writes them);
//! - `etcdbr_snapstore_latest_deltas_total`, `etcdbr_snapstore_latest_deltas_revisions_total`:
//!   the deltas a restore would replay after the newest full snapshot;
//! - `etcdbr_defragmentation_duration_seconds{succeeded,endpoint}` (endpoint: the member);
//! - `quorate_defragmentation_db_size_bytes{when}`: this member's database before and after its
//!   last defragmentation;
//! - `etcdbr_snapshot_required{kind}`: `Full` 1 while the backup leader owes a full snapshot
//!   (none yet, or the last is older than its schedule allows), `Incr` 1 while a delta period
//!   passed without the backups becoming current (a failed or not yet taken delta snapshot);
//! - `etcdbr_snapshotter_failure{error}` (a counter without `_total`, as BR names it): failed
//!   snapshots and store operations, by what failed (`etcd`, `store`, `encryption`, ...);
//! - `etcdbr_snapshot_gc_total{kind,succeeded}`: snapshots garbage-collected from the bucket;
//! - `etcdbr_is_learner_count_total{succeeded}`, `etcdbr_add_learner_duration_seconds`,
//!   `etcdbr_member_promote_duration_seconds`, `etcdbr_member_remove_duration_seconds`
//!   (`succeeded`): the membership changes this agent carried out (in quorate the leader's agent
//!   adds and removes members, a learner's agent promotes itself);
//! - `etcdbr_network_{transmitted,received}_bytes` ([`process`]), and `process_*` and
//!   `quorate_build_info{version}` (`quorate_metrics`, as the operator serves them);
//! - `etcdbr_restoration_duration_seconds{restore,succeeded}` (`single_node` or `single_member`
//!   as BR labels them) and `etcdbr_validation_duration_seconds{succeeded}` (the data check
//!   before etcd starts);
//! - `quorate_backup_current_timestamp_seconds{kind}`: when the backups were last current
//!   through etcd's head by a full snapshot (`Full`) or a delta period (`Incr`, also when
//!   nothing changed), with `quorate_backup_full_snapshot_window_seconds` and
//!   `quorate_backup_delta_snapshot_period_seconds`, what the schedule allows (for alerts);
//! - `quorate_agent_requests_refused_total{path}`: requests without the cluster's bearer token;
//! - `quorate_certificate_expiry_timestamp_seconds{file}`;
//! - the member's state ([`member`]).
//!
//! Every series carries `etcd` (the cluster) and `member` (this member), so rules aggregate by
//! cluster without scrape relabelling. Snapshot and backlog metrics move only on the member that
//! leads backups.

pub mod exposition;
pub mod member;
pub mod process;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use quorate_core::maintenance::backup_compaction::DeltaBacklog;
use quorate_core::maintenance::defrag::DefragOutcome;

/// `kind` and `succeeded` of a snapshot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotLabels {
    /// `Full` or `Incr`.
    pub kind: String,
    /// `true` or `false`.
    pub succeeded: String,
}

/// `kind` of a snapshot gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `Full` or `Incr`.
    pub kind: String,
}

/// `succeeded` and `endpoint` of a defragmentation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DefragLabels {
    /// `true` or `false`.
    pub succeeded: String,
    /// The member defragmented.
    pub endpoint: String,
}

/// `path` of a refused request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    /// The request's path.
    pub path: String,
}

/// `file` of a certificate.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FileLabel {
    /// The certificate file.
    pub file: String,
}

/// `when` of a database size: `before` or `after`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhenLabel {
    /// `before` or `after`.
    pub when: String,
}

/// `restore` and `succeeded` of a restoration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    /// `single_node` (the whole cluster from the bucket) or `single_member`.
    pub restore: String,
    /// `true` or `false`.
    pub succeeded: String,
}

/// `kind` and `succeeded` of a garbage-collected snapshot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GcLabels {
    /// `Full`, `Incr` or `Chunk`.
    pub kind: String,
    /// `true` or `false`.
    pub succeeded: String,
}

/// `succeeded` alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SucceededLabel {
    /// `true` or `false`.
    pub succeeded: String,
}

/// `error` of a snapshotter failure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    /// What failed: `etcd`, `store` or `encryption`.
    pub error: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_buckets() -> Histogram {
    // 10 ms .. about 20 min.
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

/// Every metric of one agent; cheap to clone.
#[derive(Clone, Debug)]
pub struct AgentMetrics {
    registry: Arc<Registry>,
    snapshot_duration: Histograms<SnapshotLabels>,
    latest_revision: Family<KindLabel, Gauge>,
    latest_timestamp: Family<KindLabel, Gauge>,
    deltas: Gauge,
    delta_revisions: Gauge,
    defrag_duration: Histograms<DefragLabels>,
    defrag_size: Family<WhenLabel, Gauge>,
    refused: Family<PathLabel, Counter>,
    certificate_expiry: Family<FileLabel, Gauge>,
    snapshot_required: Family<KindLabel, Gauge>,
    failures: Family<ErrorLabel, Counter>,
    restoration: Histograms<RestoreLabels>,
    validation: Histograms<SucceededLabel>,
    backup_current: Family<KindLabel, Gauge>,
    restore_ratio: Gauge<f64, std::sync::atomic::AtomicU64>,
    restore_rate: Gauge<f64, std::sync::atomic::AtomicU64>,
    full_window: Gauge,
    delta_period: Gauge,
    member: member::MemberGauges,
    gc: Family<GcLabels, Counter>,
    learner_count: Family<SucceededLabel, Counter>,
    add_learner: Histograms<SucceededLabel>,
    member_remove: Histograms<SucceededLabel>,
    member_promote: Histograms<SucceededLabel>,
}

/// The snapshot kinds etcd-backup-restore labels its metrics with (`Chunk`: the parts of a
/// multipart upload; quorate's never move, its uploads are not garbage-collected by part).
pub const SNAPSHOT_KINDS: [&str; 3] = ["Full", "Incr", "Chunk"];

/// A membership change whose duration etcd-backup-restore measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// A member was added as a learner (`etcdbr_add_learner_duration_seconds`, and
    /// `etcdbr_is_learner_count_total`).
    AddLearner,
    /// A learner was promoted (`etcdbr_member_promote_duration_seconds`).
    Promote,
    /// A member was removed (`etcdbr_member_remove_duration_seconds`).
    Remove,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::with_registry(Registry::default())
    }
}

impl AgentMetrics {
    /// The metrics of member `member` of cluster `etcd`, each series labelled with both.
    pub fn new(etcd: &str, member: &str) -> AgentMetrics {
        let metrics = AgentMetrics::with_registry(Registry::with_labels(
            [
                ("etcd".into(), etcd.to_string().into()),
                ("member".into(), member.to_string().into()),
            ]
            .into_iter(),
        ));
        for succeeded in [true, false] {
            let _ = metrics.defrag_duration.get_or_create(&DefragLabels {
                succeeded: flag(succeeded),
                endpoint: member.to_string(),
            });
        }
        metrics
    }

    /// Creates the counters' and histograms' known label sets at zero, as etcd-backup-restore
    /// does: a series that first appears at 1 shows no `increase()`, so the first failure would
    /// go unseen by an alert.
    fn with_known_series(self) -> AgentMetrics {
        for error in ["etcd", "store", "encryption", "chain", "leadership"] {
            let _ = self.failures.get_or_create(&ErrorLabel {
                error: error.to_string(),
            });
        }
        for path in ["/snapshot/full", "/snapshot/delta", "(tls handshake)"] {
            let _ = self.refused.get_or_create(&PathLabel {
                path: path.to_string(),
            });
        }
        for kind in SNAPSHOT_KINDS {
            let label = KindLabel {
                kind: kind.to_string(),
            };
            let _ = self.latest_revision.get_or_create(&label);
            let _ = self.latest_timestamp.get_or_create(&label);
            let _ = self.snapshot_required.get_or_create(&label);
            for succeeded in [true, false] {
                let _ = self.snapshot_duration.get_or_create(&SnapshotLabels {
                    kind: kind.to_string(),
                    succeeded: flag(succeeded),
                });
                let _ = self.gc.get_or_create(&GcLabels {
                    kind: kind.to_string(),
                    succeeded: flag(succeeded),
                });
            }
        }
        for succeeded in [true, false] {
            let label = SucceededLabel {
                succeeded: flag(succeeded),
            };
            let _ = self.learner_count.get_or_create(&label);
            let _ = self.add_learner.get_or_create(&label);
            let _ = self.member_remove.get_or_create(&label);
            let _ = self.member_promote.get_or_create(&label);
            for restore in ["single_node", "single_member"] {
                let _ = self.restoration.get_or_create(&RestoreLabels {
                    restore: restore.to_string(),
                    succeeded: flag(succeeded),
                });
            }
            let _ = self.validation.get_or_create(&SucceededLabel {
                succeeded: flag(succeeded),
            });
        }
        self
    }

    fn with_registry(mut registry: Registry) -> AgentMetrics {
        let snapshot_duration: Histograms<SnapshotLabels> =
            Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_snapshot_duration_seconds",
            "Total latency distribution of saving snapshot to object store",
            snapshot_duration.clone(),
        );
        let latest_revision = Family::<KindLabel, Gauge>::default();
        registry.register(
            "etcdbr_snapshot_latest_revision",
            "Revision number of latest snapshot taken",
            latest_revision.clone(),
        );
        let latest_timestamp = Family::<KindLabel, Gauge>::default();
        registry.register(
            "etcdbr_snapshot_latest_timestamp",
            "Timestamp of latest snapshot taken",
            latest_timestamp.clone(),
        );
        let deltas = Gauge::default();
        registry.register(
            "etcdbr_snapstore_latest_deltas_total",
            "Total number of delta snapshots taken since the latest full snapshot",
            deltas.clone(),
        );
        let delta_revisions = Gauge::default();
        registry.register(
            "etcdbr_snapstore_latest_deltas_revisions_total",
            "Total number of revisions stored in delta snapshots taken since the latest full snapshot",
            delta_revisions.clone(),
        );
        let defrag_duration: Histograms<DefragLabels> =
            Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_defragmentation_duration_seconds",
            "Total latency distribution of defragmentation of each etcd cluster member",
            defrag_duration.clone(),
        );
        let defrag_size = Family::<WhenLabel, Gauge>::default();
        registry.register(
            "quorate_defragmentation_db_size_bytes",
            "This member's database size before and after its last defragmentation",
            defrag_size.clone(),
        );
        let refused = Family::<PathLabel, Counter>::default();
        registry.register(
            "quorate_agent_requests_refused",
            "Requests refused for a missing or wrong credential (token or client certificate), by path; failed TLS handshakes as \"(tls handshake)\"",
            refused.clone(),
        );
        let certificate_expiry = Family::<FileLabel, Gauge>::default();
        registry.register(
            "quorate_certificate_expiry_timestamp_seconds",
            "When each certificate file this member serves or uses stops being valid (Unix time)",
            certificate_expiry.clone(),
        );
        let snapshot_required = Family::<KindLabel, Gauge>::default();
        registry.register(
            "etcdbr_snapshot_required",
            "1 while a snapshot of this kind is due and not yet taken (the backup leader)",
            snapshot_required.clone(),
        );
        let failures = Family::<ErrorLabel, Counter>::default();
        registry.register(
            "etcdbr_snapshotter_failure",
            "Total number of snapshotter errors (failed snapshots and store operations, by what failed)",
            failures.clone(),
        );
        let restoration: Histograms<RestoreLabels> = Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_restoration_duration_seconds",
            "Total latency distribution required to restore the etcd member",
            restoration.clone(),
        );
        let validation: Histograms<SucceededLabel> = Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_validation_duration_seconds",
            "Total latency distribution required to validate the etcd data directory",
            validation.clone(),
        );
        let backup_current = Family::<KindLabel, Gauge>::default();
        registry.register(
            "quorate_backup_current_timestamp_seconds",
            "When the backups were last current through etcd's head (Unix time), by a full snapshot (Full) or a delta period (Incr)",
            backup_current.clone(),
        );
        let full_window = Gauge::default();
        registry.register(
            "quorate_backup_full_snapshot_window_seconds",
            "The longest time fullSnapshotSchedule lets pass between full snapshots",
            full_window.clone(),
        );
        let delta_period = Gauge::default();
        registry.register(
            "quorate_backup_delta_snapshot_period_seconds",
            "deltaSnapshotPeriod",
            delta_period.clone(),
        );
        let restore_ratio = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "quorate_restore_progress_ratio",
            "How far the running (or last) restore from the bucket is, 0 to 1, by stored bytes",
            restore_ratio.clone(),
        );
        let restore_rate = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "quorate_restore_events_per_second",
            "Delta events the running (or last) restore replays per second",
            restore_rate.clone(),
        );
        let gc = Family::<GcLabels, Counter>::default();
        registry.register(
            "etcdbr_snapshot_gc",
            "Total number of garbage collected snapshots",
            gc.clone(),
        );
        let learner_count = Family::<SucceededLabel, Counter>::default();
        registry.register(
            "etcdbr_is_learner_count",
            "Total count when etcd member added as a learner",
            learner_count.clone(),
        );
        let add_learner: Histograms<SucceededLabel> = Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_add_learner_duration_seconds",
            "Total latency to add the etcd member as a learner to the cluster",
            add_learner.clone(),
        );
        let member_remove: Histograms<SucceededLabel> =
            Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_member_remove_duration_seconds",
            "Total latency to remove the etcd member from the cluster",
            member_remove.clone(),
        );
        let member_promote: Histograms<SucceededLabel> =
            Family::new_with_constructor(seconds_buckets);
        registry.register(
            "etcdbr_member_promote_duration_seconds",
            "Total latency to promote the learner to the voting member",
            member_promote.clone(),
        );
        quorate_metrics::register_common(&mut registry, "agent");
        registry.register_collector(Box::new(process::NetworkCollector));
        let member = member::MemberGauges::register(&mut registry);
        let metrics = AgentMetrics {
            gc,
            learner_count,
            add_learner,
            member_remove,
            member_promote,
            restore_ratio,
            restore_rate,
            backup_current,
            full_window,
            delta_period,
            registry: Arc::new(registry),
            snapshot_required,
            failures,
            restoration,
            validation,
            member,
            certificate_expiry,
            snapshot_duration,
            latest_revision,
            latest_timestamp,
            deltas,
            delta_revisions,
            defrag_duration,
            defrag_size,
            refused,
        };
        metrics.with_known_series()
    }
}

fn flag(ok: bool) -> String {
    ok.to_string()
}

fn clamp(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl AgentMetrics {
    /// A snapshot of `kind` (`Full` or `Incr`) was uploaded, or failed, after `took`; on success
    /// its last revision and creation time.
    pub fn snapshot(&self, kind: &str, took: Duration, stored: Option<(i64, i64)>) {
        self.snapshot_duration
            .get_or_create(&SnapshotLabels {
                kind: kind.to_string(),
                succeeded: flag(stored.is_some()),
            })
            .observe(took.as_secs_f64());
        if let Some((revision, created_unix)) = stored {
            let label = KindLabel {
                kind: kind.to_string(),
            };
            self.latest_revision.get_or_create(&label).set(revision);
            self.latest_timestamp
                .get_or_create(&label)
                .set(created_unix);
        }
    }

    /// The deltas a restore would replay now.
    pub fn backlog(&self, backlog: DeltaBacklog) {
        self.deltas.set(clamp(backlog.deltas));
        self.delta_revisions.set(clamp(backlog.events));
    }

    /// This member's defragmentation finished (or failed).
    pub fn defragmented(&self, member: &str, outcome: &DefragOutcome) {
        if outcome.skipped {
            return;
        }
        self.defrag_duration
            .get_or_create(&DefragLabels {
                succeeded: flag(outcome.error.is_none()),
                endpoint: member.to_string(),
            })
            .observe(outcome.millis as f64 / 1000.0);
        for (when, size) in [
            ("before", outcome.size_before),
            ("after", outcome.size_after),
        ] {
            self.defrag_size
                .get_or_create(&WhenLabel {
                    when: when.to_string(),
                })
                .set(clamp(size));
        }
    }

    /// A request to `path` was refused (no token, or a wrong one).
    pub fn refused(&self, path: &str) {
        self.refused
            .get_or_create(&PathLabel {
                path: path.to_string(),
            })
            .inc();
    }

    /// The certificate files in use and their expiry (files no longer used are dropped).
    pub fn certificates(&self, expiries: &[quorate_core::conditions::CertificateExpiry]) {
        self.certificate_expiry.clear();
        for e in expiries {
            self.certificate_expiry
                .get_or_create(&FileLabel {
                    file: e.file.clone(),
                })
                .set(e.not_after.as_second());
        }
    }

    /// Whether a snapshot of `kind` is due and not yet taken.
    pub fn snapshot_required(&self, kind: &str, required: bool) {
        self.snapshot_required
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .set(i64::from(required));
    }

    /// What the backup schedule allows: the longest gap between full snapshots, the delta
    /// period.
    pub fn backup_schedule(&self, full_window: Duration, delta_period: Duration) {
        self.full_window.set(clamp(full_window.as_secs()));
        self.delta_period.set(clamp(delta_period.as_secs()));
    }

    /// The backups became current through etcd's head at `unix`, by a snapshot of `kind`.
    pub fn backup_current(&self, kind: &str, unix: i64) {
        self.backup_current
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .set(unix);
    }

    /// A snapshot or store operation failed; `error` says what failed.
    pub fn failure(&self, error: &str) {
        self.failures
            .get_or_create(&ErrorLabel {
                error: error.to_string(),
            })
            .inc();
    }

    /// A restore of this member from the bucket ended after `took`; `whole_cluster` when the
    /// cluster is restored from it (BR's `single_node`), else this member alone.
    pub fn restored(&self, whole_cluster: bool, took: Duration, ok: bool) {
        let restore = if whole_cluster {
            "single_node"
        } else {
            "single_member"
        };
        self.restoration
            .get_or_create(&RestoreLabels {
                restore: restore.to_string(),
                succeeded: flag(ok),
            })
            .observe(took.as_secs_f64());
    }

    /// Where a restore from the bucket stands.
    pub fn restore_progress(&self, progress: &quorate_backup::restore::progress::RestoreProgress) {
        self.restore_ratio.set(progress.fraction());
        self.restore_rate.set(progress.events_per_second());
    }

    /// The data check before etcd starts ended after `took`.
    pub fn validated(&self, took: Duration, ok: bool) {
        self.validation
            .get_or_create(&SucceededLabel {
                succeeded: flag(ok),
            })
            .observe(took.as_secs_f64());
    }

    /// A snapshot of `kind` was garbage-collected from the bucket (or its deletion failed).
    pub fn garbage_collected(&self, kind: &str, ok: bool) {
        self.gc
            .get_or_create(&GcLabels {
                kind: kind.to_string(),
                succeeded: flag(ok),
            })
            .inc();
    }

    /// A membership change this agent carried out ended after `took`.
    pub fn membership_change(&self, change: MembershipChange, took: Duration, ok: bool) {
        let label = SucceededLabel {
            succeeded: flag(ok),
        };
        let histogram = match change {
            MembershipChange::AddLearner => {
                self.learner_count.get_or_create(&label).inc();
                &self.add_learner
            }
            MembershipChange::Promote => &self.member_promote,
            MembershipChange::Remove => &self.member_remove,
        };
        histogram.get_or_create(&label).observe(took.as_secs_f64());
    }

    /// The member's gauges and lease renewals.
    pub fn member(&self) -> &member::MemberGauges {
        &self.member
    }

    /// The metrics in the Prometheus text format 0.0.4 (see [`exposition`]), served as
    /// [`exposition::CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String does not fail");
        exposition::to_prometheus_text(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_carry_backup_restores_names_and_labels() {
        let m = AgentMetrics::default();
        m.snapshot(
            "Full",
            Duration::from_millis(1500),
            Some((42, 1_800_000_000)),
        );
        m.snapshot("Incr", Duration::from_millis(20), None);
        m.backlog(DeltaBacklog::default().add(7, 100).add(3, 50));
        m.defragmented(
            "main-1",
            &DefragOutcome {
                round: 1,
                at: jiff::Timestamp::from_second(1_800_000_000).unwrap(),
                size_before: 2048,
                size_after: 1024,
                millis: 250,
                skipped: false,
                error: None,
            },
        );
        let text = m.encode();
        for line in [
            r#"etcdbr_snapshot_duration_seconds_count{kind="Full",succeeded="true"} 1"#,
            r#"etcdbr_snapshot_duration_seconds_count{kind="Incr",succeeded="false"} 1"#,
            r#"etcdbr_snapshot_latest_revision{kind="Full"} 42"#,
            r#"etcdbr_snapshot_latest_timestamp{kind="Full"} 1800000000"#,
            "etcdbr_snapstore_latest_deltas_total 2",
            "etcdbr_snapstore_latest_deltas_revisions_total 10",
            r#"etcdbr_defragmentation_duration_seconds_sum{succeeded="true",endpoint="main-1"} 0.25"#,
            r#"quorate_defragmentation_db_size_bytes{when="after"} 1024"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}

#[cfg(test)]
mod member_tests {
    use super::*;
    use crate::state::MemberState;

    #[test]
    fn every_series_names_the_cluster_and_member_and_the_gauges_follow_the_state() {
        let m = AgentMetrics::new("etcd-main", "etcd-main-1");
        let state = MemberState {
            healthy: true,
            is_leader: true,
            message_is_no_space: true,
            ..MemberState::default()
        };
        m.member().observe(&state);
        m.member().database(3 << 20, 1 << 20);
        m.member().renewal(true);
        m.restored(true, Duration::from_secs(2), true);
        m.validated(Duration::from_millis(10), false);
        m.failure("store");
        m.snapshot_required("Full", true);
        let text = m.encode();
        for line in [
            r#"quorate_member_up{etcd="etcd-main",member="etcd-main-1"} 1"#,
            r#"quorate_member_is_leader{etcd="etcd-main",member="etcd-main-1"} 1"#,
            r#"etcdbr_is_learner{etcd="etcd-main",member="etcd-main-1"} 0"#,
            r#"quorate_etcd_alarm_active{etcd="etcd-main",member="etcd-main-1",alarm="NOSPACE"} 1"#,
            r#"quorate_etcd_db_size_bytes{etcd="etcd-main",member="etcd-main-1"} 3145728"#,
            r#"quorate_lease_renewals_total{etcd="etcd-main",member="etcd-main-1",result="success"} 1"#,
            r#"etcdbr_restoration_duration_seconds_count{etcd="etcd-main",member="etcd-main-1",restore="single_node",succeeded="true"} 1"#,
            r#"etcdbr_validation_duration_seconds_count{etcd="etcd-main",member="etcd-main-1",succeeded="false"} 1"#,
            r#"etcdbr_snapshotter_failure{etcd="etcd-main",member="etcd-main-1",error="store"} 1"#,
            r#"etcdbr_snapshot_required{etcd="etcd-main",member="etcd-main-1",kind="Full"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
