//! Recovery after quorum loss. When a majority of the voting members lost their data, etcd can
//! never regain quorum by itself; a surviving member must become a one-member cluster
//! (`--force-new-cluster`) with its data, and the others join it as learners. Which member, and
//! whether to act at all, is decided here from evidence only:
//!
//! - a member **lost its data** only when its agent published an empty data directory;
//! - a member **holds data up to revision r** only when its etcd answers with that revision now;
//! - anything else (stopped, unreachable, never reported) is **unknown**: it may hold the newest
//!   acknowledged writes, so nothing happens automatically and the wait names it. A person's
//!   explicit request (`quorate recover`, the recover annotation) treats unknown members as lost.
//!
//! The survivor with the highest revision is chosen (ties: the first in desired order). If the
//! bucket holds a newer state of the same history, that member restores it instead.

use super::data_state::DataState;
use super::planner::quorum;
use super::{Member, MemberList};
use crate::cluster_config::ClusterConfig;
use crate::lease::MemberLease;
use serde::{Deserialize, Serialize};

/// Member-lease annotation on the member that recovered the cluster: the [`RecoveryRecord`].
pub const RECOVERY_ANNOTATION: &str = "quorate.io/recovery";

/// What a recovery did, published by the member that carried it out. A member whose ID is in
/// `dropped` and that still holds data of the old membership moves it aside and rejoins as a
/// learner instead of staying down as a removed member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
    /// The member that recovered the cluster.
    pub member: String,
    /// Its member ID.
    pub member_id: u64,
    /// The cluster ID (unchanged by `--force-new-cluster`).
    pub cluster_id: u64,
    /// The revision it recovered at.
    pub revision: i64,
    /// The member IDs that left the cluster.
    pub dropped: Vec<u64>,
    /// The explicit request it carried out, if one asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

impl RecoveryRecord {
    /// The record a lease carries, if any (an unreadable one counts as none).
    pub fn of_lease(lease: &MemberLease) -> Option<RecoveryRecord> {
        serde_json::from_str(lease.annotations.get(RECOVERY_ANNOTATION)?).ok()
    }

    /// Whether any lease records a recovery that dropped `member_id` from cluster `cluster_id`,
    /// leaving out the `superseded` records: those that already existed when this member's data
    /// was restored from the bucket. They speak of data it no longer holds, and a restore gives
    /// it the same member and cluster IDs again (both derive from names, URLs and the token).
    pub fn dropped_by_any(
        leases: &[MemberLease],
        cluster_id: u64,
        member_id: u64,
        superseded: &[RecoveryRecord],
    ) -> bool {
        leases.iter().filter_map(RecoveryRecord::of_lease).any(|r| {
            r.cluster_id == cluster_id && r.dropped.contains(&member_id) && !superseded.contains(&r)
        })
    }

    /// Every record the leases carry.
    pub fn all(leases: &[MemberLease]) -> Vec<RecoveryRecord> {
        leases.iter().filter_map(RecoveryRecord::of_lease).collect()
    }

    /// Whether a recovery already carried out explicit request `request`.
    pub fn served(leases: &[MemberLease], request: &str) -> bool {
        leases
            .iter()
            .filter_map(RecoveryRecord::of_lease)
            .any(|r| r.request.as_deref() == Some(request))
    }
}

/// What one voting member's etcd answered just now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdAnswer {
    /// Its cluster ID.
    pub cluster_id: u64,
    /// Its member ID.
    pub member_id: u64,
    /// Its newest revision.
    pub revision: i64,
    /// The leader it knows (0: none).
    pub leader_id: u64,
}

/// Everything known about one voting member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoterReport {
    /// The member list entry (from a survivor's etcd).
    pub member: Member,
    /// What its agent published about its data, if anything.
    pub data: Option<DataState>,
    /// What its etcd answered just now, if it answered.
    pub answer: Option<EtcdAnswer>,
}

/// The bucket's newest state and the history it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketHead {
    /// Newest revision a restore reaches.
    pub revision: i64,
    /// The cluster whose history the chain holds, when the bucket records it.
    pub cluster_id: Option<u64>,
}

