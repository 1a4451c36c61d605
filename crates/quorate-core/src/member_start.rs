//! How a member's etcd must start, decided from what the cluster really is (its data directory,
//! the live member list, the leases) and never from the member's identity alone: a member that
//! bootstraps when the cluster already exists forms a second cluster (etcd-druid #361, #584).

use crate::cluster_config::ClusterConfig;
use crate::etcd_config::StartMode;

/// One entry of etcd's member list, as the start decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedMember {
    /// etcd member ID.
    pub id: u64,
    /// Member name; empty while the member was added but has never started.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Whether it is a learner.
    pub is_learner: bool,
}

/// What a member knows about its cluster before starting etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartEvidence {
    /// The data directory already holds an etcd member.
    pub has_data: bool,
    /// The member list from a running member, if any answered.
    pub member_list: Option<Vec<ListedMember>>,
    /// Some member lease carries a cluster ID, so the cluster has existed before.
    pub cluster_existed: bool,
}

/// What the agent does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartDecision {
    /// Start etcd in the given mode.
    Start(StartMode),
    /// Ask the cluster to add this member as a learner, then start it with `Join`.
    AddSelfAsLearner,
    /// This member is listed as started but has lost its data: remove it (by ID), then add it
    /// back as a learner. Its data comes from the leader, not from a backup.
    ReplaceSelf {
        /// The stale member ID.
        id: u64,
    },
    /// Nothing safe can be done yet; try again shortly.
    Wait(String),
}

/// Decides how member `me` starts.
pub fn decide_start(cluster: &ClusterConfig, me: &str, evidence: &StartEvidence) -> StartDecision {
    if evidence.has_data {
        return StartDecision::Start(StartMode::Restart);
    }
    let Some(my_peer_url) = cluster.member(me).map(|m| m.peer_url.as_str()) else {
        return StartDecision::Wait(format!(
            "{me} is not a desired member of {}",
            cluster.cluster_name
        ));
    };
    let Some(members) = &evidence.member_list else {
        if !evidence.cluster_existed && cluster.is_bootstrap_member(me) {
            return StartDecision::Start(StartMode::Bootstrap);
        }
        return StartDecision::Wait(format!(
            "cluster {} exists but no member answered; waiting for a running member to join through",
            cluster.cluster_name
        ));
    };
    let mine = members
        .iter()
        .find(|m| m.name == me || m.peer_urls.iter().any(|u| u == my_peer_url));
    match mine {
        Some(m) if m.name.is_empty() => {
            // Added (by a bootstrap or an earlier learner add) but never started: start and join.
            let initial_cluster = members
                .iter()
                .map(|m| {
                    let name = if m.name.is_empty() {
                        name_for(cluster, m)
                    } else {
                        m.name.clone()
                    };
                    (name, m.peer_urls.first().cloned().unwrap_or_default())
                })
                .collect();
            if !evidence.cluster_existed && cluster.is_bootstrap_member(me) {
                StartDecision::Start(StartMode::Bootstrap)
            } else {
                StartDecision::Start(StartMode::Join { initial_cluster })
            }
        }
        Some(m) => StartDecision::ReplaceSelf { id: m.id },
        None => StartDecision::AddSelfAsLearner,
    }
}

/// Name of a never-started member, found through its peer URL in the desired members.
fn name_for(cluster: &ClusterConfig, member: &ListedMember) -> String {
    cluster
        .members
        .iter()
        .find(|d| member.peer_urls.contains(&d.peer_url))
        .map(|d| d.name.clone())
        .unwrap_or_else(|| format!("{:x}", member.id))
}

/// `--initial-cluster` for a member that was just added as a learner: the current members and
/// itself.
pub fn join_initial_cluster(
    cluster: &ClusterConfig,
    members: &[ListedMember],
) -> Vec<(String, String)> {
    members
        .iter()
        .map(|m| {
            let name = if m.name.is_empty() {
                name_for(cluster, m)
            } else {
                m.name.clone()
            };
            (name, m.peer_urls.first().cloned().unwrap_or_default())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd_config::tests::three_members;

    fn listed(id: u64, name: &str, port: u16) -> ListedMember {
        ListedMember {
            id,
            name: name.into(),
            peer_urls: vec![format!("http://127.0.0.1:{port}")],
            is_learner: false,
        }
    }

    fn evidence(has_data: bool, list: Option<Vec<ListedMember>>, existed: bool) -> StartEvidence {
        StartEvidence {
            has_data,
            member_list: list,
            cluster_existed: existed,
        }
    }

    #[test]
    fn existing_data_always_restarts() {
        let d = decide_start(&three_members(), "etcd-main-1", &evidence(true, None, true));
        assert_eq!(d, StartDecision::Start(StartMode::Restart));
    }

    #[test]
    fn fresh_cluster_bootstraps_only_bootstrap_members() {
        let mut c = three_members();
        assert_eq!(
            decide_start(&c, "etcd-main-2", &evidence(false, None, false)),
            StartDecision::Start(StartMode::Bootstrap)
        );
        c.bootstrap_members = vec!["etcd-main-0".into()];
        assert!(matches!(
            decide_start(&c, "etcd-main-2", &evidence(false, None, false)),
            StartDecision::Wait(_)
        ));
    }

    #[test]
    fn never_bootstraps_a_cluster_that_existed() {
        let d = decide_start(
            &three_members(),
            "etcd-main-0",
            &evidence(false, None, true),
        );
        assert!(matches!(d, StartDecision::Wait(_)), "{d:?}");
    }

    #[test]
    fn scale_out_member_adds_itself_as_learner() {
        let list = vec![listed(1, "etcd-main-0", 2380)];
        let d = decide_start(
            &three_members(),
            "etcd-main-1",
            &evidence(false, Some(list), true),
        );
        assert_eq!(d, StartDecision::AddSelfAsLearner);
    }

    #[test]
    fn added_but_unstarted_member_joins_with_the_listed_members() {
        let list = vec![listed(1, "etcd-main-0", 2380), listed(2, "", 2390)];
        let d = decide_start(
            &three_members(),
            "etcd-main-1",
            &evidence(false, Some(list), true),
        );
        assert_eq!(
            d,
            StartDecision::Start(StartMode::Join {
                initial_cluster: vec![
                    ("etcd-main-0".into(), "http://127.0.0.1:2380".into()),
                    ("etcd-main-1".into(), "http://127.0.0.1:2390".into()),
                ]
            })
        );
    }

    #[test]
    fn started_member_without_data_replaces_itself() {
        let list = vec![
            listed(1, "etcd-main-0", 2380),
            listed(7, "etcd-main-1", 2390),
        ];
        let d = decide_start(
            &three_members(),
            "etcd-main-1",
            &evidence(false, Some(list), true),
        );
        assert_eq!(d, StartDecision::ReplaceSelf { id: 7 });
    }
}
