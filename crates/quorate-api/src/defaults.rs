//! etcd-druid's defaults, and accessors that return the effective value of a field (the
//! user's value, or the default when unset).
//!
//! Accessors assume the object passed [`crate::validate::validate`]; should an invalid value
//! slip through anyway, they return the default rather than panic.

use std::time::Duration;

use crate::backup::{BackupSpec, StoreSpec};
use crate::cron::CronSchedule;
use crate::duration::parse_go_duration;
use crate::enums::{
    CompactionMode, CompressionPolicy, FreelistType, GarbageCollectionPolicy, MetricsLevel,
};
use crate::etcd::{Etcd, EtcdSpec};
use crate::provider::StorageProvider;
use crate::quantity::quantity_to_bytes;
use crate::spec_etcd::EtcdConfig;
use crate::tls::SecretReference;

/// Backend quota when `spec.etcd.quota` is unset.
pub const DEFAULT_QUOTA: &str = "8Gi";
/// [`DEFAULT_QUOTA`] in bytes.
pub const DEFAULT_QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// Raft snapshot count when `spec.etcd.snapshotCount` is unset (druid's value, not etcd's).
pub const DEFAULT_SNAPSHOT_COUNT: u64 = 10_000;
/// Client port.
pub const DEFAULT_CLIENT_PORT: u16 = 2379;
/// Peer ("server") port.
pub const DEFAULT_SERVER_PORT: u16 = 2380;
/// Port of the wrapper/agent readiness endpoint.
pub const DEFAULT_WRAPPER_PORT: u16 = 9095;
/// Port of the backup HTTP server.
pub const DEFAULT_BACKUP_PORT: u16 = 8080;
/// Member-lease renewal period.
pub const DEFAULT_HEARTBEAT_DURATION: Duration = Duration::from_secs(10);
/// Time limit of one defragmentation call.
pub const DEFAULT_ETCD_DEFRAG_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Defragmentation schedule: midnight UTC every third day of the month.
pub const DEFAULT_DEFRAGMENTATION_SCHEDULE: &str = "0 0 */3 * *";
/// Full-snapshot schedule: hourly.
pub const DEFAULT_FULL_SNAPSHOT_SCHEDULE: &str = "0 */1 * * *";
/// Delta-snapshot period.
pub const DEFAULT_DELTA_SNAPSHOT_PERIOD: Duration = Duration::from_secs(20);
/// Buffered-events size that forces an early delta snapshot (druid's value; BR's is 10Mi).
pub const DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT: &str = "100Mi";
/// [`DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT`] in bytes.
pub const DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT_BYTES: u64 = 100 * 1024 * 1024;
/// Retention of delta snapshots older than the latest full snapshot.
pub const DEFAULT_DELTA_SNAPSHOT_RETENTION_PERIOD: Duration = Duration::ZERO;
/// Garbage-collection policy.
pub const DEFAULT_GARBAGE_COLLECTION_POLICY: GarbageCollectionPolicy =
    GarbageCollectionPolicy::LimitBased;
/// Full snapshots kept by the `LimitBased` policy.
pub const DEFAULT_MAX_BACKUPS_LIMIT_BASED_GC: u32 = 7;
/// Garbage-collection period.
pub const DEFAULT_GARBAGE_COLLECTION_PERIOD: Duration = Duration::from_secs(60);
/// Whether snapshots are compressed.
pub const DEFAULT_COMPRESSION_ENABLED: bool = true;
/// Compression algorithm.
pub const DEFAULT_COMPRESSION_POLICY: CompressionPolicy = CompressionPolicy::Gzip;
/// Time limit of one full snapshot.
pub const DEFAULT_ETCD_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Backup-leader re-election check period.
pub const DEFAULT_REELECTION_PERIOD: Duration = Duration::from_secs(5);
/// etcd connection timeout of the backup-leader election.
pub const DEFAULT_ETCD_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Auto-compaction mode.
pub const DEFAULT_AUTO_COMPACTION_MODE: CompactionMode = CompactionMode::Periodic;
/// Auto-compaction retention.
pub const DEFAULT_AUTO_COMPACTION_RETENTION: &str = "30m";
/// Size of each member's data volume.
pub const DEFAULT_STORAGE_CAPACITY: &str = "16Gi";
/// [`DEFAULT_STORAGE_CAPACITY`] in bytes.
pub const DEFAULT_STORAGE_CAPACITY_BYTES: u64 = 16 * 1024 * 1024 * 1024;
/// Metrics level.
pub const DEFAULT_METRICS: MetricsLevel = MetricsLevel::Basic;
/// bbolt freelist type.
pub const DEFAULT_BACKEND_BBOLT_FREELIST_TYPE: FreelistType = FreelistType::Array;
/// Key of the CA bundle in a CA Secret.
pub const DEFAULT_TLS_CA_DATA_KEY: &str = "ca.crt";
/// CPU request of the etcd and backup containers.
pub const DEFAULT_CONTAINER_CPU_REQUEST: &str = "50m";
/// Memory request of the etcd and backup containers.
pub const DEFAULT_CONTAINER_MEMORY_REQUEST: &str = "128Mi";
/// CPU request of a snapshot-compaction job.
pub const DEFAULT_COMPACTION_JOB_CPU_REQUEST: &str = "600m";
/// Memory request of a snapshot-compaction job.
pub const DEFAULT_COMPACTION_JOB_MEMORY_REQUEST: &str = "3Gi";
/// uid and gid the containers run as unless `runAsRoot` is true.
pub const NON_ROOT_USER_ID: i64 = 65532;