/// What to do about quorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecoveryDecision {
    /// A leader exists, or quorum can come back without recovery.
    NotNeeded,
    /// Quorum is lost and recovery may be needed, but evidence is missing; says what.
    Wait(String),
    /// `member` restarts alone with `--force-new-cluster` on its data at `revision`; the other
    /// voters (`dropped`) leave the cluster and rejoin as learners.
    ForceNewCluster {
        /// The surviving member's name.
        member: String,
        /// Its member ID.
        member_id: u64,
        /// Its revision.
        revision: i64,
        /// The member IDs that leave the cluster.
        dropped: Vec<u64>,
    },
    /// `member` moves its data aside and restores the bucket's newer state of the same history
    /// as a one-member cluster; the others join it.
    RestoreFromBucket {
        /// The member that restores.
        member: String,
        /// The revision the bucket reaches.
        revision: i64,
        /// The member IDs that leave the cluster.
        dropped: Vec<u64>,
    },
}

/// Decides whether and how to recover quorum, from the voters' reports (every voting member of
/// the member list), the bucket's head and whether a person asked for recovery.
pub fn decide_recovery(
    voters: &[VoterReport],
    bucket: Option<BucketHead>,
    requested: bool,
) -> RecoveryDecision {
    if voters.is_empty()
        || voters
            .iter()
            .any(|v| v.answer.is_some_and(|a| a.leader_id != 0))
    {
        return RecoveryDecision::NotNeeded;
    }
    let name = |v: &VoterReport| {
        if v.member.name.is_empty() {
            format!("{:x}", v.member.id)
        } else {
            v.member.name.clone()
        }
    };
    // A voter that never served (a fresh cluster's bootstrap member not up yet, listed with its
    // name but no client URLs) has not lost anything: it never had data.
    let is_lost = |v: &VoterReport| {
        v.answer.is_none() && v.member.has_served() && v.data == Some(DataState::Empty)
    };
    let lost: Vec<&VoterReport> = voters.iter().filter(|v| is_lost(v)).collect();
    let survivors: Vec<(&VoterReport, EtcdAnswer)> = voters
        .iter()
        .filter_map(|v| v.answer.map(|a| (v, a)))
        .collect();
    let unknown: Vec<&VoterReport> = voters
        .iter()
        .filter(|v| v.answer.is_none() && !is_lost(v))
        .collect();
    let needed = quorum(voters.len());
    if survivors.len() >= needed && !requested {
        // A majority answers without a leader: an election is running, quorum is not lost.
        return RecoveryDecision::NotNeeded;
    }
    if !requested {
        if voters.len() - lost.len() >= needed {
            // Enough members may still hold data: quorum comes back when they do.
            let missing: Vec<String> = unknown
                .iter()
                .map(|v| format!("{} ({})", name(v), describe(v.data.as_ref())))
                .collect();
            return RecoveryDecision::Wait(format!(
                "quorum lost: {} of {} voting members answer, {needed} needed; waiting for {} to \
                 come back. Nothing is done automatically while they may hold data; to recover \
                 from the members that answer, ask explicitly (`quorate recover NAME`, or the \
                 {} annotation)",
                survivors.len(),
                voters.len(),
                missing.join(", "),
                quorate_api::annotations::RECOVER
            ));
        }
        if !unknown.is_empty() {
            let missing: Vec<String> = unknown
                .iter()
                .map(|v| format!("{} ({})", name(v), describe(v.data.as_ref())))
                .collect();
            return RecoveryDecision::Wait(format!(
                "a majority lost its data ({}), but {} may hold newer data; waiting for them to \
                 answer or report an empty data directory before recovering from a survivor \
                 (an explicit `quorate recover NAME` or the {} annotation does not wait)",
                lost.iter().map(|v| name(v)).collect::<Vec<_>>().join(", "),
                missing.join(", "),
                quorate_api::annotations::RECOVER
            ));
        }
    }
    // Highest revision wins; ties go to the first voter in the given (desired) order.
    let Some((best, answer)) = survivors
        .iter()
        .copied()
        .reduce(|a, b| if b.1.revision > a.1.revision { b } else { a })
    else {
        return RecoveryDecision::Wait(
            "no voting member answers: nothing to recover from but the bucket; a member with \
             no data restores it once every member reported an empty data directory"
                .into(),
        );
    };
    let dropped: Vec<u64> = voters
        .iter()
        .filter(|v| v.member.id != best.member.id)
        .map(|v| v.member.id)
        .collect();
    match bucket {
        Some(head)
            if head.revision > answer.revision && head.cluster_id == Some(answer.cluster_id) =>
        {
            RecoveryDecision::RestoreFromBucket {
                member: name(best),
                revision: head.revision,
                dropped,
            }
        }
        _ => RecoveryDecision::ForceNewCluster {
            member: name(best),
            member_id: best.member.id,
            revision: answer.revision,
            dropped,
        },
    }
}

