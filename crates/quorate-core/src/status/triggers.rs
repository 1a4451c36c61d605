//! Which changes of a lease or a member pod start a pass of their `Etcd` at once, so the
//! status follows what the agents publish and what the kubelet reports instead of waiting
//! for the next periodic pass — without a pass on every lease renewal, which would multiply
//! the operator's steady-state requests. Each object reduces to a fingerprint; a pass starts
//! when the fingerprint changes (or the object is deleted).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::membership::data_state::DATA_STATE_ANNOTATION;

/// What a lease is to its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// A member's lease: its holder names the member, the cluster and the role; its
    /// annotations carry the member's published state.
    Member,
    /// A snapshot lease: its holder is the newest snapshot's revision, which moves with every
    /// delta, so only whether it was ever renewed (and its annotations) counts.
    Snapshot,
}

/// The fingerprint of a lease as far as the status cares: a member lease's holder (member,
/// cluster, role) and annotations, the data state without its revision (which moves with
/// every write); a snapshot lease's first renewal and annotations (a backup error).
pub fn lease_fingerprint(
    kind: LeaseKind,
    holder: Option<&str>,
    renewed: bool,
    annotations: &BTreeMap<String, String>,
) -> u64 {
    let mut hasher = DefaultHasher::new();
    match kind {
        LeaseKind::Member => holder.hash(&mut hasher),
        LeaseKind::Snapshot => renewed.hash(&mut hasher),
    }
    for (key, value) in annotations {
        key.hash(&mut hasher);
        if key == DATA_STATE_ANNOTATION {
            without_revision(value).hash(&mut hasher);
        } else {
            value.hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// The fingerprint of a lease never written by an agent: a new lease changes nothing yet.
pub fn blank_lease_fingerprint(kind: LeaseKind) -> u64 {
    lease_fingerprint(kind, None, false, &BTreeMap::new())
}

/// The fingerprint of a member pod as far as the status and a rolling update care: its Ready
/// condition, whether it is being deleted, and how an in-place resize stands (`resize`: the
/// kubelet's resize conditions and whether it has seen the pod's spec; empty when none).
pub fn pod_fingerprint(ready: Option<&str>, terminating: bool, resize: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    ready.hash(&mut hasher);
    terminating.hash(&mut hasher);
    resize.hash(&mut hasher);
    hasher.finish()
}

/// The fingerprint of a pod just created: not ready, not being deleted, not resizing.
pub fn blank_pod_fingerprint() -> u64 {
    pod_fingerprint(None, false, "")
}

/// A data-state annotation without its revision; the text itself when it is not JSON.
fn without_revision(annotation: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(annotation) {
        Ok(mut value) => {
            if let Some(object) = value.as_object_mut() {
                object.remove("revision");
            }
            value.to_string()
        }
        Err(_) => annotation.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::data_state::DataState;

    fn data_state(revision: i64) -> BTreeMap<String, String> {
        let state = DataState::Present {
            cluster_id: Some(1),
            member_id: Some(2),
            revision: Some(revision),
        };
        BTreeMap::from([(DATA_STATE_ANNOTATION.to_string(), state.to_annotation())])
    }

    #[test]
    fn a_member_lease_renewal_with_new_writes_is_no_change() {
        let holder = Some("2:1:Member");
        let a = lease_fingerprint(LeaseKind::Member, holder, true, &data_state(10));
        let b = lease_fingerprint(LeaseKind::Member, holder, true, &data_state(99));
        assert_eq!(a, b);
    }

    #[test]
    fn a_member_lease_changing_role_holder_or_published_state_is_a_change() {
        let state = data_state(10);
        let member = lease_fingerprint(LeaseKind::Member, Some("2:1:Member"), true, &state);
        let leader = lease_fingerprint(LeaseKind::Member, Some("2:1:Leader"), true, &state);
        assert_ne!(member, leader);
        let mut waiting = state.clone();
        waiting.insert("quorate.io/waiting".into(), "no quorum".into());
        assert_ne!(
            member,
            lease_fingerprint(LeaseKind::Member, Some("2:1:Member"), true, &waiting)
        );
        assert_ne!(
            blank_lease_fingerprint(LeaseKind::Member),
            lease_fingerprint(
                LeaseKind::Member,
                Some("2:1:Member"),
                true,
                &BTreeMap::new()
            )
        );
    }

    #[test]
    fn a_snapshot_lease_changes_on_its_first_renewal_only() {
        let none = BTreeMap::new();
        let first = lease_fingerprint(LeaseKind::Snapshot, Some("12"), true, &none);
        assert_ne!(blank_lease_fingerprint(LeaseKind::Snapshot), first);
        assert_eq!(
            first,
            lease_fingerprint(LeaseKind::Snapshot, Some("13"), true, &none)
        );
        let error = BTreeMap::from([("quorate.io/backup-error".to_string(), "x".to_string())]);
        assert_ne!(
            first,
            lease_fingerprint(LeaseKind::Snapshot, Some("13"), true, &error)
        );
    }

    #[test]
    fn a_pod_changes_on_readiness_deletion_and_resize() {
        assert_eq!(blank_pod_fingerprint(), pod_fingerprint(None, false, ""));
        assert_ne!(
            blank_pod_fingerprint(),
            pod_fingerprint(Some("True"), false, "")
        );
        assert_ne!(
            pod_fingerprint(Some("True"), false, ""),
            pod_fingerprint(Some("True"), true, "")
        );
        assert_ne!(
            pod_fingerprint(Some("True"), false, ""),
            pod_fingerprint(Some("True"), false, "PodResizeInProgress")
        );
    }
}
