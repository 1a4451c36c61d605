//! Quorum-loss recovery as one member's agent takes part in it, while its etcd runs without a
//! leader: gather the evidence (etcd's member list from this member, every voter's answer, the
//! data states on the leases), let core decide, and act when this member is the one chosen. A
//! member that a recovery dropped finds out here too, from the recovering member's record.

use crate::executor::Executor;
use crate::facts;
use crate::state::SharedState;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::membership::MemberList;
use quorate_core::membership::data_state::DataState;
use quorate_core::membership::recovery::{
    BucketHead, RecoveryDecision, RecoveryRecord, VoterReport, decide_recovery,
};
use quorate_etcd::MemberClient;

/// What this member must do about quorum.
#[derive(Debug)]
pub enum QuorumAction {
    /// Nothing (a leader exists, or evidence is missing: the state says what).
    None,
    /// Restart etcd alone with `--force-new-cluster`: this member recovers the cluster.
    ForceNewCluster(RecoveryRecord),
    /// Move the data aside and restore the bucket's newer state: this member recovers.
    RestoreFromBucket(RecoveryRecord),
    /// A recovery dropped this member: move its data aside and rejoin as a learner.
    Dropped,
}

/// Whether a recovery dropped this (running, healthy) member: it then serves a membership the
/// cluster left behind, and must stop and rejoin.
pub async fn dropped<C: Coordination>(coord: &C, state: &SharedState) -> QuorumAction {
    let s = state.get();
    let (Some(my_id), Some(cluster_id)) = (s.member_id, s.cluster_id) else {
        return QuorumAction::None;
    };
    match coord.member_leases().await {
        Ok(leases)
            if RecoveryRecord::dropped_by_any(
                &leases,
                cluster_id,
                my_id,
                &s.superseded_recoveries,
            ) =>
        {
            QuorumAction::Dropped
        }
        _ => QuorumAction::None,
    }
}

/// Looks at quorum from member `me`, whose etcd (`mine`) answers without a leader.
pub async fn check<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    mine: &MemberClient,
    state: &SharedState,
) -> QuorumAction {
    let Ok(leases) = coord.member_leases().await else {
        return QuorumAction::None;
    };
    let s = state.get();
    let (Some(my_id), Some(cluster_id)) = (s.member_id, s.cluster_id) else {
        return QuorumAction::None;
    };
    if RecoveryRecord::dropped_by_any(&leases, cluster_id, my_id, &s.superseded_recoveries) {
        return QuorumAction::Dropped;
    }
    let Ok(list) = mine.member_list_of_cluster().await else {
        return QuorumAction::None;
    };
    let voters = MemberList {
        cluster_id: list.cluster_id,
        members: list.members.into_iter().filter(|m| !m.is_learner).collect(),
    };
    let executor = Executor::new(cluster, me);
    let reports: Vec<VoterReport> = executor
        .answers(&voters)
        .await
        .into_iter()
        .map(|(member, answer)| {
            let data = cluster
                .members
                .iter()
                .find(|d| d.name == member.name)
                .and_then(|d| leases.iter().find(|l| l.name == d.lease_name))
                .and_then(DataState::of_lease);
            VoterReport {
                member,
                data,
                answer: answer.filter(|a| a.cluster_id == list.cluster_id),
            }
        })
        .collect();
    let request = cluster
        .recovery_request
        .clone()
        .filter(|r| !RecoveryRecord::served(&leases, r));
    let mut decision = decide_recovery(&reports, None, request.is_some());
    // Only the member that would recover reads the bucket: the bucket wins when it holds a newer
    // state of the same history.
    if matches!(&decision, RecoveryDecision::ForceNewCluster { member, .. } if member == me)
        && let Some(head) = bucket_head(cluster).await
    {
        decision = decide_recovery(&reports, Some(head), request.is_some());
    }
    let record = |member_id: u64, revision: i64, dropped: Vec<u64>| RecoveryRecord {
        member: me.to_string(),
        member_id,
        cluster_id: list.cluster_id,
        revision,
        dropped,
        request: request.clone(),
    };
    match decision {
        RecoveryDecision::NotNeeded => QuorumAction::None,
        RecoveryDecision::Wait(reason) => {
            if s.message != reason {
                tracing::warn!(member = %me, %reason, "quorum lost");
            }
            state.update(|s| {
                s.message = reason;
                s.message_is_quorum_wait = true;
            });
            QuorumAction::None
        }
        RecoveryDecision::ForceNewCluster {
            member,
            member_id,
            revision,
            dropped,
        } if member == me => QuorumAction::ForceNewCluster(record(member_id, revision, dropped)),
        RecoveryDecision::RestoreFromBucket {
            member,
            revision,
            dropped,
        } if member == me => QuorumAction::RestoreFromBucket(record(my_id, revision, dropped)),
        RecoveryDecision::ForceNewCluster { member, .. }
        | RecoveryDecision::RestoreFromBucket { member, .. } => {
            state.update(|s| {
                s.message =
                    format!("quorum lost; {member} recovers the cluster, then this member rejoins")
            });
            QuorumAction::None
        }
    }
}

/// The bucket's newest revision and the history it holds, when backups are configured and the
/// bucket can be read.
async fn bucket_head(cluster: &ClusterConfig) -> Option<BucketHead> {
    let store = crate::restore::open_store(cluster.backup.as_ref()?).ok()?;
    let revision = store
        .list()
        .await
        .ok()?
        .iter()
        .map(|s| s.name.last_revision)
        .max()?;
    let chain = crate::restore::chain_record(&store).await.ok()?;
    Some(BucketHead {
        revision,
        cluster_id: chain.map(|c| c.cluster_id),
    })
}

/// Keeps the record of the recovery this member is about to carry out, on disk and on its
/// lease, before it acts: members it drops need it to rejoin.
pub async fn record<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    data_dir: &std::path::Path,
    state: &SharedState,
    record: &RecoveryRecord,
) -> bool {
    if let Err(e) = facts::store_recovery(data_dir, record) {
        tracing::warn!(member = %me, error = %e, "cannot keep the recovery record; not recovering");
        return false;
    }
    state.update(|s| s.recovery = Some(record.clone()));
    tracing::warn!(
        member = %me,
        revision = record.revision,
        dropped = ?record.dropped.iter().map(|id| format!("{id:x}")).collect::<Vec<_>>(),
        request = ?record.request,
        "recovering from quorum loss: this member becomes a one-member cluster with its data; the others rejoin as learners"
    );
    crate::publish::publish(coord, cluster, me, state, false).await
}
