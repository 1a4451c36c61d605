//! The cluster configuration of a local cluster: every member on loopback with the ports its
//! record gives it. The local counterpart of the operator's ConfigMap.

use crate::LocalError;
use crate::ports::BasePorts;
use crate::record::ClusterRecord;
use crate::state_dir::ClusterDir;
use quorate_api::Etcd;
use quorate_coord::json_file;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::cluster_config::{PlacedMember, Placement, assemble};

/// Base ports the manifest sets explicitly.
pub fn base_ports(etcd: &Etcd) -> BasePorts {
    let port = |p: Option<i32>| p.and_then(|p| u16::try_from(p).ok()).filter(|p| *p != 0);
    BasePorts {
        client: port(etcd.spec.etcd.client_port),
        peer: port(etcd.spec.etcd.server_port),
        agent: port(etcd.spec.backup.port),
    }
}

/// Host every local member listens on and is reached at.
pub const LOCAL_HOST: &str = "127.0.0.1";

/// The configuration the agents of `etcd` run with; every desired member must have ports.
/// Assembled by core's `assemble`, as the operator's ConfigMap is, with a local placement:
/// loopback, the ports the record gives each member, and paths in the state directory.
pub fn render_cluster_config(
    etcd: &Etcd,
    record: &ClusterRecord,
    dir: &ClusterDir,
) -> Result<ClusterConfig, LocalError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    // A member's lease is named like the member (druid's naming).
    let members = quorate_api::names::member_lease_names(etcd)
        .into_iter()
        .map(|member| {
            let ports = record.ports[&member];
            PlacedMember {
                name: member,
                host: LOCAL_HOST.into(),
                peer_port: ports.peer,
                client_port: ports.client,
                agent_port: ports.agent,
            }
        })
        .collect();
    let (client_tls, peer_tls) = crate::tls::tls_files(etcd, dir)?;
    let placement = Placement {
        namespace: etcd
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        cluster_token: record.cluster_token(&name),
        bootstrap_members: record.bootstrap_members.clone(),
        listen_host: LOCAL_HOST.into(),
        client_tls,
        peer_tls,
        // `Local` containers live in the cluster's `backups/` directory and a store Secret is
        // the directory `secrets/<name>/`, as for TLS.
        local_root: dir.backups().display().to_string(),
        secret_dir: store_secret_dir(etcd, dir),
        cluster_uid: record.uid.clone(),
    };
    Ok(assemble(etcd, placement, members))
}

/// The directory standing in for the backup store's Secret, when the store names one.
fn store_secret_dir(etcd: &Etcd, dir: &ClusterDir) -> Option<String> {
    let store = etcd.spec.backup.store.as_ref()?;
    let secret = store.secret_ref.as_ref()?.name.as_ref()?;
    Some(
        dir.root()
            .join("secrets")
            .join(secret)
            .display()
            .to_string(),
    )
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
