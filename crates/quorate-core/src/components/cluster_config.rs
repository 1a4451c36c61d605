//! quorate's [`ClusterConfig`] for members running as pods (the `cluster.json` key of the
//! `<name>-config` ConfigMap): the same configuration the local runtime writes as a file, with
//! the members' stable DNS names instead of loopback, listening on all interfaces, and the
//! certificate and store paths where the StatefulSet mounts them.
//!
//! [`assemble`] is the part that does not depend on where the cluster runs: both this module
//! and the local runtime (`quorate-local`'s `render.rs`, loopback hosts, its own ports and
//! state-directory paths) call it with their [`Placement`] and [`PlacedMember`]s.

use quorate_api::Etcd;
use quorate_api::annotations::ADOPT_BACKUPS;
use quorate_api::names::{delta_snapshot_lease_name, full_snapshot_lease_name};
use quorate_api::provider::StorageProvider;

use super::addresses::{agent_scheme, client_scheme, peer_scheme, pod_members, url};
use super::error::ComponentError;
use super::meta::EtcdIdentity;
use super::paths::{
    BACKUP_CA_MOUNT, BACKUP_CLIENT_TLS_MOUNT, BACKUP_ENCRYPTION_KEY_DIR, BACKUP_SECRET_MOUNT,
    BACKUP_SERVER_TLS_MOUNT, CLIENT_CA_MOUNT, CLIENT_CLIENT_TLS_MOUNT, CLIENT_SERVER_TLS_MOUNT,
    LOCAL_BACKUP_ROOT, PEER_CA_MOUNT, PEER_SERVER_TLS_MOUNT, TLS_CERT_KEY, TLS_KEY_KEY, file_in,
};
use crate::cluster_config::{BackupConfig, ClusterConfig, EtcdSettings, MemberEndpoints, TlsFiles};

/// Host etcd and the agent listen on in a pod.
pub const POD_LISTEN_HOST: &str = "0.0.0.0";

/// What an environment decides for a cluster's configuration; everything else follows from
/// the `Etcd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Namespace of the `Etcd`.
    pub namespace: String,
    /// `initial-cluster-token`, unique per incarnation (see [`cluster_token`]).
    pub cluster_token: String,
    /// Members that bootstrap a brand-new cluster.
    pub bootstrap_members: Vec<String>,
    /// Host etcd listens on.
    pub listen_host: String,
    /// Client TLS files, when client TLS is configured.
    pub client_tls: Option<TlsFiles>,
    /// Peer TLS files, when peer TLS is configured.
    pub peer_tls: Option<TlsFiles>,
    /// The agents' TLS files, when `spec.backup.tls` is configured.
    pub agent_tls: Option<TlsFiles>,
    /// Directory under which `Local` containers live.
    pub local_root: String,
    /// Directory holding the store Secret's keys, when one is used.
    pub secret_dir: Option<String>,
    /// Directory the agents put the backup encryption keys in, when backups are encrypted.
    pub encryption_key_dir: Option<String>,
    /// Identity of this incarnation (the `Etcd`'s uid), written beside the backups.
    pub cluster_uid: String,
    /// Members placed beyond the desired ones that etcd still lists: they run until removed.
    pub leaving: Vec<String>,
    /// The etcd version the members run (core `etcd_version::decide`).
    pub etcd_version: quorate_api::EtcdVersion,
    /// Secrets the agents write as files (see [`super::tls_secrets`]).
    pub secret_files: Vec<crate::cluster_config::SecretFiles>,
}

/// Where one member runs, as its environment decides: the host it is reached at and its ports.
/// URL schemes follow the `Etcd`'s TLS settings, so they are not the environment's to choose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedMember {
    /// etcd member name (also the name of its lease, as in druid).
    pub name: String,
    /// Host the member is reached at (a pod's stable DNS name, or loopback).
    pub host: String,
    /// Port etcd listens on for peers.
    pub peer_port: u16,
    /// Port etcd listens on for clients.
    pub client_port: u16,
    /// Port the agent listens on.
    pub agent_port: u16,
    /// Port of etcd's plain-HTTP metrics listener.
    pub metrics_port: Option<u16>,
}

