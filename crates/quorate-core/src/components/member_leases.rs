//! Member leases `<member>` (`<name>-<i>`, or `<prefix>-<name>-<i>`), one per desired member.
//! Created without a holder: the member's agent renews it with
//! `<memberID>:<clusterID>:<role>`, and until then the member counts as still starting.

use k8s_openapi::api::coordination::v1::Lease;
use quorate_api::Etcd;
use quorate_api::names::{component, member_lease_name};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when a member lease cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncMemberLease;

/// One lease per member pod that runs (`running`, in ordinal order): the desired members and
/// any still leaving. Surplus leases (after a scale-in) are not in this list; deleting them is
/// the controller's decision.
pub fn build(etcd: &Etcd, running: i32) -> Result<Vec<Lease>, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    Ok((0..u32::try_from(running).unwrap_or(0))
        .map(|i| member_lease_name(etcd, i))
        .collect::<Vec<_>>()
        .iter()
        .map(|name| Lease {
            metadata: id.object_meta(component::MEMBER_LEASE, name),
            spec: None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn one_lease_per_member_without_holder() {
        let leases = build(&etcd("etcd-main", 3), 3).unwrap();
        let names: Vec<_> = leases
            .iter()
            .map(|l| l.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["etcd-main-0", "etcd-main-1", "etcd-main-2"]);
        assert!(leases.iter().all(|l| l.spec.is_none()));
        let labels = leases[1].metadata.labels.clone().unwrap();
        assert_eq!(labels["app.kubernetes.io/component"], "etcd-member-lease");
        assert_eq!(labels["app.kubernetes.io/name"], "etcd-main-1");
    }

    #[test]
    fn member_name_prefix_names_the_leases() {
        let mut e = etcd("etcd-main", 2);
        e.spec.member_name_prefix = Some("seed".into());
        let names: Vec<_> = build(&e, 2)
            .unwrap()
            .into_iter()
            .map(|l| l.metadata.name.unwrap())
            .collect();
        assert_eq!(names, ["seed-etcd-main-0", "seed-etcd-main-1"]);
    }

    #[test]
    fn hibernated_cluster_has_no_member_leases() {
        assert!(build(&etcd("etcd-main", 0), 0).unwrap().is_empty());
    }
}
