//! The agent's one start decision: everything the agent gathered before starting etcd (its data
//! directory, the leases, etcd's member lists, the bucket) goes in as one [`StartObservation`],
//! one [`StartAction`] comes out. The agent only gathers and acts; every choice about the
//! member's data is made here, so each one has a unit test: unusable data, data a quorum-loss
//! recovery dropped, data of a member etcd removed, a lone member behind the bucket, and the
//! empty-data start ([`decide_start`]) with its turn to join ([`may_join`]).

use super::MemberList;
use super::data_state::{DataState, PeerData};
use super::join::{JoinDecision, may_join};
use super::planner::{DesiredMember, ObservedMember};
use super::recovery::RecoveryRecord;
use super::start::{Backups, StartDecision, StartEvidence, decide_start, removed_member_data};
use crate::cluster_config::ClusterConfig;
use crate::lease::{HolderIdentity, MemberLease};
use crate::member_etcd_config::StartMode;

/// What the agent gathered before starting etcd, each part read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartObservation {
    /// The evidence of the empty-data start: own data, etcd's member list as any other member
    /// answers it, the other members' published data, the bucket (read only when no member
    /// list answered).
    pub evidence: StartEvidence,
    /// Why the data directory holds something etcd cannot use, if it does (it is moved aside,
    /// never deleted).
    pub unusable: Option<String>,
    /// The member leases as read now: their recovery records say whom a recovery dropped.
    pub leases: Vec<MemberLease>,
    /// The recovery records this member's data already outlived: they no longer speak of it.
    pub superseded: Vec<RecoveryRecord>,
    /// This member is taking part in a quorum-loss recovery now (its own record is pending).
    pub recovering: bool,
    /// The member list as the cluster's leader answers it, read only when this member's data
    /// names a member ID: the one list that has applied every committed removal.
    pub leader_list: Option<MemberList>,
    /// etcd's view of every listed member (health, leadership), for whose turn it is to join;
    /// the same members as `evidence.member_list`, empty when no list answered.
    pub observed: Vec<ObservedMember>,
    /// A lone member's data compared with the bucket.
    pub lone: LoneData,
}

/// A one-member cluster with backups looks at its data, opened on a private port before any
/// client can reach it, against the bucket: data that is an older state of the bucket's history
/// is replaced. [`compares_with_bucket`] says when this is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoneData {
    /// Not a lone member with backups, or no data of its own: nothing was compared.
    NotCompared,
    /// etcd could not open the data privately; why.
    Unopened(String),
    /// What etcd reported about the data and what the bucket holds.
    Opened {
        /// The data's cluster ID.
        cluster_id: u64,
        /// The data's revision.
        revision: i64,
        /// What the bucket holds.
        backups: Backups,
        /// The cluster the bucket's chain belongs to (read only when the bucket has backups).
        chain: Option<u64>,
    },
}

/// What the agent does next; it acts on exactly this.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartAction {
    /// Start etcd in this mode (anything but `Restart` is published as data first).
    Start(StartMode),
    /// Add this member as a learner with these peer URLs, then start it joining.
    AddSelfAsLearner {
        /// Peer URLs to register, from the desired member.
        peer_urls: Vec<String>,
    },
    /// Remove this member's stale entry (it lost its data), then look again: it rejoins as a
    /// learner.
    ReplaceSelf {
        /// The stale member ID.
        id: u64,
    },
    /// Restore this member from the bucket (every member lost its data), then restart on it.
    RestoreFromBackup,
    /// Move the data directory aside (never deleting it), then do `then`.
    MoveDataAside {
        /// Why the data must not start, for the log and a failed move's wait.
        why: String,
        /// What follows.
        then: AfterAside,
    },
    /// Nothing safe can be done yet; look again shortly.
    Wait(String),
    /// The data could not be compared with the bucket; compare again at the configuration
    /// pace, as every comparison starts etcd.
    CheckLater(String),
}

/// What follows moving the data aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterAside {
    /// Look again: without data the member joins (as a learner) or restores as the start
    /// decision says.
    DecideAgain,
    /// Restore the bucket's newest state without deciding again: the decision was made on
    /// evidence already, and the empty-data start would wait for members that may be gone.
    RestoreFromBackup,
}

/// Whether a member with data compares it with the bucket before it serves: a one-member
/// cluster with backups.
pub fn compares_with_bucket(cluster: &ClusterConfig) -> bool {
    cluster.members.len() == 1 && cluster.leaving.is_empty() && cluster.backup.is_some()
}