impl PlacedMember {
    /// The member's endpoints, with the schemes `etcd`'s TLS settings ask for.
    pub fn endpoints(self, etcd: &Etcd) -> MemberEndpoints {
        MemberEndpoints {
            lease_name: self.name.clone(),
            peer_url: url(peer_scheme(etcd), &self.host, self.peer_port),
            client_url: url(client_scheme(etcd), &self.host, self.client_port),
            peer_port: self.peer_port,
            client_port: self.client_port,
            agent_url: url(agent_scheme(etcd), &self.host, self.agent_port),
            agent_port: self.agent_port,
            metrics_port: self.metrics_port,
            name: self.name,
        }
    }
}

/// The configuration of `etcd` with `members` placed as `placement` says.
pub fn assemble(etcd: &Etcd, placement: Placement, members: Vec<PlacedMember>) -> ClusterConfig {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let agent_token_secret = Some(quorate_api::names::agent_token_secret_name(&name));
    let members: Vec<MemberEndpoints> = members.into_iter().map(|m| m.endpoints(etcd)).collect();
    let encryption_secret = quorate_api::annotations::backup_encryption_secret(etcd);
    let backup = etcd.spec.backup.store.as_ref().map(|_| BackupConfig {
        spec: etcd.spec.backup.clone(),
        local_root: placement.local_root,
        secret_dir: placement.secret_dir,
        full_snapshot_lease: full_snapshot_lease_name(&name),
        delta_snapshot_lease: delta_snapshot_lease_name(&name),
        cluster_uid: placement.cluster_uid,
        adopt_foreign_backups: adopts_foreign_backups(etcd),
        new_chain_request: annotation(etcd, quorate_api::annotations::NEW_BACKUP_CHAIN),
        encryption_secret: encryption_secret.map(String::from),
        encryption_key_dir: encryption_secret.and(placement.encryption_key_dir),
        // Validation refused a value that is not a time.
        accept_plaintext_before: quorate_api::annotations::accept_plaintext_before(etcd)
            .ok()
            .flatten(),
    });
    let etcd_version_target = quorate_api::etcd_version::requested(etcd).ok().flatten();
    ClusterConfig {
        cluster_name: name,
        namespace: placement.namespace,
        cluster_token: placement.cluster_token,
        members,
        leaving: placement.leaving,
        bootstrap_members: placement.bootstrap_members,
        listen_host: placement.listen_host,
        etcd_version: placement.etcd_version,
        etcd_version_target,
        etcd: EtcdSettings {
            // Lowered while the 3.6 step of a chain to 3.7 waits for raft snapshots.
            snapshot_count: crate::etcd_version::snapshot_count(
                placement.etcd_version,
                etcd_version_target,
                etcd.spec.etcd.snapshot_count(),
            ),
            ..EtcdSettings::from_etcd(etcd)
        },
        client_tls: placement.client_tls,
        peer_tls: placement.peer_tls,
        agent_tls: placement.agent_tls,
        secret_files: placement.secret_files,
        heartbeat_millis: u64::try_from(etcd.spec.etcd.heartbeat_duration().as_millis())
            .unwrap_or(u64::MAX),
        backup,
        recovery_request: annotation(etcd, quorate_api::annotations::RECOVER),
        maintenance: crate::cluster_config::MaintenanceConfig::from_etcd(etcd),
        hibernation_request: (etcd.spec.replicas == 0)
            .then(|| etcd.metadata.generation.unwrap_or(0).to_string()),
        agent_token_secret,
    }
}

/// The value of annotation `key` on `etcd`, if set and not empty.
pub fn annotation(etcd: &Etcd, key: &str) -> Option<String> {
    etcd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// `initial-cluster-token`: the cluster name plus the first 8 characters of its uid, so a
/// recreated cluster of the same name never meets members of the old one.
pub fn cluster_token(name: &str, uid: &str) -> String {
    let short: String = uid.chars().take(8).collect();
    format!("{name}-{short}")
}

/// Whether [`ADOPT_BACKUPS`] is `"true"` on the `Etcd`.
pub fn adopts_foreign_backups(etcd: &Etcd) -> bool {
    etcd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ADOPT_BACKUPS))
        .is_some_and(|v| v == "true")
}

