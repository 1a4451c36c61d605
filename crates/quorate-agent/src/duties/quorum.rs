//! The quorum duty: quorum-loss recovery as one member's agent takes part in it. While its etcd
//! runs without a leader it gathers the evidence (etcd's member list from this member, every
//! voter's answer, the data states on the leases), asks core `quorum_action`, and acts when
//! this member is the one chosen. A member that a recovery dropped finds out here too, from the
//! recovering member's record (with a leader, that is all it looks at).

use super::{Ending, Seen};
use crate::executor::Executor;
use crate::facts;
use crate::state::SharedState;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::member_etcd_config::StartMode;
use quorate_core::membership::MemberList;
use quorate_core::membership::recovery::{
    BucketHead, BucketSeen, QuorumAction, QuorumEvidence, RecoveryRecord, Voters, quorum_action,
};
use quorate_etcd::MemberClient;
use std::path::Path;

/// One look at quorum from member `me` (its etcd: `mine`; `running`: the configuration it runs
/// with, used when the newest cannot be read). Returns how the run of etcd ends when this member
/// recovers the cluster or a recovery dropped it.
pub async fn run<C: Coordination>(
    seen: &Seen<'_, C>,
    running: &ClusterConfig,
    me: &str,
    data_dir: &Path,
    mine: &MemberClient,
    state: &SharedState,
) -> Option<Ending> {
    let s = state.get();
    let (Some(member_id), Some(cluster_id)) = (s.member_id, s.cluster_id) else {
        return None;
    };
    let leases = seen.leases().await?;
    let latest = seen.latest().await.unwrap_or(running);
    // With a leader only a recovery's record matters; without one, every voter is looked at.
    let voters = if s.healthy {
        None
    } else {
        voters(latest, me, mine, leases).await
    };
    let mut evidence = QuorumEvidence {
        me,
        member_id,
        cluster_id,
        superseded: &s.superseded_recoveries,
        leases,
        voters,
        request: latest.recovery_request.as_deref(),
        bucket: BucketSeen::NotRead,
    };
    let mut action = quorum_action(&evidence);
    if action == QuorumAction::ReadBucket {
        // Only the member that would recover reads the bucket.
        evidence.bucket = BucketSeen::Read(bucket_head(latest).await);
        action = quorum_action(&evidence);
    }
    match action {
        QuorumAction::None | QuorumAction::ReadBucket => None,
        QuorumAction::Wait(reason) => {
            if s.message != reason {
                tracing::warn!(member = %me, %reason, "quorum lost");
            }
            state.update(|s| {
                s.message = reason;
                s.message_is_quorum_wait = true;
            });
            None
        }
        QuorumAction::OtherRecovers(member) => {
            state.update(|s| {
                s.message =
                    format!("quorum lost; {member} recovers the cluster, then this member rejoins")
            });
            None
        }
        QuorumAction::Dropped => Some(Ending::Dropped),
        QuorumAction::ForceNewCluster(rec) => record(seen.coord(), latest, me, data_dir, state, &rec)
            .await
            .then_some(Ending::Recover(StartMode::ForceNewCluster)),
        QuorumAction::RestoreFromBucket(rec) => {
            record(seen.coord(), latest, me, data_dir, state, &rec)
                .await
                .then(|| {
                    Ending::BehindBackup(format!(
                        "quorum-loss recovery: the bucket holds a newer state (revision {}) of this cluster's history",
                        rec.revision
                    ))
                })
        }
    }
}

/// The voting members this member's etcd lists, with their answers and published data states;
/// `None` when its etcd cannot list them.
async fn voters(
    cluster: &ClusterConfig,
    me: &str,
    mine: &MemberClient,
    leases: &[quorate_core::lease::MemberLease],
) -> Option<Voters> {
    let list = mine.member_list_of_cluster().await.ok()?;
    let voting = MemberList {
        cluster_id: list.cluster_id,
        members: list.members.into_iter().filter(|m| !m.is_learner).collect(),
    };
    let answers = Executor::new(cluster, me).answers(&voting).await;
    Some(Voters::new(cluster, leases, voting.cluster_id, answers))
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
async fn record<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    data_dir: &Path,
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