fn duration_or(value: Option<&String>, default: Duration) -> Duration {
    value
        .and_then(|v| parse_go_duration(v).ok())
        .unwrap_or(default)
}

fn bytes_or(
    value: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    default: u64,
) -> u64 {
    value
        .and_then(|q| quantity_to_bytes(&q.0).ok())
        .unwrap_or(default)
}

fn port_or(value: Option<i32>, default: u16) -> u16 {
    value
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .unwrap_or(default)
}

impl Etcd {
    /// Backend quota in bytes.
    pub fn quota_bytes(&self) -> u64 {
        self.spec.etcd.quota_bytes()
    }

    /// Whether backups are configured (`spec.backup.store` is set).
    pub fn backup_enabled(&self) -> bool {
        self.spec.backup.store.is_some()
    }

    /// Whether the client URL uses TLS.
    pub fn client_tls_enabled(&self) -> bool {
        self.spec.etcd.client_url_tls.is_some()
    }

    /// Whether the peer URL uses TLS.
    pub fn peer_tls_enabled(&self) -> bool {
        self.spec.etcd.peer_url_tls.is_some()
    }

    /// Whether the backup HTTP server uses TLS.
    pub fn backup_tls_enabled(&self) -> bool {
        self.spec.backup.tls.is_some()
    }
}

impl EtcdSpec {
    /// Size of each member's data volume in bytes.
    pub fn storage_capacity_bytes(&self) -> u64 {
        bytes_or(
            self.storage_capacity.as_ref(),
            DEFAULT_STORAGE_CAPACITY_BYTES,
        )
    }

    /// Whether containers run as root.
    pub fn run_as_root(&self) -> bool {
        self.run_as_root.unwrap_or(false)
    }

    /// Auto-compaction mode.
    pub fn auto_compaction_mode(&self) -> CompactionMode {
        self.shared_config
            .as_ref()
            .and_then(|s| s.auto_compaction_mode.as_deref())
            .and_then(CompactionMode::parse)
            .unwrap_or(DEFAULT_AUTO_COMPACTION_MODE)
    }

    /// Auto-compaction retention, as etcd's `auto-compaction-retention` expects it.
    pub fn auto_compaction_retention(&self) -> &str {
        self.shared_config
            .as_ref()
            .and_then(|s| s.auto_compaction_retention.as_deref())
            .unwrap_or(DEFAULT_AUTO_COMPACTION_RETENTION)
    }
}

impl EtcdConfig {
    /// Backend quota in bytes.
    pub fn quota_bytes(&self) -> u64 {
        bytes_or(self.quota.as_ref(), DEFAULT_QUOTA_BYTES)
    }

    /// Raft snapshot count.
    pub fn snapshot_count(&self) -> u64 {
        self.snapshot_count
            .and_then(|c| u64::try_from(c).ok())
            .filter(|c| *c > 0)
            .unwrap_or(DEFAULT_SNAPSHOT_COUNT)
    }

    /// Whether etcd's gRPC gateway is served.
    pub fn enable_grpc_gateway(&self) -> bool {
        self.enable_grpc_gateway.unwrap_or(false)
    }

    /// Client port.
    pub fn client_port(&self) -> u16 {
        port_or(self.client_port, DEFAULT_CLIENT_PORT)
    }

    /// Peer port (druid calls it the server port).
    pub fn server_port(&self) -> u16 {
        port_or(self.server_port, DEFAULT_SERVER_PORT)
    }

    /// Port of the wrapper/agent readiness endpoint.
    pub fn wrapper_port(&self) -> u16 {
        port_or(self.wrapper_port, DEFAULT_WRAPPER_PORT)
    }

