//! How this member's etcd starts: gather the evidence (own data directory, the other members'
//! published data states, etcd's member list, the bucket), let core's start decision choose,
//! and carry the choice out (through the membership executor for membership changes).
//!
//! Anything that is about to create data (bootstrap, join, restore) is published on the lease
//! first, so no other member can ever read "no data" for a member that has some.

use crate::executor::Executor;
use crate::facts;
use crate::state::SharedState;
use crate::wait::Wait;
use crate::{AgentOptions, publish};
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::HolderIdentity;
use quorate_core::member_etcd_config::StartMode;
use quorate_core::membership::data_state::{DataState, PeerData};
use quorate_core::membership::join::{JoinDecision, may_join};
use quorate_core::membership::planner::Step;
use quorate_core::membership::recovery::RecoveryRecord;
use quorate_core::membership::start::{
    StartDecision, StartEvidence, decide_start, join_initial_cluster, removed_member_data,
};
use quorate_etcd::data_dir::{self, DataDirState};

/// Why the member does not start now.
#[derive(Debug)]
pub enum NotYet {
    /// Wait and try again.
    Wait(Wait),
    /// A restore from the bucket failed: try again with a growing pause, not in a storm.
    RestoreFailed(Wait),
}

impl From<Wait> for NotYet {
    fn from(w: Wait) -> Self {
        NotYet::Wait(w)
    }
}

/// This member's own data state, from its data directory (moving unusable data aside).
pub fn own_data_state(opts: &AgentOptions) -> DataState {
    match data_dir::inspect(&opts.data_dir) {
        DataDirState::Valid => facts::load(&opts.data_dir),
        DataDirState::Empty => DataState::Empty,
        DataDirState::Unreadable(reason) => DataState::Unknown { reason },
        DataDirState::Invalid(why) => {
            match data_dir::move_aside(&opts.data_dir, crate::clock::now().as_second()) {
                Ok(aside) => {
                    tracing::warn!(member = %opts.member, %why, aside = %aside.display(), "unusable data directory moved aside");
                    DataState::Empty
                }
                Err(e) => DataState::Unknown {
                    reason: format!("{why}; moving it aside failed: {e}"),
                },
            }
        }
    }
}

