//! How a member's etcd must start, decided from what the cluster really is (its data directory,
//! the live member list, the leases) and never from the member's identity alone: a member that
//! bootstraps when the cluster already exists forms a second cluster (etcd-druid #361, #584).

use super::data_state::{DataState, PeerData};
use super::{Member, MemberList};
use crate::cluster_config::ClusterConfig;
use crate::member_etcd_config::StartMode;

/// What a member knows about its cluster before starting etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartEvidence {
    /// What this member's own data directory holds.
    pub own: DataState,
    /// The member list from a running member, if any answered.
    pub member_list: Option<Vec<Member>>,
    /// Some member lease carries a cluster ID, or some member published data: the cluster has
    /// existed before.
    pub cluster_existed: bool,
    /// What the backup bucket holds.
    pub backups: Backups,
    /// What every other desired member published about its data.
    pub peers: Vec<PeerData>,
    /// A person asked for recovery (`quorate recover`, the recover annotation): members that
    /// did not report may be treated as lost.
    pub recovery_requested: bool,
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
    match &evidence.own {
        DataState::Present { .. } => return StartDecision::Start(StartMode::Restart),
        DataState::Unknown { reason } => {
            return StartDecision::Wait(format!(
                "{me} cannot tell whether its data directory holds data ({reason}); nothing is \
                 started, restored or moved until it can be read"
            ));
        }
        DataState::Empty => {}
    }
    if cluster.is_leaving(me) {
        return StartDecision::Wait(format!(
            "{me} is leaving {} and has no data: it is not added back; it stops once etcd \
             removed it",
            cluster.cluster_name
        ));
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
        Some(m) if !m.has_served() => {
            // Added (by a bootstrap or an earlier learner add) but never started: start and join
            // (a bootstrap member the others started without is listed with its name already).
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

/// The member ID of data etcd removed from the cluster: `own` names a member ID of the cluster
/// that `leader_list` (the member list as that cluster's leader answers it) comes from, and
/// the list does not have it. Such data must not start: its etcd would be refused by its
/// peers. `None` when the data is unnamed, from another cluster, or still a member.
pub fn removed_member_data(own: &DataState, leader_list: &MemberList) -> Option<u64> {
    let DataState::Present {
        cluster_id: Some(cluster_id),
        member_id: Some(member_id),
        ..
    } = own
    else {
        return None;
    };
    let removed = *cluster_id == leader_list.cluster_id
        && !leader_list.members.is_empty()
        && !leader_list.members.iter().any(|m| m.id == *member_id);
    removed.then_some(*member_id)
}

/// No data here and no other member answers: bootstrap, restore from the bucket, or wait.
fn decide_alone(cluster: &ClusterConfig, me: &str, evidence: &StartEvidence) -> StartDecision {
    let name = &cluster.cluster_name;
    let first = cluster.desired_members().next().map(|m| m.name.as_str());
    let alone = cluster.desired_members().count() == 1;
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
        Backups::Available { .. } if alone => StartDecision::RestoreFromBackup,
        Backups::Available { .. } => match peers_without_evidence_of_loss(evidence) {
            missing if missing.is_empty() => StartDecision::RestoreFromBackup,
            missing => StartDecision::Wait(format!(
                "{me} has no data and no member of {name} answers, but {}; restoring {name} from \
                 the bucket now could fork it or lose their newer writes, so {me} waits for them. \
                 If their data is lost for good, ask for recovery explicitly (`quorate recover \
                 {name}` locally, or annotate the Etcd with {}=<any id>)",
                missing.join(", "),
                quorate_api::annotations::RECOVER
            )),
        },
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

/// The other members that have not said they lost their data, each with what they said; empty
/// when every one of them reported an empty data directory (or a person asked for recovery).
fn peers_without_evidence_of_loss(evidence: &StartEvidence) -> Vec<String> {
    if evidence.recovery_requested {
        return Vec::new();
    }
    evidence
        .peers
        .iter()
        .filter_map(|p| match &p.state {
            Some(DataState::Empty) => None,
            Some(state) => Some(format!("{} {}", p.name, state.describe())),
            None => Some(format!("{} has not reported its data yet", p.name)),
        })
        .collect()
}

/// Name of a never-started member, found through its peer URL in the desired members.
fn name_for(cluster: &ClusterConfig, member: &Member) -> String {
    cluster
        .members
        .iter()
        .find(|d| member.peer_urls.contains(&d.peer_url))
        .map(|d| d.name.clone())
        .unwrap_or_else(|| format!("{:x}", member.id))
}

/// `--initial-cluster` for a member that was just added as a learner: the current members and
/// itself.
pub fn join_initial_cluster(cluster: &ClusterConfig, members: &[Member]) -> Vec<(String, String)> {
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

    /// A member that has served (it published client URLs); an empty name: never started.
    fn listed(id: u64, name: &str, port: u16) -> Member {
        let mut m = Member::new(id, name, vec![format!("http://127.0.0.1:{port}")], false);
        if !name.is_empty() {
            m.client_urls = vec![format!("http://127.0.0.1:{}", port - 1)];
        }
        m
    }

    fn evidence(has_data: bool, list: Option<Vec<Member>>, existed: bool) -> StartEvidence {
        StartEvidence {
            own: if has_data {
                DataState::Present {
                    cluster_id: None,
                    member_id: None,
                    revision: None,
                }
            } else {
                DataState::Empty
            },
            member_list: list,
            cluster_existed: existed,
            backups: Backups::NotConfigured,
            peers: Vec::new(),
            recovery_requested: false,
        }
    }

    fn with_backups(mut e: StartEvidence, backups: Backups) -> StartEvidence {
        e.backups = backups;
        e
    }

    fn peers(states: [Option<DataState>; 2]) -> Vec<PeerData> {
        ["etcd-main-1", "etcd-main-2"]
            .into_iter()
            .zip(states)
            .map(|(name, state)| PeerData {
                name: name.into(),
                state,
            })
            .collect()
    }

    fn had_data(revision: i64) -> Option<DataState> {
        Some(DataState::Present {
            cluster_id: Some(0xc1),
            member_id: Some(2),
            revision: Some(revision),
        })
    }

    #[test]
    fn total_loss_restores_the_first_member_once_every_other_member_reported_no_data() {
        let c = three_members();
        let available = Backups::Available {
            newest_revision: 42,
        };
        let e = |p| {
            let mut e = with_backups(evidence(false, None, true), available.clone());
            e.peers = p;
            e
        };
        let d = decide_start(&c, "etcd-main-0", &e(peers([None, Some(DataState::Empty)])));
        assert!(
            matches!(&d, StartDecision::Wait(w) if w.contains("etcd-main-1 has not reported")),
            "{d:?}"
        );
        assert_eq!(
            decide_start(
                &c,
                "etcd-main-0",
                &e(peers([Some(DataState::Empty), Some(DataState::Empty)]))
            ),
            StartDecision::RestoreFromBackup
        );
        let other = decide_start(
            &c,
            "etcd-main-1",
            &e(peers([Some(DataState::Empty), Some(DataState::Empty)])),
        );
        assert!(
            matches!(&other, StartDecision::Wait(w) if w.contains("etcd-main-0 to restore")),
            "{other:?}"
        );
    }

    /// The fork of issue 12: every member restarts, member 0 comes back empty and its peers are
    /// slow (image pull, a long WAL replay). However long they are silent, what they last
    /// published says they hold data, so member 0 must not restore an older cluster beside them.
    #[test]
    fn silent_peers_that_reported_data_are_never_treated_as_lost() {
        let c = three_members();
        let mut e = with_backups(
            evidence(false, None, true),
            Backups::Available {
                newest_revision: 42,
            },
        );
        e.peers = peers([had_data(90), had_data(91)]);
        let d = decide_start(&c, "etcd-main-0", &e);
        assert!(
            matches!(&d, StartDecision::Wait(w) if w.contains("etcd-main-1 has data of cluster c1 up to revision 90")
                && w.contains("quorate recover")),
            "{d:?}"
        );
        e.recovery_requested = true;
        assert_eq!(
            decide_start(&c, "etcd-main-0", &e),
            StartDecision::RestoreFromBackup,
            "an explicit request overrides"
        );
    }

    #[test]
    fn an_unreadable_data_directory_is_not_an_empty_one() {
        let c = three_members();
        let mut e = with_backups(
            evidence(false, None, true),
            Backups::Available {
                newest_revision: 42,
            },
        );
        e.own = DataState::Unknown {
            reason: "permission denied".into(),
        };
        e.peers = peers([Some(DataState::Empty), Some(DataState::Empty)]);
        let d = decide_start(&c, "etcd-main-0", &e);
        assert!(
            matches!(&d, StartDecision::Wait(w) if w.contains("permission denied")),
            "{d:?}"
        );
    }

    #[test]
    fn a_bucket_with_backups_is_restored_even_if_the_state_was_lost() {
        let mut c = three_members();
        c.members.truncate(1);
        let e = with_backups(
            evidence(false, None, false),
            Backups::Available { newest_revision: 7 },
        );
        assert_eq!(
            decide_start(&c, "etcd-main-0", &e),
            StartDecision::RestoreFromBackup
        );
    }

    #[test]
    fn an_empty_bucket_bootstraps_only_a_cluster_that_never_existed() {
        let c = three_members();
        let fresh = with_backups(evidence(false, None, false), Backups::Empty);
        assert_eq!(
            decide_start(&c, "etcd-main-0", &fresh),
            StartDecision::Start(StartMode::Bootstrap)
        );
        let existed = with_backups(evidence(false, None, true), Backups::Empty);
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

    /// A bootstrap member the others started without: listed with its name but it never served.
    /// It starts and joins them; it has nothing to replace.
    #[test]
    fn a_bootstrap_member_that_never_served_joins_without_being_replaced() {
        let mut late = listed(7, "etcd-main-1", 2390);
        late.client_urls.clear();
        let list = vec![listed(1, "etcd-main-0", 2380), late];
        let d = decide_start(
            &three_members(),
            "etcd-main-1",
            &evidence(false, Some(list), true),
        );
        assert!(
            matches!(d, StartDecision::Start(StartMode::Join { .. })),
            "{d:?}"
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

    #[test]
    fn data_of_a_removed_member_is_recognised_only_on_the_same_clusters_word() {
        let own = DataState::Present {
            cluster_id: Some(7),
            member_id: Some(3),
            revision: Some(40),
        };
        let list = |cluster_id, ids: &[u64]| MemberList {
            cluster_id,
            members: ids.iter().map(|&id| listed(id, "m", 2380)).collect(),
        };
        assert_eq!(removed_member_data(&own, &list(7, &[1, 2])), Some(3));
        assert_eq!(removed_member_data(&own, &list(7, &[1, 2, 3])), None);
        assert_eq!(
            removed_member_data(&own, &list(8, &[1, 2])),
            None,
            "another cluster's list says nothing about this data"
        );
        assert_eq!(removed_member_data(&own, &list(7, &[])), None);
        let unnamed = evidence(true, None, true).own;
        assert_eq!(removed_member_data(&unnamed, &list(7, &[1])), None);
    }

    #[test]
    fn a_leaving_member_without_data_is_never_added_back() {
        let mut cluster = three_members();
        cluster.leaving = vec!["etcd-main-2".into()];
        let ev = evidence(false, Some(vec![listed(1, "etcd-main-0", 2380)]), true);
        assert!(matches!(
            decide_start(&cluster, "etcd-main-2", &ev),
            StartDecision::Wait(why) if why.contains("leaving")
        ));
        let with_data = evidence(true, None, true);
        assert_eq!(
            decide_start(&cluster, "etcd-main-2", &with_data),
            StartDecision::Start(StartMode::Restart),
            "with its data it restarts, so that it can be removed properly"
        );
    }
}