    /// Metrics level.
    pub fn metrics(&self) -> MetricsLevel {
        self.metrics
            .as_deref()
            .and_then(MetricsLevel::parse)
            .unwrap_or(DEFAULT_METRICS)
    }

    /// Defragmentation schedule text.
    pub fn defragmentation_schedule(&self) -> &str {
        self.defragmentation_schedule
            .as_deref()
            .unwrap_or(DEFAULT_DEFRAGMENTATION_SCHEDULE)
    }

    /// Parsed defragmentation schedule.
    pub fn defragmentation_cron(&self) -> CronSchedule {
        CronSchedule::parse(self.defragmentation_schedule()).unwrap_or_else(|_| {
            CronSchedule::parse(DEFAULT_DEFRAGMENTATION_SCHEDULE).expect("default is valid")
        })
    }

    /// Time limit of one defragmentation call.
    pub fn etcd_defrag_timeout(&self) -> Duration {
        duration_or(
            self.etcd_defrag_timeout.as_ref(),
            DEFAULT_ETCD_DEFRAG_TIMEOUT,
        )
    }

    /// Member-lease renewal period.
    pub fn heartbeat_duration(&self) -> Duration {
        duration_or(self.heartbeat_duration.as_ref(), DEFAULT_HEARTBEAT_DURATION)
    }

    /// bbolt freelist type.
    pub fn backend_bbolt_freelist_type(&self) -> FreelistType {
        self.backend_bbolt_freelist_type
            .as_deref()
            .and_then(FreelistType::parse)
            .unwrap_or(DEFAULT_BACKEND_BBOLT_FREELIST_TYPE)
    }

    /// Extra peer URLs configured for the member with this name (empty if none).
    pub fn additional_peer_urls_of(&self, member_name: &str) -> &[String] {
        self.additional_peer_urls()
            .map(|(_, urls)| urls)
            .unwrap_or_default()
            .iter()
            .find(|a| a.member_name == member_name)
            .map(|a| a.urls.as_slice())
            .unwrap_or(&[])
    }
}

impl BackupSpec {
    /// Port of the backup HTTP server.
    pub fn port(&self) -> u16 {
        port_or(self.port, DEFAULT_BACKUP_PORT)
    }

    /// Full-snapshot schedule text.
    pub fn full_snapshot_schedule(&self) -> &str {
        self.full_snapshot_schedule
            .as_deref()
            .unwrap_or(DEFAULT_FULL_SNAPSHOT_SCHEDULE)
    }

    /// Parsed full-snapshot schedule.
    pub fn full_snapshot_cron(&self) -> CronSchedule {
        CronSchedule::parse(self.full_snapshot_schedule()).unwrap_or_else(|_| {
            CronSchedule::parse(DEFAULT_FULL_SNAPSHOT_SCHEDULE).expect("default is valid")
        })
    }

    /// Garbage-collection policy.
    pub fn garbage_collection_policy(&self) -> GarbageCollectionPolicy {
        self.garbage_collection_policy
            .as_deref()
            .and_then(GarbageCollectionPolicy::parse)
            .unwrap_or(DEFAULT_GARBAGE_COLLECTION_POLICY)
    }

    /// Full snapshots kept by the `LimitBased` policy.
    pub fn max_backups_limit_based_gc(&self) -> u32 {
        self.max_backups_limit_based_gc
            .and_then(|m| u32::try_from(m).ok())
            .filter(|m| *m > 0)
            .unwrap_or(DEFAULT_MAX_BACKUPS_LIMIT_BASED_GC)
    }

    /// Garbage-collection period.
    pub fn garbage_collection_period(&self) -> Duration {
        duration_or(
            self.garbage_collection_period.as_ref(),
            DEFAULT_GARBAGE_COLLECTION_PERIOD,
        )
    }

    /// Delta-snapshot period.
    pub fn delta_snapshot_period(&self) -> Duration {
        duration_or(
            self.delta_snapshot_period.as_ref(),
            DEFAULT_DELTA_SNAPSHOT_PERIOD,
        )
    }

    /// Buffered-events size that forces an early delta snapshot, in bytes.
    pub fn delta_snapshot_memory_limit_bytes(&self) -> u64 {
        bytes_or(
            self.delta_snapshot_memory_limit.as_ref(),
            DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT_BYTES,
        )
    }

    /// Retention of older delta snapshots.
    pub fn delta_snapshot_retention_period(&self) -> Duration {
        duration_or(
            self.delta_snapshot_retention_period.as_ref(),
            DEFAULT_DELTA_SNAPSHOT_RETENTION_PERIOD,
        )
    }

