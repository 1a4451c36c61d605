//! The one container of a member pod, `etcd`: `quorate agent`, which runs etcd as its child.
//! It replaces druid's etcd-wrapper and backup-restore containers, so it exposes etcd's client
//! and peer ports and the agent's HTTP port (druid's backup-restore port).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Probe,
    ResourceRequirements, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use quorate_api::Etcd;
use quorate_api::defaults::{DEFAULT_CONTAINER_CPU_REQUEST, DEFAULT_CONTAINER_MEMORY_REQUEST};

use super::agent_args::{COMMAND, ENV_POD_NAME, ENV_POD_NAMESPACE, agent_args};
use super::client_service::{BACKUP_PORT_NAME, CLIENT_PORT_NAME};
use super::context::ComponentContext;
use super::peer_service::PEER_PORT_NAME;

/// Name of the member container (druid's name for its etcd container).
pub const CONTAINER_NAME: &str = "etcd";
/// Path of the readiness endpoint of the agent.
pub const READINESS_PATH: &str = "/healthz";
/// Seconds before the first readiness probe: the agent's `/healthz` only reads what its own
/// probe of etcd (every 200 ms) last found, so it tells the truth from the start.
pub const READINESS_INITIAL_DELAY_SECONDS: i32 = 1;
/// Seconds between readiness probes: a member is ready within about a second of serving.
pub const READINESS_PERIOD_SECONDS: i32 = 1;
/// Failed probes before the pod is marked not ready: three seconds, longer than a leader
/// election (etcd's election timeout is one second), so a brief blip does not flap the
/// Service's endpoints.
pub const READINESS_FAILURE_THRESHOLD: i32 = 3;

/// The member container of `etcd`, mounting `mounts`. There is deliberately no liveness or
/// startup probe: a restart in the middle of a restore or a long defragmentation does harm
/// (druid removed them for that reason, druid#424); the agent restarts etcd itself.
pub fn build(
    etcd: &Etcd,
    name: &str,
    ctx: &ComponentContext,
    mounts: Vec<VolumeMount>,
) -> Container {
    let spec = &etcd.spec;
    let agent_port = i32::from(spec.backup.port());
    Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(ctx.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_string()),
        command: Some(vec![COMMAND.to_string()]),
        args: Some(agent_args(name)),
        env: Some(vec![
            field_env(ENV_POD_NAME, "metadata.name"),
            field_env(ENV_POD_NAMESPACE, "metadata.namespace"),
        ]),
        ports: Some(vec![
            tcp(CLIENT_PORT_NAME, i32::from(spec.etcd.client_port())),
            tcp(PEER_PORT_NAME, i32::from(spec.etcd.server_port())),
            tcp(BACKUP_PORT_NAME, agent_port),
            tcp("metrics", i32::from(super::addresses::ETCD_METRICS_PORT)),
        ]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(READINESS_PATH.to_string()),
                port: IntOrString::Int(agent_port),
                // The kubelet does not verify the certificate, and `/healthz` needs none.
                scheme: Some(
                    if etcd.spec.backup.tls.is_some() {
                        "HTTPS"
                    } else {
                        "HTTP"
                    }
                    .to_string(),
                ),
                ..HTTPGetAction::default()
            }),
            initial_delay_seconds: Some(READINESS_INITIAL_DELAY_SECONDS),
            period_seconds: Some(READINESS_PERIOD_SECONDS),
            failure_threshold: Some(READINESS_FAILURE_THRESHOLD),
            ..Probe::default()
        }),
        resources: Some(
            spec.etcd
                .resources
                .clone()
                .unwrap_or_else(default_resources),
        ),
        security_context: Some(super::security::container()),
        volume_mounts: Some(mounts),
        ..Container::default()
    }
}

/// druid's default requests (50m CPU, 128Mi memory), no limits.
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            (
                "cpu".to_string(),
                Quantity(DEFAULT_CONTAINER_CPU_REQUEST.to_string()),
            ),
            (
                "memory".to_string(),
                Quantity(DEFAULT_CONTAINER_MEMORY_REQUEST.to_string()),
            ),
        ])),
        ..ResourceRequirements::default()
    }
}

fn field_env(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_string(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn tcp(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_string()),
        container_port: port,
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn runs_the_agent_with_pod_identity_from_the_downward_api() {
        let ctx = ComponentContext::new("quorate:1", "alpine:1");
        let c = build(&etcd("etcd-main", 3), "etcd-main", &ctx, Vec::new());
        assert_eq!(c.name, "etcd");
        assert_eq!(c.image.as_deref(), Some("quorate:1"));
        assert_eq!(c.command.as_deref(), Some(&["quorate".to_string()][..]));
        assert_eq!(c.args.as_ref().unwrap()[0], "agent");
        let env = c.env.unwrap();
        assert_eq!(env[0].name, "POD_NAME");
        assert_eq!(
            env[0]
                .value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "metadata.name"
        );
        assert_eq!(env[1].name, "POD_NAMESPACE");
        assert!(c.liveness_probe.is_none() && c.startup_probe.is_none());
        assert_eq!(c.resources, Some(default_resources()));
    }

    #[test]
    fn readiness_is_the_agents_healthz_on_the_backup_port() {
        let mut e = etcd("etcd-main", 3);
        e.spec.backup.port = Some(18080);
        let ctx = ComponentContext::new("q", "a");
        let c = build(&e, "etcd-main", &ctx, Vec::new());
        let probe = c.readiness_probe.unwrap();
        let get = probe.http_get.unwrap();
        assert_eq!(get.path.as_deref(), Some("/healthz"));
        assert_eq!(get.port, IntOrString::Int(18080));
        assert_eq!(probe.initial_delay_seconds, Some(1));
        assert_eq!(probe.period_seconds, Some(1));
        assert_eq!(probe.failure_threshold, Some(3));
        let ports: Vec<_> = c
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap(), p.container_port))
            .collect();
        assert_eq!(
            ports,
            [
                ("client".to_string(), 2379),
                ("peer".to_string(), 2380),
                ("backuprestore".to_string(), 18080),
                ("metrics".to_string(), 2381)
            ]
        );
    }
}
