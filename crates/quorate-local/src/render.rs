//! The cluster configuration of a local cluster: every member on loopback with the ports its
//! record gives it. The local counterpart of the operator's ConfigMap.

use crate::LocalError;
use crate::ports::BasePorts;
use crate::record::ClusterRecord;
use crate::state_dir::ClusterDir;
use quorate_api::Etcd;
use quorate_coord::json_file;
use quorate_core::cluster_config::{BackupConfig, ClusterConfig, EtcdSettings, MemberEndpoints};

/// Base ports the manifest sets explicitly.
pub fn base_ports(etcd: &Etcd) -> BasePorts {
    let port = |p: Option<i32>| p.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0);
    BasePorts {
        client: port(etcd.spec.etcd.client_port),
        peer: port(etcd.spec.etcd.server_port),
        agent: port(etcd.spec.backup.port),
    }
}

/// The configuration the agents of `etcd` run with; every desired member must have ports.
pub fn render_cluster_config(
    etcd: &Etcd,
    record: &ClusterRecord,
    dir: &ClusterDir,
) -> Result<ClusterConfig, LocalError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let peer_scheme = if etcd.peer_tls_enabled() {
        "https"
    } else {
        "http"
    };
    let client_scheme = if etcd.client_tls_enabled() {
        "https"
    } else {
        "http"
    };
    // A member's lease is named like the member (druid's naming).
    let members = quorate_api::names::member_lease_names(etcd)
        .into_iter()
        .map(|member| {
            let ports = record.ports[&member];
            MemberEndpoints {
                lease_name: member.clone(),
                peer_url: format!("{peer_scheme}://127.0.0.1:{}", ports.peer),
                client_url: format!("{client_scheme}://127.0.0.1:{}", ports.client),
                peer_port: ports.peer,
                client_port: ports.client,
                agent_url: format!("http://127.0.0.1:{}", ports.agent),
                agent_port: ports.agent,
                name: member,
            }
        })
        .collect();
    let (client_tls, peer_tls) = crate::tls::tls_files(etcd, dir)?;
    Ok(ClusterConfig {
        cluster_token: record.cluster_token(&name),
        cluster_name: name,
        namespace: etcd
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        members,
        bootstrap_members: record.bootstrap_members.clone(),
        listen_host: "127.0.0.1".into(),
        etcd: EtcdSettings::from_etcd(etcd),
        client_tls,
        peer_tls,
        heartbeat_millis: etcd.spec.etcd.heartbeat_duration().as_millis() as u64,
        backup: backup_config(etcd, record, dir),
        recovery_request: quorate_core::components::cluster_config::annotation(
            etcd,
            quorate_api::annotations::RECOVER,
        ),
    })
}

/// Backups of a local cluster: `Local` containers live in the cluster's `backups/` directory
/// and a store Secret is the directory `secrets/<name>/`, as for TLS.
fn backup_config(etcd: &Etcd, record: &ClusterRecord, dir: &ClusterDir) -> Option<BackupConfig> {
    let store = etcd.spec.backup.store.as_ref()?;
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let secret_dir = store
        .secret_ref
        .as_ref()
        .and_then(|s| s.name.as_ref())
        .map(|s| dir.root().join("secrets").join(s).display().to_string());
    Some(BackupConfig {
        spec: etcd.spec.backup.clone(),
        local_root: dir.backups().display().to_string(),
        secret_dir,
        full_snapshot_lease: quorate_api::names::full_snapshot_lease_name(&name),
        delta_snapshot_lease: quorate_api::names::delta_snapshot_lease_name(&name),
        cluster_uid: record.uid.clone(),
        adopt_foreign_backups: etcd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(quorate_api::annotations::ADOPT_BACKUPS))
            .is_some_and(|v| v == "true"),
        new_chain_request: quorate_core::components::cluster_config::annotation(
            etcd,
            quorate_api::annotations::NEW_BACKUP_CHAIN,
        ),
    })
}

/// The configuration last written for the cluster in `dir`.
pub fn read_config(dir: &ClusterDir) -> Result<ClusterConfig, LocalError> {
    let path = dir.root().join("config.json");
    json_file::read(&path, "cluster configuration")?.ok_or_else(|| LocalError::NotRunning {
        name: dir
            .root()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}
