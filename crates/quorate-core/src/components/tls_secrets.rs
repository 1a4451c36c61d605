//! The TLS Secrets of an `Etcd` and where their files go in a member pod. The agent reads them
//! through the API and writes them into the pod's `tls` emptyDir (`/var/etcd/ssl`) instead of
//! the pod mounting them: enabling TLS (or changing a Secret's name) then changes only the
//! agents' configuration, and each agent restarts etcd in place, one at a time, where a new
//! mount would have replaced every pod.

use quorate_api::Etcd;

use super::paths::{
    BACKUP_CA_MOUNT, BACKUP_CLIENT_TLS_MOUNT, BACKUP_SERVER_TLS_MOUNT, CLIENT_CA_MOUNT,
    CLIENT_CLIENT_TLS_MOUNT, CLIENT_SERVER_TLS_MOUNT, PEER_CA_MOUNT, PEER_SERVER_TLS_MOUNT,
};
use crate::cluster_config::SecretFiles;

/// Where every TLS file of a pod lives: an emptyDir the agent fills.
pub const TLS_DIR: &str = "/var/etcd/ssl";

/// Every configured TLS Secret with the directory its keys are written to, in druid's order
/// (client CA, server, client; peer CA, peer server; backup CA, server, client). Secrets without a name are left out
/// (validation refuses them).
pub fn tls_secret_files(etcd: &Etcd) -> Vec<SecretFiles> {
    let mut files = Vec::new();
    let mut add = |name: Option<&String>, dir: &str| {
        if let Some(secret) = name.filter(|n| !n.is_empty()) {
            files.push(SecretFiles {
                secret: secret.clone(),
                dir: dir.to_string(),
            });
        }
    };
    if let Some(tls) = &etcd.spec.etcd.client_url_tls {
        add(tls.tls_ca_secret_ref.name.as_ref(), CLIENT_CA_MOUNT);
        add(
            tls.server_tls_secret_ref.name.as_ref(),
            CLIENT_SERVER_TLS_MOUNT,
        );
        if let Some(client) = &tls.client_tls_secret_ref {
            add(client.name.as_ref(), CLIENT_CLIENT_TLS_MOUNT);
        }
    }
    if let Some(tls) = &etcd.spec.etcd.peer_url_tls {
        add(tls.tls_ca_secret_ref.name.as_ref(), PEER_CA_MOUNT);
        add(
            tls.server_tls_secret_ref.name.as_ref(),
            PEER_SERVER_TLS_MOUNT,
        );
    }
    if let Some(tls) = &etcd.spec.backup.tls {
        add(tls.tls_ca_secret_ref.name.as_ref(), BACKUP_CA_MOUNT);
        add(
            tls.server_tls_secret_ref.name.as_ref(),
            BACKUP_SERVER_TLS_MOUNT,
        );
        if let Some(client) = &tls.client_tls_secret_ref {
            add(client.name.as_ref(), BACKUP_CLIENT_TLS_MOUNT);
        }
    }
    files
}
