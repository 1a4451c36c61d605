//! The peer-URL duty: once per run of etcd, as a voter with a leader, make the cluster know
//! this member by the peer URL it is configured with.

use crate::state::SharedState;
use quorate_core::cluster_config::ClusterConfig;
use quorate_etcd::MemberClient;

/// Makes the cluster know this member by the peer URL it is configured with, as etcd keeps a
/// member's peer URLs from when it joined: after peer TLS is turned on, etcd already listens
/// with https but its peers would still dial http. etcd-backup-restore does the same
/// (`updatePeerURLIfChanged`). Records the registered URLs; true once they are right.
pub async fn settle(
    client: &MemberClient,
    cluster: &ClusterConfig,
    me: &str,
    id: u64,
    state: &SharedState,
) -> bool {
    let Some(wanted) = cluster.member(me).map(|m| vec![m.peer_url.clone()]) else {
        return true;
    };
    let registered = match client.member_list().await {
        Ok(list) => list.into_iter().find(|m| m.id == id).map(|m| m.peer_urls),
        Err(e) => {
            tracing::debug!(member = %me, error = %e, "member list failed");
            return false;
        }
    };
    let Some(registered) = registered else {
        return false;
    };
    if registered == wanted {
        state.update(|s| s.registered_peer_urls = registered);
        return true;
    }
    match client.update_peer_urls(id, &wanted).await {
        Ok(_) => {
            tracing::info!(member = %me, from = ?registered, to = ?wanted, "updated the member's peer URLs");
            state.update(|s| s.registered_peer_urls = wanted);
            true
        }
        Err(e) => {
            tracing::warn!(member = %me, error = %e, "updating the member's peer URLs failed; retrying");
            state.update(|s| s.registered_peer_urls = registered);
            false
        }
    }
}
