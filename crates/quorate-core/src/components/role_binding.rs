//! RoleBinding `druid.gardener.cloud:etcd:<name>`: gives the member pods' ServiceAccount the
//! Role of the same name.

use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use quorate_api::Etcd;
use quorate_api::names::{component, role_binding_name, role_name, service_account_name};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the RoleBinding cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncRoleBinding;

/// The RoleBinding of the member pods' ServiceAccount.
pub fn build(etcd: &Etcd) -> Result<RoleBinding, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    Ok(RoleBinding {
        metadata: id.object_meta(component::ROLE_BINDING, &role_binding_name(&id.name)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: role_name(&id.name),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name: service_account_name(&id.name),
            namespace: Some(id.namespace.clone()),
            ..Subject::default()
        }]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn binds_the_service_account_to_the_role() {
        let rb = build(&etcd("etcd-main", 3)).unwrap();
        assert_eq!(rb.role_ref.name, "druid.gardener.cloud:etcd:etcd-main");
        assert_eq!(rb.role_ref.kind, "Role");
        let subject = &rb.subjects.unwrap()[0];
        assert_eq!(subject.kind, "ServiceAccount");
        assert_eq!(subject.name, "etcd-main");
        assert_eq!(subject.namespace.as_deref(), Some("shoot"));
        assert_eq!(
            rb.metadata.labels.unwrap()["app.kubernetes.io/component"],
            "etcd-role-binding"
        );
    }
}