/// The configuration the agents of `etcd` read in Kubernetes, from the facts the controller
/// observed (`ctx`): the bootstrap set recorded when the cluster first ran (`None`, never ran,
/// lets every desired member bootstrap it), the running members and the etcd version.
pub fn render_for_kubernetes(
    etcd: &Etcd,
    ctx: &super::ComponentContext,
) -> Result<ClusterConfig, ComponentError> {
    let bootstrap_members = ctx.bootstrap_members.as_deref();
    let running = ctx.running.as_ref();
    let id = EtcdIdentity::of(etcd)?;
    let spec = &etcd.spec;
    let (peer_port, client_port, agent_port) = (
        spec.etcd.server_port(),
        spec.etcd.client_port(),
        spec.backup.port(),
    );
    let count = running.map_or(etcd.spec.replicas, |r| r.replicas);
    let members: Vec<PlacedMember> = pod_members(etcd, &id.name, &id.namespace, count)
        .into_iter()
        .map(|m| PlacedMember {
            name: m.member,
            host: m.host,
            peer_port,
            client_port,
            agent_port,
            metrics_port: Some(super::addresses::ETCD_METRICS_PORT),
        })
        .collect();
    let bootstrap_members = match bootstrap_members {
        Some(recorded) => recorded.to_vec(),
        None => members.iter().map(|m| m.name.clone()).collect(),
    };
    let leaving = running.map(|r| r.leaving.clone()).unwrap_or_default();
    let placement = Placement {
        cluster_token: cluster_token(&id.name, &id.uid),
        namespace: id.namespace,
        bootstrap_members,
        listen_host: POD_LISTEN_HOST.to_string(),
        client_tls: spec.etcd.client_url_tls.as_ref().map(|t| {
            pod_tls_files(
                t,
                CLIENT_CA_MOUNT,
                CLIENT_SERVER_TLS_MOUNT,
                CLIENT_CLIENT_TLS_MOUNT,
            )
        }),
        peer_tls: spec.etcd.peer_url_tls.as_ref().map(|t| TlsFiles {
            ca_file: file_in(PEER_CA_MOUNT, t.tls_ca_secret_ref.data_key()),
            cert_file: file_in(PEER_SERVER_TLS_MOUNT, TLS_CERT_KEY),
            key_file: file_in(PEER_SERVER_TLS_MOUNT, TLS_KEY_KEY),
            client_cert_file: None,
            client_key_file: None,
            trusted_ca_digest: None,
        }),
        agent_tls: spec.backup.tls.as_ref().map(|t| {
            pod_tls_files(
                t,
                BACKUP_CA_MOUNT,
                BACKUP_SERVER_TLS_MOUNT,
                BACKUP_CLIENT_TLS_MOUNT,
            )
        }),
        local_root: LOCAL_BACKUP_ROOT.to_string(),
        secret_dir: mounts_store_secret(etcd).then(|| BACKUP_SECRET_MOUNT.to_string()),
        encryption_key_dir: Some(BACKUP_ENCRYPTION_KEY_DIR.to_string()),
        cluster_uid: id.uid,
        leaving,
        etcd_version: ctx.etcd_version,
        secret_files: super::tls_secrets::tls_secret_files(etcd),
    };
    Ok(assemble(etcd, placement, members))
}

/// Where the agent writes the files of TLS block `tls` in a pod: the CA, server and client
/// Secrets each in its directory.
fn pod_tls_files(
    tls: &quorate_api::TlsConfig,
    ca_dir: &str,
    server_dir: &str,
    client_dir: &str,
) -> TlsFiles {
    let client = |key: &str| {
        tls.client_tls_secret_ref
            .as_ref()
            .map(|_| file_in(client_dir, key))
    };
    TlsFiles {
        ca_file: file_in(ca_dir, tls.tls_ca_secret_ref.data_key()),
        cert_file: file_in(server_dir, TLS_CERT_KEY),
        key_file: file_in(server_dir, TLS_KEY_KEY),
        client_cert_file: client(TLS_CERT_KEY),
        client_key_file: client(TLS_KEY_KEY),
        trusted_ca_digest: None,
    }
}

