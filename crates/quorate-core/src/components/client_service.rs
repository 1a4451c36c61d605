//! Client Service `<name>-client`: the stable ClusterIP address clients (kube-apiserver) use.
//! Same ports, names and selector as druid's, so clients configured for druid keep working.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use quorate_api::Etcd;
use quorate_api::names::{LABEL_COMPONENT, client_service_name, component, default_labels};

use crate::last_operation::ErrorCode;

use super::error::ComponentError;
use super::meta::{EtcdIdentity, merged};

/// The `lastErrors` code when the client Service cannot be created or updated.
pub const SYNC_ERROR: ErrorCode = ErrorCode::SyncClientService;

/// Port name of etcd's client port.
pub const CLIENT_PORT_NAME: &str = "client";
/// Port name of etcd's peer port on the client Service (druid keeps it for old clients).
pub const SERVER_PORT_NAME: &str = "server";
/// Port name of the agent's HTTP port (druid's backup-restore port).
pub const BACKUP_PORT_NAME: &str = "backuprestore";

/// The client Service. Labels from `spec.etcd.clientService.labels` are laid over the managed
/// ones (as in druid); its annotations and `trafficDistribution` are copied.
pub fn build(etcd: &Etcd) -> Result<Service, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let name = client_service_name(&id.name);
    let mut metadata = id.object_meta(component::CLIENT_SERVICE, &name);
    let extra = etcd.spec.etcd.client_service.as_ref();
    if let (Some(labels), Some(user)) = (
        metadata.labels.as_mut(),
        extra.and_then(|c| c.labels.as_ref()),
    ) {
        *labels = merged(labels, user);
    }
    metadata.annotations = extra.and_then(|c| c.annotations.clone());
    let mut selector = default_labels(&id.name);
    selector.insert(
        LABEL_COMPONENT.to_string(),
        component::STATEFULSET.to_string(),
    );
    let spec = &etcd.spec;
    Ok(Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_string()),
            session_affinity: Some("None".to_string()),
            selector: Some(selector),
            ports: Some(vec![
                tcp_port(CLIENT_PORT_NAME, spec.etcd.client_port()),
                tcp_port(SERVER_PORT_NAME, spec.etcd.server_port()),
                tcp_port(BACKUP_PORT_NAME, spec.backup.port()),
            ]),
            traffic_distribution: extra.and_then(|c| c.traffic_distribution.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// A TCP Service port that forwards to the same port number on the pod.
pub(crate) fn tcp_port(name: &str, port: u16) -> ServicePort {
    ServicePort {
        name: Some(name.to_string()),
        protocol: Some("TCP".to_string()),
        port: i32::from(port),
        target_port: Some(IntOrString::Int(i32::from(port))),
        ..ServicePort::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use quorate_api::ClientService;
    use std::collections::BTreeMap;

    fn ports(svc: &Service) -> Vec<(String, i32)> {
        svc.spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.port))
            .collect()
    }

    #[test]
    fn default_ports_and_statefulset_selector() {
        let svc = build(&etcd("etcd-main", 3)).unwrap();
        assert_eq!(svc.metadata.name.as_deref(), Some("etcd-main-client"));
        assert_eq!(
            ports(&svc),
            [
                ("client".to_string(), 2379),
                ("server".to_string(), 2380),
                ("backuprestore".to_string(), 8080)
            ]
        );
        let spec = svc.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        let selector = spec.selector.unwrap();
        assert_eq!(selector["app.kubernetes.io/component"], "etcd-statefulset");
        assert_eq!(selector["app.kubernetes.io/part-of"], "etcd-main");
        assert_eq!(svc.metadata.annotations, None);
        assert_eq!(spec.traffic_distribution, None);
    }

    #[test]
    fn spec_ports_override_the_defaults() {
        let mut e = etcd("etcd-main", 3);
        e.spec.etcd.client_port = Some(12379);
        e.spec.etcd.server_port = Some(12380);
        e.spec.backup.port = Some(18080);
        let svc = build(&e).unwrap();
        assert_eq!(
            ports(&svc),
            [
                ("client".to_string(), 12379),
                ("server".to_string(), 12380),
                ("backuprestore".to_string(), 18080)
            ]
        );
        let target = svc.spec.unwrap().ports.unwrap()[0].target_port.clone();
        assert_eq!(target, Some(IntOrString::Int(12379)));
    }

    #[test]
    fn client_service_extras_are_applied() {
        let mut e = etcd("etcd-main", 3);
        e.spec.etcd.client_service = Some(ClientService {
            annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
            labels: Some(BTreeMap::from([("team".into(), "x".into())])),
            traffic_distribution: Some("PreferClose".into()),
        });
        let svc = build(&e).unwrap();
        let labels = svc.metadata.labels.unwrap();
        assert_eq!(labels["team"], "x");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "etcd-druid");
        assert_eq!(svc.metadata.annotations.unwrap()["a"], "b");
        assert_eq!(
            svc.spec.unwrap().traffic_distribution.as_deref(),
            Some("PreferClose")
        );
    }
}
