//! Member and snapshot leases as `coordination.k8s.io/v1` Lease objects, the way
//! etcd-backup-restore reads and writes them: `spec.holderIdentity` carries the holder
//! (`<memberID>:<clusterID>:<role>`, or a snapshot's revision), `spec.renewTime` the renewal,
//! and the agent's annotations sit beside whatever else the object carries.
//!
//! A renewal is a JSON merge patch of `spec.holderIdentity`, `spec.renewTime` and the agent's
//! annotations only: the operator's labels, owner reference and annotations and
//! `spec.leaseDurationSeconds` are never sent, so they cannot be lost, and no read is needed
//! before a write.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use quorate_core::lease::{
    BACKUP_ERROR_ANNOTATION, MemberLease, SnapshotLease, TLS_ENABLED_ANNOTATION,
};
use quorate_core::membership::data_state::{DATA_STATE_ANNOTATION, WAITING_ANNOTATION};
use quorate_core::membership::recovery::RECOVERY_ANNOTATION;
use quorate_core::membership::rollout::CONFIG_HASH_ANNOTATION;
use serde_json::{Map, Value, json};

/// Annotations the agent owns on its leases. One absent from the lease being written is
/// removed from the object (e.g. the backup error once snapshots succeed again); every other
/// annotation on the object is left alone.
pub const AGENT_ANNOTATIONS: [&str; 6] = [
    TLS_ENABLED_ANNOTATION,
    CONFIG_HASH_ANNOTATION,
    BACKUP_ERROR_ANNOTATION,
    DATA_STATE_ANNOTATION,
    WAITING_ANNOTATION,
    RECOVERY_ANNOTATION,
];

/// The fields of a Lease both lease kinds share.
struct Fields {
    name: String,
    holder_identity: Option<String>,
    renew_time: Option<Timestamp>,
    annotations: BTreeMap<String, String>,
}

fn fields(lease: &Lease) -> Fields {
    let spec = lease.spec.as_ref();
    Fields {
        name: lease.metadata.name.clone().unwrap_or_default(),
        holder_identity: spec.and_then(|s| s.holder_identity.clone()),
        renew_time: spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
        annotations: lease.metadata.annotations.clone().unwrap_or_default(),
    }
}

/// The member lease a Lease object holds.
pub fn member_lease(lease: &Lease) -> MemberLease {
    let f = fields(lease);
    MemberLease {
        name: f.name,
        holder_identity: f.holder_identity,
        renew_time: f.renew_time,
        annotations: f.annotations,
    }
}

/// The snapshot lease a Lease object holds.
pub fn snapshot_lease(lease: &Lease) -> SnapshotLease {
    let f = fields(lease);
    SnapshotLease {
        name: f.name,
        holder_identity: f.holder_identity,
        renew_time: f.renew_time,
        annotations: f.annotations,
    }
}

/// The merge patch writing a member lease.
pub fn member_lease_patch(lease: &MemberLease) -> Value {
    renewal_patch(
        lease.holder_identity.as_deref(),
        lease.renew_time,
        &lease.annotations,
    )
}

/// The merge patch writing a snapshot lease.
pub fn snapshot_lease_patch(lease: &SnapshotLease) -> Value {
    renewal_patch(
        lease.holder_identity.as_deref(),
        lease.renew_time,
        &lease.annotations,
    )
}

/// `spec.holderIdentity` and `spec.renewTime` as given (`null` removes them), the given
/// annotations set, and the [`AGENT_ANNOTATIONS`] the lease lacks removed.
fn renewal_patch(
    holder: Option<&str>,
    renew_time: Option<Timestamp>,
    annotations: &BTreeMap<String, String>,
) -> Value {
    let mut patched: Map<String, Value> = AGENT_ANNOTATIONS
        .iter()
        .map(|key| (key.to_string(), Value::Null))
        .collect();
    for (key, value) in annotations {
        patched.insert(key.clone(), Value::String(value.clone()));
    }
    // MicroTime serialises with exactly six fractional digits, the only form the API server
    // parses for this field.
    let renew_time = renew_time
        .map(|t| serde_json::to_value(MicroTime(t)).unwrap_or(Value::Null))
        .unwrap_or(Value::Null);
    json!({
        "metadata": { "annotations": patched },
        "spec": { "holderIdentity": holder, "renewTime": renew_time },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn reads_holder_renew_time_and_annotations() {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some("etcd-main-0".into()),
                annotations: Some(BTreeMap::from([(
                    TLS_ENABLED_ANNOTATION.to_string(),
                    "true".to_string(),
                )])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("a:b:Leader".into()),
                renew_time: Some(MicroTime(ts("2024-01-02T03:04:05.123456Z"))),
                lease_duration_seconds: Some(40),
                ..LeaseSpec::default()
            }),
        };
        let m = member_lease(&lease);
        assert_eq!(m.name, "etcd-main-0");
        assert_eq!(m.holder_identity.as_deref(), Some("a:b:Leader"));
        assert_eq!(m.renew_time, Some(ts("2024-01-02T03:04:05.123456Z")));
        assert_eq!(m.tls_enabled(), Some(true));
        let bare = Lease {
            metadata: ObjectMeta {
                name: Some("etcd-main-full-snap".into()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        assert_eq!(
            snapshot_lease(&bare),
            SnapshotLease::new("etcd-main-full-snap")
        );
    }

    #[test]
    fn patch_sets_spec_and_agent_annotations_only() {
        let mut lease = MemberLease::new("etcd-main-0");
        lease.renew(
            &"1:2:Leader".parse().unwrap(),
            false,
            ts("2024-05-06T07:08:09.5Z"),
        );
        let patch = member_lease_patch(&lease);
        assert_eq!(
            patch,
            json!({
                "metadata": {"annotations": {
                    TLS_ENABLED_ANNOTATION: "false",
                    CONFIG_HASH_ANNOTATION: null,
                    BACKUP_ERROR_ANNOTATION: null,
                    DATA_STATE_ANNOTATION: null,
                    WAITING_ANNOTATION: null,
                    RECOVERY_ANNOTATION: null,
                }},
                "spec": {
                    "holderIdentity": "1:2:Leader",
                    "renewTime": "2024-05-06T07:08:09.500000Z",
                },
            })
        );
        let empty = snapshot_lease_patch(&SnapshotLease::new("x"));
        assert_eq!(
            empty["spec"],
            json!({"holderIdentity": null, "renewTime": null})
        );
    }
}