/// Whether the cluster ran before, as the leases say: a lease carries a cluster ID, or a member
/// published data etcd ran on (a member about to bootstrap publishes `present` without a cluster
/// ID first, and that must not make its fellow bootstrap members wait).
pub fn cluster_existed(leases: &[MemberLease], peers: &[PeerData]) -> bool {
    leases
        .iter()
        .filter_map(|l| l.holder_identity.as_deref())
        .filter_map(|h| h.parse::<HolderIdentity>().ok())
        .any(|h| h.cluster_id.is_some())
        || peers.iter().any(|p| {
            matches!(
                p.state,
                Some(DataState::Present {
                    cluster_id: Some(_),
                    ..
                })
            )
        })
}

/// Decides how member `me` starts, from everything its agent gathered.
pub fn decide(cluster: &ClusterConfig, me: &str, seen: &StartObservation) -> StartAction {
    if let Some(why) = &seen.unusable {
        return StartAction::MoveDataAside {
            why: format!("unusable data directory ({why})"),
            then: AfterAside::DecideAgain,
        };
    }
    let own = &seen.evidence.own;
    if let DataState::Present {
        cluster_id: Some(cluster_id),
        member_id: Some(member_id),
        ..
    } = own
        && !seen.recovering
        && RecoveryRecord::dropped_by_any(&seen.leases, *cluster_id, *member_id, &seen.superseded)
    {
        // Its data belongs to a membership the cluster left; it rejoins as a learner.
        return StartAction::MoveDataAside {
            why: format!("a quorum-loss recovery dropped {me}"),
            then: AfterAside::DecideAgain,
        };
    }
    if let Some(list) = &seen.leader_list
        && let Some(id) = removed_member_data(own, list)
    {
        // etcd removed this member (a scale-in) and its peers would refuse it. A member that
        // is still desired (scaled out again) rejoins as a learner.
        if cluster.is_leaving(me) || cluster.member(me).is_none() {
            return StartAction::Wait(format!(
                "{me} was removed from the cluster (member {id:x}); its data is not started again"
            ));
        }
        return StartAction::MoveDataAside {
            why: format!("{me} was removed from the cluster (member {id:x})"),
            then: AfterAside::DecideAgain,
        };
    }
    if let DataState::Present { .. } = own {
        return restart_or_replace(&seen.lone);
    }
    match decide_start(cluster, me, &seen.evidence) {
        StartDecision::Start(mode) => StartAction::Start(mode),
        StartDecision::Wait(reason) => StartAction::Wait(reason),
        StartDecision::RestoreFromBackup => StartAction::RestoreFromBackup,
        StartDecision::ReplaceSelf { id } => StartAction::ReplaceSelf { id },
        StartDecision::AddSelfAsLearner => {
            match may_join(&seen.observed, &DesiredMember::of_cluster(cluster), me) {
                JoinDecision::AddSelfAsLearner { peer_urls } => {
                    StartAction::AddSelfAsLearner { peer_urls }
                }
                JoinDecision::Wait { step } => {
                    StartAction::Wait(format!("not {me}'s turn to join yet; first: {step}"))
                }
                other => StartAction::Wait(format!(
                    "{me} cannot add itself as a learner now ({other:?})"
                )),
            }
        }
    }
}

