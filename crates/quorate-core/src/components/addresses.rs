//! Who the members of an `Etcd` are in Kubernetes and where they are reached: pod, member name
//! and stable DNS name per ordinal, and the URL schemes. Shared by `etcd.conf.yaml` and
//! `cluster.json` so both advertise the same URLs.

/// The port etcd serves its metrics on in a member pod (`--listen-metrics-urls`, plain HTTP,
/// also with client TLS), as kubeadm runs etcd; named `metrics` on the pod.
pub const ETCD_METRICS_PORT: u16 = 2381;

use quorate_api::Etcd;
use quorate_api::names::{member_name, peer_hostname, pod_name};

/// One desired member and its pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodMember {
    /// StatefulSet ordinal.
    pub ordinal: u32,
    /// Pod name `<name>-<ordinal>`.
    pub pod: String,
    /// etcd member name (`<prefix>-<pod>` with `spec.memberNamePrefix`, else the pod name).
    pub member: String,
    /// Stable DNS name through the peer Service: `<pod>.<name>-peer.<ns>.svc`.
    pub host: String,
}

/// The members for the first `count` ordinals, in ordinal order.
pub fn pod_members(etcd: &Etcd, name: &str, namespace: &str, count: i32) -> Vec<PodMember> {
    (0..u32::try_from(count).unwrap_or(0))
        .map(|ordinal| PodMember {
            ordinal,
            pod: pod_name(name, ordinal),
            member: member_name(etcd, ordinal),
            host: peer_hostname(name, namespace, ordinal),
        })
        .collect()
}

/// `https` when the peer URL has TLS, else `http`.
pub fn peer_scheme(etcd: &Etcd) -> &'static str {
    scheme(etcd.peer_tls_enabled())
}

/// `https` when the client URL has TLS, else `http`.
pub fn client_scheme(etcd: &Etcd) -> &'static str {
    scheme(etcd.client_tls_enabled())
}

/// `https` when the agents serve TLS (`spec.backup.tls`), else `http`.
pub fn agent_scheme(etcd: &Etcd) -> &'static str {
    scheme(etcd.spec.backup.tls.is_some())
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

/// `<scheme>://<host>:<port>`.
pub fn url(scheme: &str, host: &str, port: u16) -> String {
    format!("{scheme}://{host}:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;

    #[test]
    fn members_are_addressed_through_the_peer_service() {
        let mut e = etcd("etcd-main", 2);
        e.spec.member_name_prefix = Some("seed".into());
        let members = pod_members(&e, "etcd-main", "shoot", e.spec.replicas);
        assert_eq!(
            members[1],
            PodMember {
                ordinal: 1,
                pod: "etcd-main-1".into(),
                member: "seed-etcd-main-1".into(),
                host: "etcd-main-1.etcd-main-peer.shoot.svc".into(),
            }
        );
        assert_eq!(
            url(peer_scheme(&e), &members[0].host, 2380),
            "http://etcd-main-0.etcd-main-peer.shoot.svc:2380"
        );
    }
}
