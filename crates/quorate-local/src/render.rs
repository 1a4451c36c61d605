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

/// The configuration the agents of `etcd` run with: the desired members, then the leaving ones
/// (see [`ClusterRecord::leaving`]); every one of them must have ports. Assembled by core's
/// `assemble`, as the operator's ConfigMap is, with a local placement: loopback, the ports
/// the record gives each member, and paths in the state directory.
pub fn render_cluster_config(
    etcd: &Etcd,
    record: &ClusterRecord,
    dir: &ClusterDir,
) -> Result<ClusterConfig, LocalError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let desired = quorate_api::names::member_lease_names(etcd);
    let leaving = record.leaving(&desired);
    // A member's lease is named like the member (druid's naming).
    let members = desired
        .into_iter()
        .chain(leaving.iter().cloned())
        .map(|member| {
            let ports = record.ports[&member];
            PlacedMember {
                name: member,
                host: LOCAL_HOST.into(),
                peer_port: ports.peer,
                client_port: ports.client,
                agent_port: ports.agent,
                metrics_port: ports.metrics,
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
        agent_tls: crate::tls::agent_tls_files(etcd, dir)?,
        // `Local` containers live where the store Secret's `hostPath` says, else in the
        // cluster's `backups/` directory; a store Secret is the directory `secrets/<name>/`,
        // as for TLS.
        local_root: crate::bucket::local_backup_root(etcd, dir)?
            .display()
            .to_string(),
        secret_dir: store_secret_dir(etcd, dir),
        // The encryption keys are read where the Secret's directory is.
        encryption_key_dir: quorate_api::annotations::backup_encryption_secret(etcd).map(
            |secret| {
                dir.root()
                    .join("secrets")
                    .join(secret)
                    .display()
                    .to_string()
            },
        ),
        cluster_uid: record.uid.clone(),
        leaving,
        // Local TLS files are files in the state directory already.
        secret_files: Vec::new(),
        // The record keeps the current step of a version change (the supervisor's decision);
        // a record written before that runs what the object's annotation names.
        etcd_version: record.etcd_version.unwrap_or_else(|| {
            quorate_api::etcd_version::requested(etcd)
                .ok()
                .flatten()
                .unwrap_or(quorate_api::EtcdVersion::UNRECORDED)
        }),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::MemberPorts;
    use quorate_core::member_etcd_config::{StartMode, member_etcd_config};

    fn manifest(extra_etcd: &str) -> Etcd {
        let text = format!(
            "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: gw
spec:
  replicas: 2
  labels:
    app: gw
  etcd:
    heartbeatDuration: 1s
{extra_etcd}  backup:
    store:
      provider: Local
      container: bucket
      prefix: gw
      secretRef:
        name: store-creds
"
        );
        let mut etcd = quorate_api::manifest::parse_etcd_manifest(&text, "gw.yaml").unwrap();
        etcd.metadata.generation = Some(1);
        etcd
    }

    fn record() -> ClusterRecord {
        let mut record = ClusterRecord::new(jiff::Timestamp::UNIX_EPOCH, 0xabcdef01 << 96);
        for (i, member) in ["gw-0", "gw-1"].into_iter().enumerate() {
            let base = 20000 + 10 * u16::try_from(i).unwrap();
            record.ports.insert(
                member.into(),
                MemberPorts {
                    client: base,
                    peer: base + 1,
                    agent: base + 2,
                    metrics: None,
                },
            );
        }
        record.bootstrap_members = vec!["gw-0".into(), "gw-1".into()];
        record
    }

    fn args(etcd: &Etcd) -> Vec<String> {
        let dir = ClusterDir::new(std::path::Path::new("/state"), "gw");
        let config = render_cluster_config(etcd, &record(), &dir).unwrap();
        member_etcd_config(&config, "gw-1", "/data", &StartMode::Bootstrap)
            .unwrap()
            .to_args()
    }

    #[test]
    fn enable_grpc_gateway_reaches_the_members_etcd_args() {
        let on = args(&manifest("    enableGRPCGateway: true\n"));
        assert!(
            on.contains(&"--enable-grpc-gateway=true".to_string()),
            "{on:?}"
        );
        let off = args(&manifest(""));
        assert!(
            off.contains(&"--enable-grpc-gateway=false".to_string()),
            "{off:?}"
        );
    }

    #[test]
    fn members_are_placed_on_loopback_with_their_recorded_ports_and_state_paths() {
        let dir = ClusterDir::new(std::path::Path::new("/state"), "gw");
        let config = render_cluster_config(&manifest(""), &record(), &dir).unwrap();
        assert_eq!(config.listen_host, "127.0.0.1");
        assert_eq!(config.namespace, "default");
        assert_eq!(config.cluster_token, "gw-abcdef01");
        let m = config.member("gw-1").unwrap();
        assert_eq!(m.lease_name, "gw-1");
        assert_eq!(m.client_url, "http://127.0.0.1:20010");
        assert_eq!(m.peer_url, "http://127.0.0.1:20011");
        assert_eq!(m.agent_url, "http://127.0.0.1:20012");
        let backup = config.backup.unwrap();
        assert_eq!(backup.local_root, dir.backups().display().to_string());
        assert_eq!(
            backup.secret_dir.as_deref(),
            Some(dir.root().join("secrets/store-creds").to_str().unwrap())
        );
        assert_eq!(backup.cluster_uid, record().uid);
        assert_eq!(backup.full_snapshot_lease, "gw-full-snap");
        assert!(!backup.adopt_foreign_backups);
    }
}
