//! Shared helpers for the integration tests: clients for testkit clusters and a learner join.

#![allow(dead_code)]

use std::time::Duration;

use quorate_etcd::{ClusterClient, EtcdTimeouts, Member, MemberClient, retry_while_retryable};
use quorate_testkit::{EtcdProcess, EtcdTestCluster};

/// Generous bound for etcd's own waits (5 s health window, learner catch-up) on a loaded box.
pub const MEMBERSHIP_WAIT: Duration = Duration::from_secs(30);

/// Short enough to keep dead-endpoint tests quick, long enough for a loaded 2-core machine.
pub fn timeouts() -> EtcdTimeouts {
    EtcdTimeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(3),
        long_request: Duration::from_secs(60),
    }
}

pub async fn cluster_client(cluster: &EtcdTestCluster) -> ClusterClient {
    ClusterClient::new(&cluster.client_urls(), None, timeouts())
        .await
        .expect("cluster client")
}

pub async fn member_client(process: &EtcdProcess) -> MemberClient {
    MemberClient::connect(&process.client_url(), None, timeouts())
        .await
        .expect("member client")
}

/// `--initial-cluster` entries for a joining member: existing members by name, the new one
/// (unnamed until it starts) by `new_name`.
pub fn initial_cluster_for(
    members: &[Member],
    new_id: u64,
    new_name: &str,
) -> Vec<(String, String)> {
    members
        .iter()
        .map(|m| {
            let name = if m.id == new_id {
                new_name.to_string()
            } else {
                m.name.clone()
            };
            (name, m.peer_urls[0].clone())
        })
        .collect()
}

/// Adds `name` as a learner (waiting out etcd's health window), starts its process with
/// `initial-cluster-state=existing` and waits until it follows the leader. Returns its ID and
/// index in the cluster.
pub async fn join_learner(
    cluster: &mut EtcdTestCluster,
    client: &ClusterClient,
    name: &str,
) -> (u64, usize) {
    let config = cluster.new_member_config(name);
    let peer_url = config.peer_url();
    let (id, members) = retry_while_retryable(
        || client.add_learner(std::slice::from_ref(&peer_url)),
        MEMBERSHIP_WAIT,
    )
    .await
    .expect("add learner");
    let mut config = config;
    config.initial_cluster = initial_cluster_for(&members, id, name);
    let process = EtcdProcess::start_ready(config, MEMBERSHIP_WAIT)
        .await
        .expect("learner starts");
    (id, cluster.add(process))
}
