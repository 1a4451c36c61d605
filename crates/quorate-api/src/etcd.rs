//! The `Etcd` custom resource (`druid.gardener.cloud/v1alpha1`), shaped exactly like
//! etcd-druid's so existing manifests, `kubectl` columns and `kubectl scale` keep working.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::BackupSpec;
use crate::spec_etcd::EtcdConfig;
use crate::status::EtcdStatus;

/// API group of the `Etcd` resource.
pub const GROUP: &str = "druid.gardener.cloud";
/// API version of the `Etcd` resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "druid.gardener.cloud/v1alpha1";
/// Kind of the resource.
pub const KIND: &str = "Etcd";

// `Etcd` (the full object with metadata and status) is generated from this struct by
// `kube::CustomResource`. Clippy mistakes the repeated `type_ = ...` of the printer columns
// for duplicated attributes.
/// Desired state of an etcd cluster.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "druid.gardener.cloud",
    version = "v1alpha1",
    kind = "Etcd",
    plural = "etcds",
    singular = "etcd",
    namespaced,
    status = "EtcdStatus",
    derive = "PartialEq",
    doc = "Etcd is the Schema for the etcds API",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.ready"),
    printcolumn(
        name = "Quorate",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "All Members Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"AllMembersReady\")].status"
    ),
    printcolumn(
        name = "Backup Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"BackupReady\")].status"
    ),
    printcolumn(
        name = "Scale",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ScaleOperationComplete\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Cluster Size",
        type_ = "integer",
        json_path = ".spec.replicas",
        priority = "1"
    ),
    printcolumn(
        name = "Current Replicas",
        type_ = "integer",
        json_path = ".status.currentReplicas",
        priority = "1"
    ),
    printcolumn(
        name = "Ready Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSpec {
    /// Deprecated and unused; kept so old manifests still parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Labels put on the member pods, merged with the managed labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations put on the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Configuration of the etcd process of every member.
    pub etcd: EtcdConfig,
    /// Backup settings; backups are disabled when `store` is unset.
    pub backup: BackupSpec,
    /// Settings shared by etcd and the backup side (auto-compaction).
    #[serde(
        rename = "sharedConfig",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub shared_config: Option<SharedConfig>,
    /// Pod scheduling constraints, copied to the pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<SchedulingConstraints>,
    /// Number of members; 0 hibernates the cluster (data is kept).
    pub replicas: i32,
    /// Priority class of the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Storage class of the data volumes (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// Size of each member's data volume; `16Gi` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_capacity: Option<Quantity>,
    /// Name of the volume claim template (immutable); the `Etcd` name when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<String>,
    /// Run the containers as root; they run as uid/gid 65532 when unset or false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_root: Option<bool>,
    /// Prefix of etcd member names (`<prefix>-<pod name>`), immutable, at most 63 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_name_prefix: Option<String>,
}

/// Settings used both by etcd and by the embedded etcd of the backup side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedConfig {
    /// `periodic` (retention is a duration) or `revision` (retention is a revision count);
    /// `periodic` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["periodic", "revision"]))]
    pub auto_compaction_mode: Option<String>,
    /// Auto-compaction retention; `30m` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_retention: Option<String>,
}

/// Scheduling constraints copied to the member pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingConstraints {
    /// Pod affinity and anti-affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Spreading of the member pods over topology domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
}
