//! `etcd.conf.yaml` of the `<name>-config` ConfigMap, written exactly as etcd-druid renders it
//! (`internal/component/configmap/etcdconfig.go`): one template for all members, with
//! `initial-cluster` over the desired members and the advertise URLs as maps from member name
//! to URLs. quorate's agents read `cluster.json` instead; this key is kept so tools and people
//! used to druid find the configuration they expect.

use std::collections::BTreeMap;

use quorate_api::{Etcd, SecretReference};
use serde::Serialize;

use super::addresses::{PodMember, client_scheme, peer_scheme, pod_members, url};
use super::error::ComponentError;
use super::meta::EtcdIdentity;
use super::paths::{
    CLIENT_CA_MOUNT, CLIENT_SERVER_TLS_MOUNT, DATA_DIR, PEER_CA_MOUNT, PEER_SERVER_TLS_MOUNT,
    TLS_CERT_KEY, TLS_KEY_KEY, file_in,
};

/// druid's fixed `name`; the real member name is chosen per pod.
pub const TEMPLATE_NAME: &str = "etcd-config";
/// druid's fixed `initial-cluster-token`.
pub const INITIAL_CLUSTER_TOKEN: &str = "etcd-cluster";
/// druid's `initial-cluster-state`; the member side decides `existing` when it joins.
pub const INITIAL_CLUSTER_STATE: &str = "new";

/// The fields of druid's `etcdConfig`, in its order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct EtcdConfFile {
    /// Always [`TEMPLATE_NAME`].
    pub name: String,
    /// [`DATA_DIR`].
    pub data_dir: String,
    /// `basic` or `extensive`.
    pub metrics: String,
    /// Raft snapshot count.
    pub snapshot_count: u64,
    /// Whether the gRPC gateway is served.
    #[serde(rename = "enable-grpc-gateway")]
    pub enable_grpc_gateway: bool,
    /// Backend quota in bytes.
    pub quota_backend_bytes: u64,
    /// Always [`INITIAL_CLUSTER_TOKEN`].
    pub initial_cluster_token: String,
    /// Always [`INITIAL_CLUSTER_STATE`].
    pub initial_cluster_state: String,
    /// `<member>=<peer URL>` for every desired member and extra peer URL, then the members of
    /// the cluster this one bootstraps from.
    pub initial_cluster: String,
    /// `periodic` or `revision`.
    pub auto_compaction_mode: String,
    /// Auto-compaction retention.
    pub auto_compaction_retention: String,
    /// Peer listen URL on all interfaces.
    pub listen_peer_urls: String,
    /// Client listen URL on all interfaces.
    pub listen_client_urls: String,
    /// Member name → peer URLs it advertises.
    pub initial_advertise_peer_urls: BTreeMap<String, Vec<String>>,
    /// Member name → client URLs it advertises.
    pub advertise_client_urls: BTreeMap<String, Vec<String>>,
    /// Client TLS, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_transport_security: Option<SecurityConfig>,
    /// Peer TLS, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_transport_security: Option<SecurityConfig>,
    /// `spec.memberNamePrefix`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_name_prefix: Option<String>,
    /// Always true (etcd 3.5.26+ may join a 3.6 cluster).
    pub next_cluster_version_compatible: bool,
}

/// etcd's `transport-security` block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SecurityConfig {
    /// Server certificate.
    pub cert_file: String,
    /// Server key.
    pub key_file: String,
    /// Require client certificates.
    pub client_cert_auth: bool,
    /// CA bundle that verifies client certificates.
    #[serde(rename = "trusted-ca-file")]
    pub trusted_ca_file: String,
    /// Always false.
    pub auto_tls: bool,
    /// Peer only: skip checking the SAN of peer client certificates.
    #[serde(
        rename = "skip-client-san-verification",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub skip_client_san_verification: bool,
}

