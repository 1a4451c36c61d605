//! Peer Service `<name>-peer`: headless, the StatefulSet's `serviceName`, so every member has
//! the stable DNS name `<pod>.<name>-peer.<ns>.svc` it advertises. Not-ready addresses are
//! published because members must reach each other before any of them is ready.

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use quorate_api::Etcd;
use quorate_api::names::{LABEL_COMPONENT, component, default_labels, peer_service_name};

use crate::last_operation::ErrorCode;

use super::client_service::tcp_port;
use super::error::ComponentError;
use super::meta::EtcdIdentity;

/// The `lastErrors` code when the peer Service cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncPeerService;

/// Port name of etcd's peer port.
pub const PEER_PORT_NAME: &str = "peer";

/// The headless peer Service. Its selector adds `component=etcd-statefulset` to druid's default
/// labels (as druid's client Service does), so other pods of the cluster, such as a compaction
/// job, never get a peer address.
pub fn build(etcd: &Etcd) -> Result<Service, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let mut selector = default_labels(&id.name);
    selector.insert(
        LABEL_COMPONENT.to_string(),
        component::STATEFULSET.to_string(),
    );
    Ok(Service {
        metadata: id.object_meta(component::PEER_SERVICE, &peer_service_name(&id.name)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            cluster_ip: Some("None".to_string()),
            session_affinity: Some("None".to_string()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![tcp_port(PEER_PORT_NAME, etcd.spec.etcd.server_port())]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn headless_publishing_not_ready_addresses() {
        let mut e = etcd("etcd-main", 3);
        e.spec.etcd.server_port = Some(12380);
        let svc = build(&e).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("etcd-main-peer"));
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports = spec.ports.unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some("peer"));
        assert_eq!(ports[0].port, 12380);
        assert_eq!(
            spec.selector.unwrap()["app.kubernetes.io/component"],
            "etcd-statefulset"
        );
        assert_eq!(
            svc.metadata.labels.unwrap()["app.kubernetes.io/component"],
            "etcd-peer-service"
        );
    }
}