/// Whether the pod mounts the store Secret at [`BACKUP_SECRET_MOUNT`]: a store with a
/// `secretRef` and a provider other than `Local` (whose Secret only names a host path, read by
/// the controller).
pub fn mounts_store_secret(etcd: &Etcd) -> bool {
    etcd.spec.backup.store.as_ref().is_some_and(|s| {
        s.secret_ref
            .as_ref()
            .and_then(|r| r.name.as_deref())
            .is_some_and(|n| !n.is_empty())
            && s.provider_kind() != Some(StorageProvider::Local)
    })
}

/// The member a pod runs: the one whose advertised peer host is `<pod>.<peer service>...`.
/// This is how `quorate agent --member-from-pod $(POD_NAME)` finds its member without knowing
/// `spec.memberNamePrefix`.
pub fn member_for_pod<'a>(config: &'a ClusterConfig, pod: &str) -> Option<&'a MemberEndpoints> {
    config.members.iter().find(|m| {
        let host = m
            .peer_url
            .split_once("://")
            .map_or(m.peer_url.as_str(), |(_, rest)| rest);
        host.split(['.', ':']).next() == Some(pod)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::meta::tests::etcd;
    use k8s_openapi::api::core::v1::SecretReference as CoreSecretReference;
    use quorate_api::{StoreSpec, TlsConfig};
    use std::collections::BTreeMap;

    fn ctx() -> crate::components::ComponentContext {
        crate::components::ComponentContext::new("quorate:test", "alpine:test")
    }

    fn recorded_ctx(bootstrap: Vec<String>) -> crate::components::ComponentContext {
        let mut ctx = ctx();
        ctx.bootstrap_members = Some(bootstrap);
        ctx
    }

    #[test]
    fn the_decided_etcd_version_is_what_the_members_run() {
        let mut ctx = ctx();
        ctx.etcd_version = quorate_api::EtcdVersion::V3_4;
        let c = render_for_kubernetes(&etcd("etcd-main", 3), &ctx).unwrap();
        assert_eq!(c.etcd_version, quorate_api::EtcdVersion::V3_4);
    }

    #[test]
    fn the_agents_learn_the_requested_version_and_the_rollout_hash_ignores_it() {
        use quorate_api::EtcdVersion;
        let mut ctx = ctx();
        ctx.etcd_version = EtcdVersion::V3_6;
        let plain = etcd("etcd-main", 3);
        let c = render_for_kubernetes(&plain, &ctx).unwrap();
        assert_eq!(c.etcd_version_target, None);
        let mut asked = plain.clone();
        asked.metadata.annotations = Some(
            [(
                quorate_api::annotations::ETCD_VERSION.to_string(),
                "3.7".to_string(),
            )]
            .into(),
        );
        let mut asked_config = render_for_kubernetes(&asked, &ctx).unwrap();
        assert_eq!(asked_config.etcd_version_target, Some(EtcdVersion::V3_7));
        // The request lowers the snapshot count (a rollout); the target itself rolls nothing.
        asked_config.etcd.snapshot_count = c.etcd.snapshot_count;
        assert_eq!(
            crate::membership::rollout::config_hash(&asked_config),
            crate::membership::rollout::config_hash(&c)
        );
    }

    #[test]
    fn members_use_dns_names_and_listen_everywhere() {
        let c = render_for_kubernetes(&etcd("etcd-main", 3), &ctx()).unwrap();
        assert_eq!(c.cluster_name, "etcd-main");
        assert_eq!(c.namespace, "shoot");
        assert_eq!(c.cluster_token, "etcd-main-0a1b2c3d");
        assert_eq!(c.listen_host, "0.0.0.0");
        let m = &c.members[2];
        assert_eq!(m.name, "etcd-main-2");
        assert_eq!(m.lease_name, "etcd-main-2");
        assert_eq!(
            m.peer_url,
            "http://etcd-main-2.etcd-main-peer.shoot.svc:2380"
        );
        assert_eq!(
            m.client_url,
            "http://etcd-main-2.etcd-main-peer.shoot.svc:2379"
        );
        assert_eq!(
            m.agent_url,
            "http://etcd-main-2.etcd-main-peer.shoot.svc:8080"
        );
        assert_eq!(
            c.bootstrap_members,
            ["etcd-main-0", "etcd-main-1", "etcd-main-2"]
        );
        assert_eq!(c.heartbeat_millis, 10_000);
        assert!(c.backup.is_none() && c.client_tls.is_none() && c.peer_tls.is_none());
    }

    #[test]
    fn recorded_bootstrap_members_are_kept() {
        let recorded = vec!["etcd-main-0".to_string()];
        let c =
            render_for_kubernetes(&etcd("etcd-main", 3), &recorded_ctx(recorded.clone())).unwrap();
        assert_eq!(c.bootstrap_members, recorded);
        let c = render_for_kubernetes(&etcd("etcd-main", 3), &recorded_ctx(Vec::new())).unwrap();
        assert!(c.bootstrap_members.is_empty());
    }

    #[test]
    fn tls_files_are_under_the_mount_paths() {
        let mut e = etcd("etcd-main", 1);
        e.spec.etcd.client_url_tls = Some(TlsConfig {
            client_tls_secret_ref: Some(CoreSecretReference::default()),
            ..TlsConfig::default()
        });
        let c = render_for_kubernetes(&e, &ctx()).unwrap();
        let tls = c.client_tls.unwrap();
        assert_eq!(tls.ca_file, "/var/etcd/ssl/ca/ca.crt");
        assert_eq!(tls.cert_file, "/var/etcd/ssl/server/tls.crt");
        assert_eq!(
            tls.client_key_file.as_deref(),
            Some("/var/etcd/ssl/client/tls.key")
        );
        assert!(c.members[0].client_url.starts_with("https://"));
        assert!(c.members[0].peer_url.starts_with("http://"));
        assert!(c.members[0].agent_url.starts_with("http://"));
    }

    #[test]
    fn backups_use_the_pod_paths_and_the_secret_only_when_mounted() {
        let mut e = etcd("etcd-main", 1);
        e.spec.backup.store = Some(StoreSpec {
            provider: Some("aws".into()),
            container: Some("bucket".into()),
            prefix: "etcd-main".into(),
            secret_ref: Some(CoreSecretReference {
                name: Some("creds".into()),
                namespace: None,
            }),
            ..StoreSpec::default()
        });
        e.metadata.annotations = Some(BTreeMap::from([
            (ADOPT_BACKUPS.to_string(), "true".to_string()),
            (
                quorate_api::annotations::ACCEPT_PLAINTEXT_BEFORE.to_string(),
                "2026-11-20T10:00:00Z".to_string(),
            ),
        ]));
        let b = render_for_kubernetes(&e, &ctx()).unwrap().backup.unwrap();
        assert_eq!(
            b.accept_plaintext_before,
            Some("2026-11-20T10:00:00Z".parse().unwrap()),
            "the migration window reaches the agents"
        );
        assert_eq!(b.local_root, "/var/etcd/backups");
        assert_eq!(b.secret_dir.as_deref(), Some("/var/etcd-backup"));
        assert_eq!(b.full_snapshot_lease, "etcd-main-full-snap");
        assert_eq!(b.delta_snapshot_lease, "etcd-main-delta-snap");
        assert_eq!(b.cluster_uid, "0a1b2c3d-0000-4000-8000-000000000001");
        assert!(b.adopt_foreign_backups);
        if let Some(store) = e.spec.backup.store.as_mut() {
            store.provider = Some("Local".into());
        }
        let b = render_for_kubernetes(&e, &ctx()).unwrap().backup.unwrap();
        assert_eq!(b.secret_dir, None);
    }

    #[test]
    fn pods_find_their_member_even_with_a_prefix() {
        let mut e = etcd("etcd-main", 3);
        e.spec.member_name_prefix = Some("seed".into());
        let c = render_for_kubernetes(&e, &ctx()).unwrap();
        assert_eq!(
            member_for_pod(&c, "etcd-main-1").map(|m| m.name.as_str()),
            Some("seed-etcd-main-1")
        );
        assert!(member_for_pod(&c, "etcd-main").is_none());
        assert!(member_for_pod(&c, "etcd-main-3").is_none());
    }

    #[test]
    fn token_takes_eight_characters_of_short_uids_too() {
        assert_eq!(cluster_token("a", "123"), "a-123");
        assert_eq!(cluster_token("a", "123456789"), "a-12345678");
    }
}