/// The configuration druid would render for `etcd`.
pub fn etcd_conf(etcd: &Etcd) -> Result<EtcdConfFile, ComponentError> {
    let id = EtcdIdentity::of(etcd)?;
    let spec = &etcd.spec;
    let members = pod_members(etcd, &id.name, &id.namespace, etcd.spec.replicas);
    let peer_port = spec.etcd.server_port();
    let client_port = spec.etcd.client_port();
    let peer_urls = |m: &PodMember| {
        let mut urls = vec![url(peer_scheme(etcd), &m.host, peer_port)];
        urls.extend(spec.etcd.additional_peer_urls_of(&m.pod).iter().cloned());
        urls
    };
    let mut initial_cluster: Vec<String> = members
        .iter()
        .flat_map(|m| {
            peer_urls(m)
                .into_iter()
                .map(|u| format!("{}={u}", m.member))
        })
        .collect();
    if let Some(source) = &spec.etcd.bootstrap_with_existing_cluster {
        initial_cluster.extend(
            source
                .members
                .iter()
                .flat_map(|m| m.peer_urls.iter().map(move |u| format!("{}={u}", m.name))),
        );
    }
    Ok(EtcdConfFile {
        name: TEMPLATE_NAME.to_string(),
        data_dir: DATA_DIR.to_string(),
        metrics: spec.etcd.metrics().as_str().to_string(),
        snapshot_count: spec.etcd.snapshot_count(),
        enable_grpc_gateway: spec.etcd.enable_grpc_gateway(),
        quota_backend_bytes: etcd.quota_bytes(),
        initial_cluster_token: INITIAL_CLUSTER_TOKEN.to_string(),
        initial_cluster_state: INITIAL_CLUSTER_STATE.to_string(),
        initial_cluster: initial_cluster.join(","),
        auto_compaction_mode: spec.auto_compaction_mode().as_str().to_string(),
        auto_compaction_retention: spec.auto_compaction_retention().to_string(),
        listen_peer_urls: url(peer_scheme(etcd), "0.0.0.0", peer_port),
        listen_client_urls: url(client_scheme(etcd), "0.0.0.0", client_port),
        initial_advertise_peer_urls: members
            .iter()
            .map(|m| (m.member.clone(), peer_urls(m)))
            .collect(),
        advertise_client_urls: members
            .iter()
            .map(|m| {
                let client = url(client_scheme(etcd), &m.host, client_port);
                (m.member.clone(), vec![client])
            })
            .collect(),
        client_transport_security: spec.etcd.client_url_tls.as_ref().map(|t| {
            security(
                &t.tls_ca_secret_ref,
                CLIENT_CA_MOUNT,
                CLIENT_SERVER_TLS_MOUNT,
                false,
            )
        }),
        peer_transport_security: spec.etcd.peer_url_tls.as_ref().map(|t| {
            security(
                &t.tls_ca_secret_ref,
                PEER_CA_MOUNT,
                PEER_SERVER_TLS_MOUNT,
                t.skip_client_san_verification.unwrap_or(false),
            )
        }),
        member_name_prefix: spec.member_name_prefix.clone().filter(|p| !p.is_empty()),
        next_cluster_version_compatible: true,
    })
}

fn security(
    ca: &SecretReference,
    ca_dir: &str,
    server_dir: &str,
    skip_san: bool,
) -> SecurityConfig {
    SecurityConfig {
        cert_file: file_in(server_dir, TLS_CERT_KEY),
        key_file: file_in(server_dir, TLS_KEY_KEY),
        client_cert_auth: true,
        trusted_ca_file: file_in(ca_dir, ca.data_key()),
        auto_tls: false,
        skip_client_san_verification: skip_san,
    }
}