/// The voting members as one member's etcd lists them, with what each answered and published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voters {
    /// The cluster the listing member's etcd belongs to.
    pub cluster_id: u64,
    /// Every voting member, in the list's order.
    pub reports: Vec<VoterReport>,
}

impl Voters {
    /// The voters of `cluster_id` (`answers`: each voting member with its etcd's answer), with
    /// the data states their leases publish; an answer from another cluster counts as none.
    pub fn new(
        cluster: &ClusterConfig,
        leases: &[MemberLease],
        cluster_id: u64,
        answers: Vec<(Member, Option<EtcdAnswer>)>,
    ) -> Voters {
        let reports = answers
            .into_iter()
            .map(|(member, answer)| {
                let data = cluster
                    .member(&member.name)
                    .and_then(|d| leases.iter().find(|l| l.name == d.lease_name))
                    .and_then(DataState::of_lease);
                VoterReport {
                    member,
                    data,
                    answer: answer.filter(|a| a.cluster_id == cluster_id),
                }
            })
            .collect();
        Voters {
            cluster_id,
            reports,
        }
    }
}

/// What the bucket's head is known as, for [`quorum_action`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketSeen {
    /// Not read (only the member that would recover reads it).
    NotRead,
    /// Read: its head, `None` when there is no bucket or it could not be read.
    Read(Option<BucketHead>),
}

/// What one running member observed about quorum, gathered once by its quorum duty.
#[derive(Clone, Debug)]
pub struct QuorumEvidence<'a> {
    /// This member's name.
    pub me: &'a str,
    /// Its member ID and cluster ID, as its etcd reported them.
    pub member_id: u64,
    /// See `member_id`.
    pub cluster_id: u64,
    /// Recovery records that already existed when this member's data was restored from the
    /// bucket: they speak of data it no longer holds.
    pub superseded: &'a [RecoveryRecord],
    /// Every member lease.
    pub leases: &'a [MemberLease],
    /// The voters, when this member's etcd has no leader and could list them; `None` when its
    /// etcd has a leader (only a recovery's record matters then) or could not list them.
    pub voters: Option<Voters>,
    /// A person's request to recover (`quorate recover`, the recover annotation), if any.
    pub request: Option<&'a str>,
    /// The bucket's head.
    pub bucket: BucketSeen,
}

/// What one member does about quorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuorumAction {
    /// Nothing: a leader exists, or evidence is missing.
    None,
    /// Quorum is lost and recovery may be needed, but evidence is missing; says what.
    Wait(String),
    /// Another member recovers the cluster; this one rejoins afterwards.
    OtherRecovers(String),
    /// This member would recover with its own data: read the bucket's head and decide again
    /// (the bucket wins when it holds a newer state of the same history).
    ReadBucket,
    /// Restart etcd alone with `--force-new-cluster`: this member recovers the cluster.
    ForceNewCluster(RecoveryRecord),
    /// Move the data aside and restore the bucket's newer state: this member recovers.
    RestoreFromBucket(RecoveryRecord),
    /// A recovery dropped this member: move its data aside and rejoin as a learner.
    Dropped,
}