    /// Whether snapshots are compressed.
    pub fn compression_enabled(&self) -> bool {
        self.compression
            .as_ref()
            .and_then(|c| c.enabled)
            .unwrap_or(DEFAULT_COMPRESSION_ENABLED)
    }

    /// Compression algorithm (meaningful only when compression is enabled).
    pub fn compression_policy(&self) -> CompressionPolicy {
        self.compression
            .as_ref()
            .and_then(|c| c.policy.as_deref())
            .and_then(CompressionPolicy::parse)
            .unwrap_or(DEFAULT_COMPRESSION_POLICY)
    }

    /// Whether profiling endpoints are served.
    pub fn enable_profiling(&self) -> bool {
        self.enable_profiling.unwrap_or(false)
    }

    /// Time limit of one full snapshot.
    pub fn etcd_snapshot_timeout(&self) -> Duration {
        duration_or(
            self.etcd_snapshot_timeout.as_ref(),
            DEFAULT_ETCD_SNAPSHOT_TIMEOUT,
        )
    }

    /// Backup-leader re-election check period.
    pub fn reelection_period(&self) -> Duration {
        duration_or(
            self.leader_election
                .as_ref()
                .and_then(|l| l.reelection_period.as_ref()),
            DEFAULT_REELECTION_PERIOD,
        )
    }

    /// etcd connection timeout of the backup-leader election.
    pub fn etcd_connection_timeout(&self) -> Duration {
        duration_or(
            self.leader_election
                .as_ref()
                .and_then(|l| l.etcd_connection_timeout.as_ref()),
            DEFAULT_ETCD_CONNECTION_TIMEOUT,
        )
    }
}

impl StoreSpec {
    /// The store the `provider` value means; `None` when unset or not a known name.
    pub fn provider_kind(&self) -> Option<StorageProvider> {
        self.provider
            .as_deref()
            .and_then(StorageProvider::from_spec)
    }
}