/// Works out how etcd starts and performs what the start needs (adding this member as a
/// learner, removing its stale entry, restoring from the bucket).
pub async fn prepare_start<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
) -> Result<StartMode, NotYet> {
    let me = &opts.member;
    data_dir::check_guard(&opts.data_dir, &cluster.cluster_token)
        .map_err(|e| Wait::new(e.to_string()))?;
    let validating = std::time::Instant::now();
    let mut own = own_data_state(opts);
    state.metrics().validated(
        validating.elapsed(),
        !matches!(own, DataState::Unknown { .. }),
    );
    let leases = coord
        .member_leases()
        .await
        .map_err(|e| Wait::new(format!("reading the member leases: {e}")))?;
    if let DataState::Present {
        cluster_id: Some(cluster_id),
        member_id: Some(member_id),
        ..
    } = own
        && RecoveryRecord::dropped_by_any(
            &leases,
            cluster_id,
            member_id,
            &state.get().superseded_recoveries,
        )
        && state.get().recovery.is_none()
    {
        // A recovery dropped this member while it was away: its data belongs to a membership
        // the cluster left. Kept aside, never deleted; the member rejoins as a learner.
        let aside =
            data_dir::move_aside(&opts.data_dir, crate::clock::now().as_second()).map_err(|e| {
                Wait::new(format!(
                    "a recovery dropped {me}; moving its data aside failed: {e}"
                ))
            })?;
        tracing::warn!(member = %me, aside = %aside.display(), "a quorum-loss recovery dropped this member; its data was moved aside and it rejoins as a learner");
        own = DataState::Empty;
    }
    if let DataState::Present { .. } = own
        && let Some(list) = Executor::new(cluster, me).leader_member_list().await
        && let Some(id) = removed_member_data(&own, &list)
    {
        // etcd removed this member (a scale-in) and its peers would refuse it. A member that
        // is still desired (scaled out again) rejoins as a learner; its old data is kept aside.
        if cluster.is_leaving(me) || cluster.member(me).is_none() {
            return Err(Wait::new(format!(
                "{me} was removed from the cluster (member {id:x}); its data is not started again"
            ))
            .into());
        }
        let aside =
            data_dir::move_aside(&opts.data_dir, crate::clock::now().as_second()).map_err(|e| {
                Wait::new(format!(
                    "{me} was removed from the cluster (member {id:x}); moving its data aside failed: {e}"
                ))
            })?;
        tracing::warn!(member = %me, id = %format!("{id:x}"), aside = %aside.display(), "this data belongs to a member the cluster removed; moved aside, rejoining as a learner");
        own = DataState::Empty;
    }
    state.update(|s| s.data_state = Some(own.clone()));
    if let DataState::Present { .. } = own {
        return Ok(StartMode::Restart);
    }
    let peers = PeerData::from_leases(cluster, me, &leases);
    let cluster_existed = leases
        .iter()
        .filter_map(|l| l.holder_identity.as_deref())
        .filter_map(|h| h.parse::<HolderIdentity>().ok())
        .any(|h| h.cluster_id.is_some())
        || peers.iter().any(|p| {
            // Only data etcd ran on: a member about to bootstrap publishes `present` without a
            // cluster ID first, and that must not make its fellow bootstrap members wait.
            matches!(
                p.state,
                Some(DataState::Present {
                    cluster_id: Some(_),
                    ..
                })
            )
        });
    let executor = Executor::new(cluster, me).with_metrics(state.metrics());
    let listed = executor.peers_member_list().await;
    let backups = if listed.is_none() {
        crate::restore::backups_in_store(cluster).await
    } else {
        quorate_core::membership::start::Backups::NotConfigured
    };
    let evidence = StartEvidence {
        own,
        member_list: listed.as_ref().map(|l| l.members.clone()),
        cluster_existed,
        backups,
        peers,
        recovery_requested: cluster.recovery_request.is_some(),
    };
    match decide_start(cluster, me, &evidence) {
        StartDecision::Start(mode) => {
            about_to_have_data(coord, cluster, me, state).await?;
            Ok(mode)
        }
        StartDecision::Wait(reason) => Err(Wait::new(reason).into()),
        StartDecision::RestoreFromBackup => {
            about_to_have_data(coord, cluster, me, state).await?;
            crate::restore::restore_member(cluster, opts, state, RecoveryRecord::all(&leases))
                .await
                .map_err(|e| NotYet::RestoreFailed(Wait::new(e.to_string())))?;
            Ok(StartMode::Restart)
        }
        StartDecision::AddSelfAsLearner => {
            let list = listed.unwrap_or_default();
            let observed = executor.observe(&list).await;
            let peer_urls = match may_join(&observed, &executor.desired(), me) {
                JoinDecision::AddSelfAsLearner { peer_urls } => peer_urls,
                JoinDecision::Wait { step } => {
                    return Err(
                        Wait::new(format!("not {me}'s turn to join yet; first: {step}")).into(),
                    );
                }
                other => {
                    return Err(Wait::new(format!(
                        "{me} cannot add itself as a learner now ({other:?})"
                    ))
                    .into());
                }
            };
            about_to_have_data(coord, cluster, me, state).await?;
            // A data directory left half-initialised by an earlier attempt would make etcd
            // refuse to join; it holds nothing of value because the member never ran.
            let _ = std::fs::remove_dir_all(&opts.data_dir);
            let members = executor
                .apply(&Step::AddLearner {
                    name: me.clone(),
                    peer_urls,
                })
                .await?;
            tracing::info!(member = %me, "added as a learner");
            Ok(StartMode::Join {
                initial_cluster: join_initial_cluster(cluster, &members),
            })
        }
        StartDecision::ReplaceSelf { id } => {
            executor.remove_stale_self(id).await?;
            tracing::warn!(member = %me, id = %format!("{id:x}"), "removed stale member entry; will rejoin as a learner");
            Err(Wait::new(format!(
                "removed stale member entry {id:x}; rejoining as a learner"
            ))
            .into())
        }
    }
}

/// Publishes that this member is about to have data (before etcd or a restore creates any);
/// waits if that cannot be published.
async fn about_to_have_data<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    state: &SharedState,
) -> Result<(), Wait> {
    state.update(|s| {
        s.data_state = Some(DataState::Present {
            cluster_id: None,
            member_id: None,
            revision: None,
        })
    });
    if publish::publish(coord, cluster, me, state, false).await {
        Ok(())
    } else {
        Err(Wait::new(
            "cannot publish this member's data state on its lease; nothing is started until the \
             other members can know it has data",
        ))
    }
}