/// Decides what member `me` does about quorum: a recovery that dropped it comes first; then,
/// without a leader, [`decide_recovery`] over the voters, taking part only when it is the
/// member chosen (its record made here, kept before it acts).
pub fn quorum_action(evidence: &QuorumEvidence<'_>) -> QuorumAction {
    let e = evidence;
    if RecoveryRecord::dropped_by_any(e.leases, e.cluster_id, e.member_id, e.superseded) {
        return QuorumAction::Dropped;
    }
    let Some(voters) = &e.voters else {
        return QuorumAction::None;
    };
    let request = e
        .request
        .filter(|r| !RecoveryRecord::served(e.leases, r))
        .map(str::to_string);
    let bucket = match e.bucket {
        BucketSeen::NotRead => None,
        BucketSeen::Read(head) => head,
    };
    let record = |member_id: u64, revision: i64, dropped: Vec<u64>| RecoveryRecord {
        member: e.me.to_string(),
        member_id,
        cluster_id: voters.cluster_id,
        revision,
        dropped,
        request: request.clone(),
    };
    match decide_recovery(&voters.reports, bucket, request.is_some()) {
        RecoveryDecision::NotNeeded => QuorumAction::None,
        RecoveryDecision::Wait(reason) => QuorumAction::Wait(reason),
        RecoveryDecision::ForceNewCluster { member, .. }
            if member == e.me && e.bucket == BucketSeen::NotRead =>
        {
            QuorumAction::ReadBucket
        }
        RecoveryDecision::ForceNewCluster {
            member,
            member_id,
            revision,
            dropped,
        } if member == e.me => QuorumAction::ForceNewCluster(record(member_id, revision, dropped)),
        RecoveryDecision::RestoreFromBucket {
            member,
            revision,
            dropped,
        } if member == e.me => {
            QuorumAction::RestoreFromBucket(record(e.member_id, revision, dropped))
        }
        RecoveryDecision::ForceNewCluster { member, .. }
        | RecoveryDecision::RestoreFromBucket { member, .. } => QuorumAction::OtherRecovers(member),
    }
}

/// Why a member's etcd is gone, as a member list from its own cluster shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// No evidence that it left the cluster: etcd just exited.
    Exited,
    /// It was removed from the cluster; restarting it would be wrong.
    Removed,
    /// A quorum-loss recovery dropped it: its data belongs to the old membership.
    Dropped,
}

/// After member `member_id`'s etcd exited: was it removed from cluster `cluster_id`, dropped by
/// a recovery (a record on the leases, `superseded` ones left out), or neither? Only a
/// non-empty member list from its own cluster (`list`, as another member answered) is
/// evidence; a fork's is not.
pub fn why_gone(
    list: &MemberList,
    member_id: u64,
    cluster_id: u64,
    leases: &[MemberLease],
    superseded: &[RecoveryRecord],
) -> Gone {
    if list.cluster_id != cluster_id
        || list.members.is_empty()
        || list.members.iter().any(|m| m.id == member_id)
    {
        Gone::Exited
    } else if RecoveryRecord::dropped_by_any(leases, cluster_id, member_id, superseded) {
        Gone::Dropped
    } else {
        Gone::Removed
    }
}

