//! `spec.backup` of an `Etcd`: where and how often snapshots are taken and how long they are
//! kept. Field names and JSON casing follow etcd-druid's `BackupSpec`/`StoreSpec`.
//!
//! Durations, cron expressions and enum-like values are kept as strings so a bad value is
//! reported by our validation (with the field path and what is allowed), not by serde.

use k8s_openapi::api::core::v1::{ResourceRequirements, SecretReference as CoreSecretReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::tls::TlsConfig;

/// Backup settings: the backup server (port, TLS, image), the object store, and the snapshot,
/// garbage-collection and compaction policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Port of the backup HTTP server (`/snapshot/full`, `/healthz`, ...); 8080 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// TLS for the backup HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// Image of the backup sidecar; taken from the image vector when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The object store; backups are disabled when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<StoreSpec>,
    /// Compute resources of the backup container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Overrides for snapshot compaction of this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_compaction: Option<SnapshotCompactionSpec>,
    /// Cron schedule (5 fields, UTC) of full snapshots; hourly when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_snapshot_schedule: Option<String>,
    /// `Exponential` or `LimitBased`; `LimitBased` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Exponential", "LimitBased"]))]
    pub garbage_collection_policy: Option<String>,
    /// Full snapshots kept by the `LimitBased` policy; 7 when unset.
    #[serde(
        rename = "maxBackupsLimitBasedGC",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_backups_limit_based_gc: Option<i32>,
    /// How often garbage collection runs (Go duration); `1m` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub garbage_collection_period: Option<String>,
    /// How often a delta snapshot is written (Go duration); `20s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub delta_snapshot_period: Option<String>,
    /// Buffered events above this size force an early delta snapshot; `100Mi` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_snapshot_memory_limit: Option<Quantity>,
    /// How long delta snapshots older than the latest full snapshot are kept; `0s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub delta_snapshot_retention_period: Option<String>,
    /// Compression of full and delta snapshots.
    #[serde(
        rename = "compression",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub compression: Option<CompressionSpec>,
    /// Serve pprof-style profiling endpoints on the backup server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_profiling: Option<bool>,
    /// Time limit of one full snapshot (Go duration); `15m` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub etcd_snapshot_timeout: Option<String>,
    /// How the backup leader is chosen among members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElectionSpec>,
}

/// The object store that holds the snapshots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreSpec {
    /// Bucket (or, for `Local`, directory) name: 3-63 characters of `[a-zA-Z0-9._-]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Endpoint that replaces the provider's default, e.g. an S3-compatible server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_override: Option<String>,
    /// Key prefix under which this cluster's snapshots live.
    pub prefix: String,
    /// Provider, as an infrastructure name (`aws`, `gcp`, ...) or a store name (`S3`, `GCS`,
    /// ..., `Local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Secret with the store credentials; the provider's default credential chain when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<CoreSecretReference>,
}

/// Compression of snapshots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompressionSpec {
    /// Compress snapshots; true when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `gzip`, `lzw` or `zlib`; `gzip` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["gzip", "lzw", "zlib"]))]
    pub policy: Option<String>,
}

/// Timing of the backup-leader election.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElectionSpec {
    /// How often a member checks whether its etcd is the leader (Go duration); `5s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub reelection_period: Option<String>,
    /// Timeout of the etcd connection used for that check (Go duration); `5s` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::duration::GO_DURATION_PATTERN))]
    pub etcd_connection_timeout: Option<String>,
}

/// Per-cluster overrides of snapshot compaction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotCompactionSpec {
    /// Compute resources of the compaction job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Number of events since the last full snapshot that triggers a compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_threshold: Option<i64>,
    /// Number of events above which a full snapshot is taken instead of compacting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_full_snapshot_threshold: Option<i64>,
}