impl SecretReference {
    /// Key of the value inside the Secret.
    pub fn data_key(&self) -> &str {
        self.data_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .unwrap_or(DEFAULT_TLS_CA_DATA_KEY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{CompressionSpec, LeaderElectionSpec};
    use crate::etcd::SharedConfig;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn empty_etcd() -> Etcd {
        Etcd::new("main", EtcdSpec::default())
    }

    #[test]
    fn unset_fields_give_druids_defaults() {
        let etcd = empty_etcd();
        let e = &etcd.spec.etcd;
        let b = &etcd.spec.backup;
        assert_eq!(etcd.quota_bytes(), 8_589_934_592);
        assert_eq!(e.snapshot_count(), 10_000);
        assert_eq!(e.client_port(), 2379);
        assert_eq!(e.server_port(), 2380);
        assert_eq!(e.wrapper_port(), 9095);
        assert_eq!(e.metrics(), MetricsLevel::Basic);
        assert_eq!(e.defragmentation_schedule(), "0 0 */3 * *");
        assert_eq!(e.etcd_defrag_timeout(), Duration::from_secs(900));
        assert_eq!(e.heartbeat_duration(), Duration::from_secs(10));
        assert_eq!(e.backend_bbolt_freelist_type(), FreelistType::Array);
        assert_eq!(b.port(), 8080);
        assert_eq!(b.full_snapshot_schedule(), "0 */1 * * *");
        assert_eq!(
            b.garbage_collection_policy(),
            GarbageCollectionPolicy::LimitBased
        );
        assert_eq!(b.max_backups_limit_based_gc(), 7);
        assert_eq!(b.garbage_collection_period(), Duration::from_secs(60));
        assert_eq!(b.delta_snapshot_period(), Duration::from_secs(20));
        assert_eq!(b.delta_snapshot_memory_limit_bytes(), 100 * 1024 * 1024);
        assert_eq!(b.delta_snapshot_retention_period(), Duration::ZERO);
        assert!(b.compression_enabled());
        assert_eq!(b.compression_policy(), CompressionPolicy::Gzip);
        assert!(!b.enable_profiling());
        assert_eq!(b.etcd_snapshot_timeout(), Duration::from_secs(900));
        assert_eq!(b.reelection_period(), Duration::from_secs(5));
        assert_eq!(b.etcd_connection_timeout(), Duration::from_secs(5));
        assert_eq!(etcd.spec.auto_compaction_mode(), CompactionMode::Periodic);
        assert_eq!(etcd.spec.auto_compaction_retention(), "30m");
        assert_eq!(etcd.spec.storage_capacity_bytes(), 16 * 1024 * 1024 * 1024);
        assert!(!etcd.spec.run_as_root());
        assert!(!etcd.backup_enabled());
        assert_eq!(SecretReference::default().data_key(), "ca.crt");
    }

    #[test]
    fn string_and_byte_forms_of_size_defaults_agree() {
        assert_eq!(quantity_to_bytes(DEFAULT_QUOTA), Ok(DEFAULT_QUOTA_BYTES));
        assert_eq!(
            quantity_to_bytes(DEFAULT_STORAGE_CAPACITY),
            Ok(DEFAULT_STORAGE_CAPACITY_BYTES)
        );
        assert_eq!(
            quantity_to_bytes(DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT),
            Ok(DEFAULT_DELTA_SNAPSHOT_MEMORY_LIMIT_BYTES)
        );
    }

    #[test]
    fn set_fields_win_over_defaults() {
        let mut etcd = empty_etcd();
        etcd.spec.etcd.quota = Some(Quantity("2Gi".into()));
        etcd.spec.etcd.snapshot_count = Some(75_000);
        etcd.spec.etcd.client_port = Some(12379);
        etcd.spec.etcd.server_port = Some(12380);
        etcd.spec.etcd.metrics = Some("extensive".into());
        etcd.spec.etcd.heartbeat_duration = Some("2s".into());
        etcd.spec.backup.port = Some(18080);
        etcd.spec.backup.delta_snapshot_period = Some("1m30s".into());
        etcd.spec.backup.delta_snapshot_memory_limit = Some(Quantity("10Mi".into()));
        etcd.spec.backup.garbage_collection_policy = Some("Exponential".into());
        etcd.spec.backup.compression = Some(CompressionSpec {
            enabled: Some(false),
            policy: Some("zlib".into()),
        });
        etcd.spec.backup.leader_election = Some(LeaderElectionSpec {
            reelection_period: Some("7s".into()),
            etcd_connection_timeout: None,
        });
        etcd.spec.shared_config = Some(SharedConfig {
            auto_compaction_mode: Some("revision".into()),
            auto_compaction_retention: Some("1000".into()),
        });
        assert_eq!(etcd.quota_bytes(), 2 * 1024 * 1024 * 1024);
        assert_eq!(etcd.spec.etcd.snapshot_count(), 75_000);
        assert_eq!(etcd.spec.etcd.client_port(), 12379);
        assert_eq!(etcd.spec.etcd.server_port(), 12380);
        assert_eq!(etcd.spec.etcd.metrics(), MetricsLevel::Extensive);
        assert_eq!(etcd.spec.etcd.heartbeat_duration(), Duration::from_secs(2));
        assert_eq!(etcd.spec.backup.port(), 18080);
        assert_eq!(
            etcd.spec.backup.delta_snapshot_period(),
            Duration::from_secs(90)
        );
        assert_eq!(
            etcd.spec.backup.delta_snapshot_memory_limit_bytes(),
            10 * 1024 * 1024
        );
        assert_eq!(
            etcd.spec.backup.garbage_collection_policy(),
            GarbageCollectionPolicy::Exponential
        );
        assert!(!etcd.spec.backup.compression_enabled());
        assert_eq!(
            etcd.spec.backup.compression_policy(),
            CompressionPolicy::Zlib
        );
        assert_eq!(etcd.spec.backup.reelection_period(), Duration::from_secs(7));
        assert_eq!(
            etcd.spec.backup.etcd_connection_timeout(),
            Duration::from_secs(5)
        );
        assert_eq!(etcd.spec.auto_compaction_mode(), CompactionMode::Revision);
        assert_eq!(etcd.spec.auto_compaction_retention(), "1000");
    }

    #[test]
    fn invalid_values_fall_back_to_defaults() {
        let mut etcd = empty_etcd();
        etcd.spec.etcd.client_port = Some(70_000);
        etcd.spec.backup.delta_snapshot_period = Some("20 seconds".into());
        etcd.spec.etcd.quota = Some(Quantity("8GB".into()));
        etcd.spec.backup.full_snapshot_schedule = Some("hourly".into());
        assert_eq!(etcd.spec.etcd.client_port(), 2379);
        assert_eq!(
            etcd.spec.backup.delta_snapshot_period(),
            Duration::from_secs(20)
        );
        assert_eq!(etcd.quota_bytes(), DEFAULT_QUOTA_BYTES);
        assert_eq!(
            etcd.spec.backup.full_snapshot_cron().as_str(),
            "0 */1 * * *"
        );
    }
}
