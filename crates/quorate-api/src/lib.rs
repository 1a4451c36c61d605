//! The `Etcd` API of quorate: etcd-druid's `druid.gardener.cloud/v1alpha1` resource as Rust
//! types, with druid's defaults, validation whose messages name the field and what is
//! allowed, the names and labels of everything derived from an `Etcd`, manifest parsing and
//! the generated CRD. No I/O beyond what the caller hands in.

pub mod annotations;
pub mod backup;
pub mod crd;
pub mod cron;
pub mod defaults;
pub mod defrag;
pub mod duration;
pub mod enums;
pub mod etcd;
pub mod etcd_version;
pub mod manifest;
pub mod names;
pub mod printer;
pub mod provider;
pub mod quantity;
pub mod spec_etcd;
pub mod status;
pub mod tasks;
pub mod tls;
pub mod unknown_fields;
pub mod validate;

pub use backup::{
    BackupSpec, CompressionSpec, LeaderElectionSpec, SnapshotCompactionSpec, StoreSpec,
};
pub use cron::{CronError, CronSchedule};
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use enums::{
    CompactionMode, CompressionPolicy, FreelistType, GarbageCollectionPolicy, MetricsLevel,
    TrafficDistribution,
};
pub use etcd::{Etcd, EtcdSpec, SchedulingConstraints, SharedConfig};
pub use etcd_version::{EtcdVersion, VersionChangeRefused};
pub use manifest::{
    EtcdManifest, ManifestError, ParseError, parse_etcd_manifest, parse_etcd_manifests,
    read_etcd_manifests,
};
pub use provider::StorageProvider;
pub use quantity::{ParsedQuantity, QuantityError, parse_quantity, quantity_to_bytes};
pub use spec_etcd::{
    AdditionalPeerUrl, BootstrapMember, BootstrapWithExistingCluster, ClientService, EtcdConfig,
};
pub use status::{
    Condition, ConditionStatus, EtcdMemberConditionStatus, EtcdMemberStatus, EtcdRole, EtcdStatus,
    LastError, LastOperation, LastOperationState, LastOperationType,
};
pub use tasks::{EtcdCopyBackupsTask, EtcdOpsTask};
pub use tls::{PeerTlsConfig, SecretReference, TlsConfig};
pub use unknown_fields::UnknownField;
pub use validate::{
    FieldError, ValidationErrors, check_replicas_change, validate, validate_update,
};
