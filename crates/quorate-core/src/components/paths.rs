//! Paths inside a member pod and the names of the pod's volumes. The StatefulSet mounts things
//! here and the ConfigMap (both `etcd.conf.yaml` and quorate's `cluster.json`) points at the
//! same places, so the two can only agree if both read them from this one file. Where etcd-druid
//! has a path for the same thing we use druid's, so a PVC or Secret laid out for druid fits.

/// Mount point of the member's data volume (the PVC), as in druid.
pub const DATA_MOUNT: &str = "/var/etcd/data";
/// etcd's data directory inside [`DATA_MOUNT`]; druid's `new.etcd`, so a PVC written by a
/// druid-managed member is picked up as it is.
pub const DATA_DIR: &str = "/var/etcd/data/new.etcd";

/// Client CA bundle (the `tlsCASecretRef` Secret of `spec.etcd.clientUrlTls`).
pub const CLIENT_CA_MOUNT: &str = "/var/etcd/ssl/ca";
/// etcd's client-facing server certificate and key (`serverTLSSecretRef`).
pub const CLIENT_SERVER_TLS_MOUNT: &str = "/var/etcd/ssl/server";
/// Client certificate and key the agent uses to talk to etcd (`clientTLSSecretRef`).
pub const CLIENT_CLIENT_TLS_MOUNT: &str = "/var/etcd/ssl/client";
/// Peer CA bundle (the `tlsCASecretRef` Secret of `spec.etcd.peerUrlTls`).
pub const PEER_CA_MOUNT: &str = "/var/etcd/ssl/peer/ca";
/// Peer server certificate and key; etcd also presents it as a client to its peers.
pub const PEER_SERVER_TLS_MOUNT: &str = "/var/etcd/ssl/peer/server";

/// Where the store Secret (`spec.backup.store.secretRef`) is mounted, for every provider but
/// `Local`: druid's path for non-GCS providers. The agent reads the keys as files from here
/// (`BackupConfig::secret_dir`), so one path serves GCS too.
pub const BACKUP_SECRET_MOUNT: &str = "/var/etcd-backup";
/// CA bundle of the agents' HTTPS (the `tlsCASecretRef` Secret of `spec.backup.tls`).
pub const BACKUP_CA_MOUNT: &str = "/var/etcd/ssl/backup/ca";
/// Server certificate and key of the agents' HTTPS.
pub const BACKUP_SERVER_TLS_MOUNT: &str = "/var/etcd/ssl/backup/server";
/// Client certificate and key the agents present to each other.
pub const BACKUP_CLIENT_TLS_MOUNT: &str = "/var/etcd/ssl/backup/client";
/// Where the agent writes the backup encryption keys (the Secret
/// `quorate.io/backup-encryption-secret` names) in a pod: in the memory-backed TLS emptyDir,
/// so keys never reach a disk and naming the Secret changes no pod.
pub const BACKUP_ENCRYPTION_KEY_DIR: &str = "/var/etcd/ssl/backup-encryption";
/// Directory under which `Local` containers (buckets) live in the pod
/// (`BackupConfig::local_root`); the container `<c>` is mounted at `<root>/<c>`.
pub const LOCAL_BACKUP_ROOT: &str = "/var/etcd/backups";
/// Host directory of `Local` buckets when the store Secret has no `hostPath` key (druid's
/// `LocalProviderDefaultMountPath`).
pub const DEFAULT_LOCAL_BACKUP_HOST_PATH: &str = "/etc/gardener/local-backupbuckets";

/// Whether a `Local` store's host directory (its Secret's `hostPath`) may be mounted: an
/// absolute path without `.`/`..` components, equal to or under one of `allowed` (druid's
/// default directory is always allowed). A hostPath volume is the node's filesystem; an
/// arbitrary one (`/`, `/var/lib`) would hand the node to whoever writes the Secret.
pub fn host_path_allowed(path: &str, allowed: &[String]) -> bool {
    let plain = path.starts_with('/') && path.split('/').all(|part| part != "." && part != "..");
    let normal = |p: &str| p.trim_end_matches('/').to_string();
    let path = normal(path);
    plain
        && std::iter::once(DEFAULT_LOCAL_BACKUP_HOST_PATH)
            .chain(allowed.iter().map(String::as_str))
            .map(normal)
            .any(|dir| !dir.is_empty() && (path == dir || path.starts_with(&format!("{dir}/"))))
}

/// Name of the certificate inside a server or client TLS Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Name of the private key inside a server or client TLS Secret.
pub const TLS_KEY_KEY: &str = "tls.key";

/// Volume names, druid's, so a StatefulSet diff against a druid-rendered one stays small.
pub mod volume {
    /// Client CA Secret.
    pub const CLIENT_CA: &str = "etcd-ca";
    /// Client-facing server certificate Secret.
    pub const CLIENT_SERVER_TLS: &str = "etcd-server-tls";
    /// Agent client certificate Secret.
    pub const CLIENT_CLIENT_TLS: &str = "etcd-client-tls";
    /// Peer CA Secret.
    pub const PEER_CA: &str = "etcd-peer-ca";
    /// Peer server certificate Secret.
    pub const PEER_SERVER_TLS: &str = "etcd-peer-server-tls";
    /// The emptyDir the agent writes the TLS Secrets' files into.
    pub const TLS: &str = "tls";
    /// Store credentials Secret.
    pub const BACKUP_SECRET: &str = "etcd-backup-secret";
    /// `Local` bucket (a hostPath).
    pub const LOCAL_BACKUP: &str = "local-backup";
}

/// `<dir>/<file>`, for the file paths the configuration points at.
pub(crate) fn file_in(dir: &str, file: &str) -> String {
    format!("{dir}/{file}")
}

/// Where the `Local` container `container` is mounted in the pod.
pub fn local_backup_mount(container: &str) -> String {
    file_in(LOCAL_BACKUP_ROOT, container)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_default_and_the_allowed_directories_may_be_mounted() {
        let allowed = vec!["/srv/buckets/".to_string()];
        for ok in [
            DEFAULT_LOCAL_BACKUP_HOST_PATH,
            "/etc/gardener/local-backupbuckets/team-a",
            "/srv/buckets",
            "/srv/buckets/x",
        ] {
            assert!(host_path_allowed(ok, &allowed), "{ok}");
        }
        for refused in [
            "/",
            "/var/lib",
            "/srv/buckets-other",
            "/srv/buckets/../../etc",
            "srv/buckets",
            "",
        ] {
            assert!(!host_path_allowed(refused, &allowed), "{refused}");
        }
    }
}