/// [`etcd_conf`] as the YAML text stored under `etcd.conf.yaml`.
pub fn render(etcd: &Etcd) -> Result<String, ComponentError> {
    let conf = etcd_conf(etcd)?;
    serde_saphyr::to_string(&conf).map_err(|e| ComponentError::Serialize {
        what: "etcd.conf.yaml",
        name: conf.name.clone(),
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use quorate_api::{
        AdditionalPeerUrl, BootstrapMember, BootstrapWithExistingCluster, PeerTlsConfig, TlsConfig,
    };

    #[test]
    fn plain_cluster_matches_druid() {
        let conf = etcd_conf(&etcd("etcd-main", 3)).unwrap();
        assert_eq!(conf.name, "etcd-config");
        assert_eq!(conf.data_dir, "/var/etcd/data/new.etcd");
        assert_eq!(
            conf.initial_cluster,
            "etcd-main-0=http://etcd-main-0.etcd-main-peer.shoot.svc:2380,\
             etcd-main-1=http://etcd-main-1.etcd-main-peer.shoot.svc:2380,\
             etcd-main-2=http://etcd-main-2.etcd-main-peer.shoot.svc:2380"
        );
        assert_eq!(conf.listen_client_urls, "http://0.0.0.0:2379");
        assert_eq!(
            conf.advertise_client_urls["etcd-main-1"],
            ["http://etcd-main-1.etcd-main-peer.shoot.svc:2379"]
        );
        assert!(conf.client_transport_security.is_none());
        let text = render(&etcd("etcd-main", 1)).unwrap();
        assert!(
            text.contains("initial-cluster-token: etcd-cluster"),
            "{text}"
        );
        assert!(!text.contains("transport-security"), "{text}");
        assert!(
            text.contains("next-cluster-version-compatible: true"),
            "{text}"
        );
    }

    #[test]
    fn tls_switches_schemes_and_points_at_druids_mount_paths() {
        let mut e = etcd("etcd-main", 1);
        e.spec.etcd.client_url_tls = Some(TlsConfig {
            tls_ca_secret_ref: SecretReference {
                name: Some("ca".into()),
                data_key: Some("bundle.crt".into()),
                ..SecretReference::default()
            },
            ..TlsConfig::default()
        });
        e.spec.etcd.peer_url_tls = Some(PeerTlsConfig {
            skip_client_san_verification: Some(true),
            ..PeerTlsConfig::default()
        });
        let conf = etcd_conf(&e).unwrap();
        assert_eq!(conf.listen_peer_urls, "https://0.0.0.0:2380");
        let client = conf.client_transport_security.unwrap();
        assert_eq!(client.trusted_ca_file, "/var/etcd/ssl/ca/bundle.crt");
        assert_eq!(client.cert_file, "/var/etcd/ssl/server/tls.crt");
        assert!(!client.skip_client_san_verification);
        let peer = conf.peer_transport_security.unwrap();
        assert_eq!(peer.trusted_ca_file, "/var/etcd/ssl/peer/ca/ca.crt");
        assert_eq!(peer.key_file, "/var/etcd/ssl/peer/server/tls.key");
        assert!(peer.skip_client_san_verification);
    }

    #[test]
    fn extra_peer_urls_and_bootstrap_source_join_initial_cluster() {
        let mut e = etcd("etcd-main", 1);
        e.spec.etcd.additional_advertise_peer_urls = Some(vec![AdditionalPeerUrl {
            member_name: "etcd-main-0".into(),
            urls: vec!["http://10.0.0.1:2380".into()],
        }]);
        e.spec.etcd.bootstrap_with_existing_cluster = Some(BootstrapWithExistingCluster {
            members: vec![BootstrapMember {
                name: "old-0".into(),
                peer_urls: vec!["http://old-0:2380".into()],
            }],
            client_endpoints: vec![],
        });
        let conf = etcd_conf(&e).unwrap();
        assert_eq!(
            conf.initial_cluster,
            "etcd-main-0=http://etcd-main-0.etcd-main-peer.shoot.svc:2380,\
             etcd-main-0=http://10.0.0.1:2380,old-0=http://old-0:2380"
        );
        assert_eq!(conf.initial_advertise_peer_urls["etcd-main-0"].len(), 2);
    }
}
