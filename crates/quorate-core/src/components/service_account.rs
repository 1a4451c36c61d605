//! ServiceAccount `<name>`: the identity of the member pods, which the Role grants access to
//! leases, their ConfigMap and pods.

use k8s_openapi::api::core::v1::ServiceAccount;
use quorate_api::Etcd;
use quorate_api::names::{component, service_account_name};

use crate::last_operation::ErrorCode;

use super::context::ComponentContext;
use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the ServiceAccount cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncServiceAccount;

/// The ServiceAccount of the member pods; the token is mounted unless the operator was told
/// not to (`--disable-etcd-serviceaccount-automount`).
pub fn build(etcd: &Etcd, ctx: &ComponentContext) -> Result<ServiceAccount, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    Ok(ServiceAccount {
        metadata: id.object_meta(component::SERVICE_ACCOUNT, &service_account_name(&id.name)),
        automount_service_account_token: Some(!ctx.disable_service_account_automount),
        ..ServiceAccount::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn named_like_the_etcd_with_its_component_label() {
        let ctx = ComponentContext::new("q", "a");
        let sa = build(&etcd("etcd-main", 3), &ctx).unwrap();
        assert_eq!(sa.metadata.name.as_deref(), Some("etcd-main"));
        let labels = sa.metadata.labels.unwrap();
        assert_eq!(
            labels["app.kubernetes.io/component"],
            "etcd-service-account"
        );
        assert_eq!(sa.automount_service_account_token, Some(true));
    }

    #[test]
    fn automount_follows_the_operator_switch() {
        let mut ctx = ComponentContext::new("q", "a");
        ctx.disable_service_account_automount = true;
        let sa = build(&etcd("etcd-main", 3), &ctx).unwrap();
        assert_eq!(sa.automount_service_account_token, Some(false));
    }
}