fn describe(data: Option<&DataState>) -> String {
    data.map(DataState::describe)
        .unwrap_or_else(|| "has not reported its data".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn voter(id: u64, data: Option<DataState>, answer: Option<i64>) -> VoterReport {
        let mut member = Member::new(id, &format!("m-{id}"), vec![], false);
        member.client_urls = vec![format!("http://m-{id}:2379")];
        VoterReport {
            member,
            data,
            answer: answer.map(|revision| EtcdAnswer {
                cluster_id: 0xc1,
                member_id: id,
                revision,
                leader_id: 0,
            }),
        }
    }

    fn present(revision: i64) -> Option<DataState> {
        Some(DataState::Present {
            cluster_id: Some(0xc1),
            member_id: None,
            revision: Some(revision),
        })
    }

    #[test]
    fn two_of_three_wiped_recovers_from_the_survivor() {
        let voters = [
            voter(1, Some(DataState::Empty), None),
            voter(2, present(50), Some(50)),
            voter(3, Some(DataState::Empty), None),
        ];
        assert_eq!(
            decide_recovery(&voters, None, false),
            RecoveryDecision::ForceNewCluster {
                member: "m-2".into(),
                member_id: 2,
                revision: 50,
                dropped: vec![1, 3],
            }
        );
    }

    #[test]
    fn stopped_members_are_not_lost_members() {
        let voters = [
            voter(1, present(50), None),
            voter(2, present(50), Some(50)),
            voter(3, present(49), None),
        ];
        let d = decide_recovery(&voters, None, false);
        assert!(
            matches!(&d, RecoveryDecision::Wait(w) if w.contains("m-1") && w.contains("m-3") && w.contains("quorate recover")),
            "{d:?}"
        );
        assert!(
            matches!(
                decide_recovery(&voters, None, true),
                RecoveryDecision::ForceNewCluster { member_id: 2, .. }
            ),
            "an explicit request recovers from the members that answer"
        );
    }

    #[test]
    fn a_majority_wiped_but_an_unknown_member_waits() {
        let voters = [
            voter(1, Some(DataState::Empty), None),
            voter(2, Some(DataState::Empty), None),
            voter(3, present(60), None),
            voter(4, present(50), Some(50)),
            voter(5, Some(DataState::Empty), None),
        ];
        let d = decide_recovery(&voters, None, false);
        assert!(
            matches!(&d, RecoveryDecision::Wait(w) if w.contains("m-3 (has data of cluster c1 up to revision 60)")),
            "{d:?}"
        );
    }

    #[test]
    fn the_highest_revision_wins_and_ties_go_to_the_first() {
        let voters = [
            voter(1, Some(DataState::Empty), None),
            voter(2, Some(DataState::Empty), None),
            voter(3, Some(DataState::Empty), None),
            voter(4, present(50), Some(50)),
            voter(5, present(52), Some(52)),
        ];
        assert!(matches!(
            decide_recovery(&voters, None, false),
            RecoveryDecision::ForceNewCluster {
                member_id: 5,
                revision: 52,
                ..
            }
        ));
        let tied = [
            voter(1, Some(DataState::Empty), None),
            voter(2, present(7), Some(7)),
            voter(3, present(7), Some(7)),
        ];
        assert!(matches!(
            decide_recovery(&tied, None, true),
            RecoveryDecision::ForceNewCluster { member_id: 2, .. }
        ));
    }

    #[test]
    fn a_newer_bucket_of_the_same_history_is_preferred_and_another_history_is_not() {
        let voters = [
            voter(1, Some(DataState::Empty), None),
            voter(2, present(50), Some(50)),
            voter(3, Some(DataState::Empty), None),
        ];
        let same = BucketHead {
            revision: 70,
            cluster_id: Some(0xc1),
        };
        assert!(matches!(
            decide_recovery(&voters, Some(same), false),
            RecoveryDecision::RestoreFromBucket { revision: 70, .. }
        ));
        let other = BucketHead {
            revision: 70,
            cluster_id: Some(0xdead),
        };
        assert!(matches!(
            decide_recovery(&voters, Some(other), false),
            RecoveryDecision::ForceNewCluster { revision: 50, .. }
        ));
    }

    /// A fresh cluster's bootstrap members that have not started yet (listed with their names
    /// but no client URLs) published "no data" while they waited: that is not a loss, and the
    /// first member must not force a new cluster.
    #[test]
    fn never_started_voters_are_not_lost() {
        let mut voters = vec![
            voter(1, present(1), Some(1)),
            voter(2, Some(DataState::Empty), None),
            voter(3, Some(DataState::Empty), None),
        ];
        voters[1].member.client_urls.clear();
        voters[2].member.client_urls.clear();
        assert!(matches!(
            decide_recovery(&voters, None, false),
            RecoveryDecision::Wait(_)
        ));
    }

    #[test]
    fn a_leader_anywhere_means_no_recovery() {
        let mut voters = vec![
            voter(1, Some(DataState::Empty), None),
            voter(2, present(50), Some(50)),
            voter(3, Some(DataState::Empty), None),
        ];
        voters[1].answer.as_mut().unwrap().leader_id = 2;
        assert_eq!(
            decide_recovery(&voters, None, true),
            RecoveryDecision::NotNeeded
        );
    }

    /// Found by the fault suite (seed 2026112502): a recovery dropped member 1, and later every
    /// member lost its data and member 1 restored from the bucket, getting the same member and
    /// cluster IDs again. The old record must not drop the restored data; a new one must.
    #[test]
    fn a_record_older_than_the_restored_data_does_not_drop_it() {
        let record = |revision| RecoveryRecord {
            member: "m-2".into(),
            member_id: 2,
            cluster_id: 0xc1,
            revision,
            dropped: vec![1, 3],
            request: None,
        };
        let lease = |r: &RecoveryRecord| MemberLease {
            name: "m-2".into(),
            annotations: [(
                RECOVERY_ANNOTATION.to_string(),
                serde_json::to_string(r).unwrap(),
            )]
            .into(),
            ..MemberLease::default()
        };
        let old = record(6728);
        let leases = [lease(&old)];
        assert!(RecoveryRecord::dropped_by_any(&leases, 0xc1, 1, &[]));
        let superseded = RecoveryRecord::all(&leases);
        assert!(!RecoveryRecord::dropped_by_any(
            &leases,
            0xc1,
            1,
            &superseded
        ));
        let newer = [lease(&record(9000))];
        assert!(RecoveryRecord::dropped_by_any(&newer, 0xc1, 1, &superseded));
        assert!(!RecoveryRecord::dropped_by_any(&leases, 0xc1, 2, &[]));
    }

    /// Found by the fault suite: right after restarts every member answered without a leader
    /// yet, and the agents said "quorum lost: 3 of 3 voting members answer … waiting for  to
    /// come back". A majority answering is an election, not a quorum loss.
    #[test]
    fn a_majority_answering_without_a_leader_is_an_election_not_a_quorum_loss() {
        let voters = [
            voter(1, present(50), Some(50)),
            voter(2, present(50), Some(50)),
            voter(3, Some(DataState::Empty), None),
        ];
        assert_eq!(
            decide_recovery(&voters, None, false),
            RecoveryDecision::NotNeeded
        );
    }

    fn evidence<'a>(
        me: &'a str,
        leases: &'a [MemberLease],
        voters: Option<Voters>,
        bucket: BucketSeen,
    ) -> QuorumEvidence<'a> {
        QuorumEvidence {
            me,
            member_id: 2,
            cluster_id: 0xc1,
            superseded: &[],
            leases,
            voters,
            request: None,
            bucket,
        }
    }

    fn wiped_but_m2() -> Option<Voters> {
        Some(Voters {
            cluster_id: 0xc1,
            reports: vec![
                voter(1, Some(DataState::Empty), None),
                voter(2, present(50), Some(50)),
                voter(3, Some(DataState::Empty), None),
            ],
        })
    }

    /// The record of a recovery by `member` (`member_id`) of cluster `cluster_id`.
    fn record_of(
        member: &str,
        member_id: u64,
        cluster_id: u64,
        revision: i64,
        dropped: &[u64],
        request: Option<&str>,
    ) -> RecoveryRecord {
        RecoveryRecord {
            member: member.into(),
            member_id,
            cluster_id,
            revision,
            dropped: dropped.to_vec(),
            request: request.map(str::to_string),
        }
    }

    fn lease_with(record: &RecoveryRecord) -> MemberLease {
        let mut lease = MemberLease {
            name: "m-1".into(),
            ..Default::default()
        };
        lease.annotations.insert(
            RECOVERY_ANNOTATION.into(),
            serde_json::to_string(record).unwrap(),
        );
        lease
    }

    #[test]
    fn the_chosen_member_reads_the_bucket_before_it_recovers_and_the_others_wait_for_it() {
        let read = quorum_action(&evidence("m-2", &[], wiped_but_m2(), BucketSeen::NotRead));
        assert_eq!(read, QuorumAction::ReadBucket);
        let record = record_of("m-2", 2, 0xc1, 50, &[1, 3], None);
        let unreadable = evidence("m-2", &[], wiped_but_m2(), BucketSeen::Read(None));
        assert_eq!(
            quorum_action(&unreadable),
            QuorumAction::ForceNewCluster(record.clone())
        );
        let newer = BucketHead {
            revision: 60,
            cluster_id: Some(0xc1),
        };
        let from_bucket = evidence("m-2", &[], wiped_but_m2(), BucketSeen::Read(Some(newer)));
        assert_eq!(
            quorum_action(&from_bucket),
            QuorumAction::RestoreFromBucket(RecoveryRecord {
                revision: 60,
                ..record
            })
        );
        let other = evidence("m-1", &[], wiped_but_m2(), BucketSeen::NotRead);
        assert_eq!(
            quorum_action(&other),
            QuorumAction::OtherRecovers("m-2".into())
        );
    }

    #[test]
    fn a_dropped_member_learns_it_from_the_record_whatever_its_etcd_says() {
        let record = record_of("m-1", 1, 0xc1, 50, &[2, 3], None);
        let leases = [lease_with(&record)];
        let healthy = evidence("m-2", &leases, None, BucketSeen::NotRead);
        assert_eq!(quorum_action(&healthy), QuorumAction::Dropped);
        let superseded = [record];
        let restored = QuorumEvidence {
            superseded: &superseded,
            ..healthy
        };
        assert_eq!(quorum_action(&restored), QuorumAction::None);
    }

    #[test]
    fn a_served_request_no_longer_forces_a_recovery() {
        let voters = Some(Voters {
            cluster_id: 0xc1,
            reports: vec![
                voter(1, present(50), None),
                voter(2, present(50), Some(50)),
                voter(3, present(49), None),
            ],
        });
        let mut asked = evidence("m-2", &[], voters, BucketSeen::Read(None));
        asked.request = Some("r1");
        assert!(matches!(
            quorum_action(&asked),
            QuorumAction::ForceNewCluster(RecoveryRecord { request: Some(r), .. }) if r == "r1"
        ));
        let served = record_of("m-2", 2, 0xc0, 40, &[], Some("r1"));
        let leases = [lease_with(&served)];
        asked.leases = &leases;
        assert!(matches!(quorum_action(&asked), QuorumAction::Wait(_)));
    }

    #[test]
    fn only_a_list_of_its_own_cluster_says_a_member_is_gone() {
        let list = |cluster_id, ids: &[u64]| MemberList {
            cluster_id,
            members: ids.iter().map(|&id| voter(id, None, None).member).collect(),
        };
        assert_eq!(
            why_gone(&list(0xc1, &[1, 2]), 2, 0xc1, &[], &[]),
            Gone::Exited
        );
        assert_eq!(
            why_gone(&list(0xf0, &[1]), 2, 0xc1, &[], &[]),
            Gone::Exited,
            "a fork"
        );
        assert_eq!(why_gone(&list(0xc1, &[]), 2, 0xc1, &[], &[]), Gone::Exited);
        assert_eq!(
            why_gone(&list(0xc1, &[1]), 2, 0xc1, &[], &[]),
            Gone::Removed
        );
        let record = record_of("m-1", 1, 0xc1, 50, &[2], None);
        let leases = [lease_with(&record)];
        assert_eq!(
            why_gone(&list(0xc1, &[1]), 2, 0xc1, &leases, &[]),
            Gone::Dropped
        );
        assert_eq!(
            why_gone(&list(0xc1, &[1]), 2, 0xc1, &leases, &[record]),
            Gone::Removed,
            "a record from before a restore speaks of data it no longer holds"
        );
    }
}