/// A member with data restarts on it, unless it is a lone member whose data is an older state
/// of the history the bucket holds (same cluster, lower revision): only then is replacing it
/// with the newest backup right. A cluster restored to an earlier revision is another history
/// and is left alone. Data that could not be opened is compared again later.
fn restart_or_replace(lone: &LoneData) -> StartAction {
    match lone {
        LoneData::Unopened(why) => StartAction::CheckLater(why.clone()),
        LoneData::Opened {
            cluster_id,
            revision,
            backups: Backups::Available { newest_revision },
            chain,
        } if newest_revision > revision && *chain == Some(*cluster_id) => {
            StartAction::MoveDataAside {
                why: format!(
                    "the data ends at revision {revision} but the backups of the same cluster \
                     ({cluster_id:x}) reach {newest_revision}"
                ),
                then: AfterAside::RestoreFromBackup,
            }
        }
        LoneData::NotCompared | LoneData::Opened { .. } => StartAction::Start(StartMode::Restart),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Member;
    use super::*;
    use crate::member_etcd_config::tests::three_members;
    use crate::membership::recovery::RECOVERY_ANNOTATION;

    fn present(cluster_id: u64, member_id: u64, revision: i64) -> DataState {
        DataState::Present {
            cluster_id: Some(cluster_id),
            member_id: Some(member_id),
            revision: Some(revision),
        }
    }

    fn observation(own: DataState) -> StartObservation {
        StartObservation {
            evidence: StartEvidence {
                own,
                member_list: None,
                cluster_existed: true,
                backups: Backups::NotConfigured,
                peers: Vec::new(),
                recovery_requested: false,
            },
            unusable: None,
            leases: Vec::new(),
            superseded: Vec::new(),
            recovering: false,
            leader_list: None,
            observed: Vec::new(),
            lone: LoneData::NotCompared,
        }
    }

    /// A started voter, healthy; member 1 leads.
    fn voter(id: u64, name: &str, port: u16) -> ObservedMember {
        let mut member = Member::new(id, name, vec![format!("http://127.0.0.1:{port}")], false);
        member.client_urls = vec![format!("http://127.0.0.1:{}", port - 1)];
        ObservedMember {
            member,
            healthy: true,
            is_leader: id == 1,
        }
    }

    fn listed(seen: &mut StartObservation, observed: Vec<ObservedMember>) {
        seen.evidence.member_list = Some(observed.iter().map(|o| o.member.clone()).collect());
        seen.observed = observed;
    }

    /// A lease whose recovery record (cluster c1, revision 9) dropped member `dropped`.
    fn dropping(dropped: u64) -> MemberLease {
        let record = RecoveryRecord {
            member: "etcd-main-0".into(),
            member_id: 1,
            cluster_id: 0xc1,
            revision: 9,
            dropped: vec![dropped],
            request: None,
        };
        let mut lease = MemberLease::default();
        lease.annotations.insert(
            RECOVERY_ANNOTATION.into(),
            serde_json::to_string(&record).expect("record"),
        );
        lease
    }

    #[test]
    fn unusable_data_is_moved_aside_and_the_start_decided_again() {
        let mut seen = observation(DataState::Empty);
        seen.unusable = Some("no member/ directory".into());
        assert_eq!(
            decide(&three_members(), "etcd-main-1", &seen),
            StartAction::MoveDataAside {
                why: "unusable data directory (no member/ directory)".into(),
                then: AfterAside::DecideAgain,
            }
        );
    }

    /// Moved from the agent: data a recovery dropped belongs to a membership the cluster left.
    #[test]
    fn data_a_recovery_dropped_is_moved_aside_unless_superseded_or_recovering() {
        let c = three_members();
        let mut seen = observation(present(0xc1, 2, 40));
        seen.leases = vec![dropping(2)];
        assert!(matches!(
            decide(&c, "etcd-main-1", &seen),
            StartAction::MoveDataAside { ref why, then: AfterAside::DecideAgain } if why.contains("recovery dropped etcd-main-1")
        ));
        let mut recovering = seen.clone();
        recovering.recovering = true;
        assert_eq!(
            decide(&c, "etcd-main-1", &recovering),
            StartAction::Start(StartMode::Restart),
            "a member taking part in a recovery keeps its data"
        );
        let mut outlived = seen.clone();
        outlived.superseded = RecoveryRecord::all(&seen.leases);
        assert_eq!(
            decide(&c, "etcd-main-1", &outlived),
            StartAction::Start(StartMode::Restart),
            "a record the data already outlived says nothing about it"
        );
        let mut other = seen.clone();
        other.leases = vec![dropping(3)];
        assert_eq!(
            decide(&c, "etcd-main-1", &other),
            StartAction::Start(StartMode::Restart)
        );
    }

    /// Moved from the agent: data of a member etcd removed is moved aside when the member is
    /// desired again, and not started at all when it is not.
    #[test]
    fn data_of_a_removed_member_rejoins_only_when_still_desired() {
        let mut c = three_members();
        let mut seen = observation(present(0xc1, 3, 40));
        seen.leader_list = Some(MemberList {
            cluster_id: 0xc1,
            members: vec![voter(1, "etcd-main-0", 2380).member],
        });
        assert!(matches!(
            decide(&c, "etcd-main-2", &seen),
            StartAction::MoveDataAside { ref why, then: AfterAside::DecideAgain } if why.contains("removed from the cluster (member 3)")
        ));
        c.leaving = vec!["etcd-main-2".into()];
        assert!(matches!(
            decide(&c, "etcd-main-2", &seen),
            StartAction::Wait(ref why) if why.contains("is not started again")
        ));
        let mut listed_still = seen.clone();
        listed_still.leader_list = Some(MemberList {
            cluster_id: 0xc1,
            members: vec![
                voter(1, "etcd-main-0", 2380).member,
                voter(3, "etcd-main-2", 2400).member,
            ],
        });
        assert_eq!(
            decide(&c, "etcd-main-2", &listed_still),
            StartAction::Start(StartMode::Restart)
        );
    }

    /// Moved from the agent: a lone member's data that is an older state of the bucket's
    /// history is replaced; another history, an equal revision or no backups are left alone.
    #[test]
    fn a_lone_member_behind_the_bucket_is_replaced_from_it() {
        let mut c = three_members();
        c.members.truncate(1);
        let opened = |revision, newest_revision, chain| LoneData::Opened {
            cluster_id: 0xc1,
            revision,
            backups: Backups::Available { newest_revision },
            chain,
        };
        let mut seen = observation(present(0xc1, 1, 40));
        seen.lone = opened(40, 90, Some(0xc1));
        assert!(matches!(
            decide(&c, "etcd-main-0", &seen),
            StartAction::MoveDataAside { ref why, then: AfterAside::RestoreFromBackup }
                if why.contains("ends at revision 40") && why.contains("reach 90")
        ));
        for lone in [
            opened(40, 90, Some(0xc2)),
            opened(90, 90, Some(0xc1)),
            LoneData::Opened {
                cluster_id: 0xc1,
                revision: 40,
                backups: Backups::Empty,
                chain: None,
            },
            LoneData::NotCompared,
        ] {
            seen.lone = lone.clone();
            assert_eq!(
                decide(&c, "etcd-main-0", &seen),
                StartAction::Start(StartMode::Restart),
                "{lone:?}"
            );
        }
        seen.lone = LoneData::Unopened("etcd exited".into());
        assert_eq!(
            decide(&c, "etcd-main-0", &seen),
            StartAction::CheckLater("etcd exited".into())
        );
    }

    #[test]
    fn only_a_lone_member_with_backups_compares_with_the_bucket() {
        let mut c = three_members();
        assert!(!compares_with_bucket(&c));
        c.members.truncate(1);
        assert_eq!(compares_with_bucket(&c), c.backup.is_some());
    }

    /// Moved from the agent: a member not in the list adds itself only on its turn.
    #[test]
    fn a_member_not_listed_adds_itself_as_a_learner_on_its_turn() {
        let c = three_members();
        let mut seen = observation(DataState::Empty);
        listed(&mut seen, vec![voter(1, "etcd-main-0", 2380)]);
        assert_eq!(
            decide(&c, "etcd-main-1", &seen),
            StartAction::AddSelfAsLearner {
                peer_urls: vec![c.member("etcd-main-1").expect("member").peer_url.clone()]
            }
        );
        let d = decide(&c, "etcd-main-2", &seen);
        assert!(
            matches!(&d, StartAction::Wait(w) if w.contains("not etcd-main-2's turn")),
            "{d:?}"
        );
        let mut unhealthy = seen.clone();
        unhealthy.observed[0].healthy = false;
        let d = decide(&c, "etcd-main-1", &unhealthy);
        assert!(matches!(&d, StartAction::Wait(_)), "{d:?}");
    }

    #[test]
    fn the_empty_data_start_decides_the_rest() {
        let c = three_members();
        let mut seen = observation(DataState::Empty);
        seen.evidence.cluster_existed = false;
        assert_eq!(
            decide(&c, "etcd-main-0", &seen),
            StartAction::Start(StartMode::Bootstrap)
        );
        seen.evidence.cluster_existed = true;
        seen.evidence.backups = Backups::Available { newest_revision: 7 };
        seen.evidence.peers = ["etcd-main-1", "etcd-main-2"]
            .map(|name| PeerData {
                name: name.into(),
                state: Some(DataState::Empty),
            })
            .to_vec();
        assert_eq!(
            decide(&c, "etcd-main-0", &seen),
            StartAction::RestoreFromBackup
        );
        let mut stale = observation(DataState::Empty);
        listed(
            &mut stale,
            vec![voter(1, "etcd-main-0", 2380), voter(7, "etcd-main-1", 2390)],
        );
        assert_eq!(
            decide(&c, "etcd-main-1", &stale),
            StartAction::ReplaceSelf { id: 7 }
        );
    }

    #[test]
    fn the_cluster_existed_once_a_lease_or_a_peer_says_so() {
        let empty = PeerData {
            name: "etcd-main-1".into(),
            state: Some(DataState::Empty),
        };
        let bootstrapping = PeerData {
            name: "etcd-main-2".into(),
            state: Some(DataState::Present {
                cluster_id: None,
                member_id: None,
                revision: None,
            }),
        };
        assert!(!cluster_existed(&[], &[empty.clone(), bootstrapping]));
        let ran = PeerData {
            name: "etcd-main-2".into(),
            state: Some(present(0xc1, 3, 5)),
        };
        assert!(cluster_existed(&[], &[empty, ran]));
    }
}
