//! How a member's etcd must start, decided from what the cluster really is (its data directory,
//! the live member list, the leases) and never from the member's identity alone: a member that
//! bootstraps when the cluster already exists forms a second cluster (etcd-druid #361, #584).

use crate::cluster_config::ClusterConfig;
use crate::member_etcd_config::StartMode;

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
    /// The data directory already holds a valid etcd member.
    pub has_data: bool,
    /// The member list from a running member, if any answered.
    pub member_list: Option<Vec<ListedMember>>,
    /// Some member lease carries a cluster ID, so the cluster has existed before.
    pub cluster_existed: bool,
    /// What the backup bucket holds.
    pub backups: Backups,
    /// How long no other member has answered (zero if one just did).
    pub peers_silent_for: std::time::Duration,
}

/// The backup bucket as seen at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backups {
    /// `spec.backup.store` is not set.
    NotConfigured,
    /// The bucket holds no snapshot of this cluster.
    Empty,
    /// The bucket holds a snapshot up to this revision.
    Available {
        /// The newest revision a restore reaches.
        newest_revision: i64,
    },
    /// The bucket cannot be read; the text says why.
    Unreadable(String),
}

/// How long a member of a multi-member cluster waits for any peer to answer before it concludes
/// that every member lost its data and restores the cluster from the bucket.
pub const TOTAL_LOSS_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

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
    /// Every member lost its data: restore this member from the bucket as a single-member
    /// cluster; the others join it as learners.
    RestoreFromBackup,
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
        return decide_alone(cluster, me, evidence);
    };
    let mine = members
        .iter()
        .find(|m| m.name == me || m.peer_urls.iter().any(|u| u == my_peer_url));
    match mine {
        Some(m) if m.name.is_empty() => {
            // Added (by a bootstrap or an earlier learner add) but never started: start and join.
            let initial_cluster = join_initial_cluster(cluster, members);
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

/// No data here and no other member answers: bootstrap, restore from the bucket, or wait.
fn decide_alone(cluster: &ClusterConfig, me: &str, evidence: &StartEvidence) -> StartDecision {
    let name = &cluster.cluster_name;
    let first = cluster.members.first().map(|m| m.name.as_str());
    let alone = cluster.members.len() == 1;
    match &evidence.backups {
        // A cluster that never existed has nothing in any bucket to restore: an unreachable
        // store must not keep it from starting (backups will report the store's trouble).
        Backups::Unreadable(_) if !evidence.cluster_existed && cluster.is_bootstrap_member(me) => {
            StartDecision::Start(StartMode::Bootstrap)
        }
        Backups::Unreadable(why) => StartDecision::Wait(format!(
            "{me} has no data and the backup bucket cannot be read ({why}); fix the store to let it restore"
        )),
        // The bucket is the source of truth: a cluster with backups is never bootstrapped empty.
        Backups::Available { .. } if first != Some(me) => StartDecision::Wait(format!(
            "waiting for {} to restore {name} from the bucket, then joining it",
            first.unwrap_or_default()
        )),
        Backups::Available { .. } if alone || evidence.peers_silent_for >= TOTAL_LOSS_GRACE => {
            StartDecision::RestoreFromBackup
        }
        Backups::Available { .. } => StartDecision::Wait(format!(
            "no member of {name} answers; restoring from the bucket if none does within {}s",
            TOTAL_LOSS_GRACE.as_secs()
        )),
        Backups::Empty | Backups::NotConfigured if !evidence.cluster_existed => {
            if cluster.is_bootstrap_member(me) {
                StartDecision::Start(StartMode::Bootstrap)
            } else {
                StartDecision::Wait(format!(
                    "waiting for {name} to be bootstrapped, then joining it"
                ))
            }
        }
        Backups::Empty => StartDecision::Wait(format!(
            "{name} existed, but no member answers, {me} has no data and the bucket holds no backup: \
             nothing to restore from; bring back a member with its data"
        )),
        Backups::NotConfigured => StartDecision::Wait(format!(
            "{name} exists but no member answered; waiting for a running member to join through"
        )),
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
    use crate::member_etcd_config::tests::three_members;

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
            backups: Backups::NotConfigured,
            peers_silent_for: std::time::Duration::ZERO,
        }
    }

    fn with_backups(mut e: StartEvidence, backups: Backups, silent_secs: u64) -> StartEvidence {
        e.backups = backups;
        e.peers_silent_for = std::time::Duration::from_secs(silent_secs);
        e
    }

    #[test]
    fn total_loss_restores_the_first_member_after_the_grace_and_the_others_join() {
        let c = three_members();
        let available = Backups::Available {
            newest_revision: 42,
        };
        let e = |silent| with_backups(evidence(false, None, true), available.clone(), silent);
        assert!(matches!(
            decide_start(&c, "etcd-main-0", &e(3)),
            StartDecision::Wait(_)
        ));
        assert_eq!(
            decide_start(&c, "etcd-main-0", &e(20)),
            StartDecision::RestoreFromBackup
        );
        let other = decide_start(&c, "etcd-main-1", &e(60));
        assert!(
            matches!(&other, StartDecision::Wait(w) if w.contains("etcd-main-0 to restore")),
            "{other:?}"
        );
    }

    #[test]
    fn a_bucket_with_backups_is_restored_even_if_the_state_was_lost() {
        let mut c = three_members();
        c.members.truncate(1);
        let e = with_backups(
            evidence(false, None, false),
            Backups::Available { newest_revision: 7 },
            0,
        );
        assert_eq!(
            decide_start(&c, "etcd-main-0", &e),
            StartDecision::RestoreFromBackup
        );
    }

    #[test]
    fn an_empty_bucket_bootstraps_only_a_cluster_that_never_existed() {
        let c = three_members();
        let fresh = with_backups(evidence(false, None, false), Backups::Empty, 100);
        assert_eq!(
            decide_start(&c, "etcd-main-0", &fresh),
            StartDecision::Start(StartMode::Bootstrap)
        );
        let existed = with_backups(evidence(false, None, true), Backups::Empty, 100);
        let d = decide_start(&c, "etcd-main-0", &existed);
        assert!(
            matches!(&d, StartDecision::Wait(w) if w.contains("bucket holds no backup")),
            "{d:?}"
        );
    }

    #[test]
    fn an_unreadable_bucket_does_not_block_a_brand_new_cluster() {
        let c = three_members();
        let e = with_backups(
            evidence(false, None, false),
            Backups::Unreadable("timeout".into()),
            0,
        );
        assert_eq!(
            decide_start(&c, "etcd-main-0", &e),
            StartDecision::Start(StartMode::Bootstrap)
        );
    }

    #[test]
    fn an_unreadable_bucket_blocks_a_restore_with_the_reason() {
        let c = three_members();
        let e = with_backups(
            evidence(false, None, true),
            Backups::Unreadable("access denied".into()),
            100,
        );
        let d = decide_start(&c, "etcd-main-0", &e);
        assert!(
            matches!(&d, StartDecision::Wait(w) if w.contains("access denied")),
            "{d:?}"
        );
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
