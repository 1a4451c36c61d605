//! How this member's etcd starts, in three steps: [`observe`] gathers the evidence once (own
//! data directory, the leases, etcd's member lists, the bucket), core's one start decision
//! ([`decide`]) chooses a [`StartAction`], and [`act`] carries it out (through the membership
//! executor for membership changes). Nothing here decides: a new start rule goes into
//! `quorate_core::membership::start_action`, with its unit test.
//!
//! Anything that is about to create data (bootstrap, join, restore) is published on the lease
//! first, so no other member can ever read "no data" for a member that has some.

use crate::executor::Executor;
use crate::facts;
use crate::options::AgentOptions;
use crate::publish;
use crate::state::SharedState;
use crate::wait::Wait;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::member_etcd_config::StartMode;
use quorate_core::membership::data_state::{DataState, PeerData};
use quorate_core::membership::planner::Step;
use quorate_core::membership::recovery::RecoveryRecord;
use quorate_core::membership::start::{Backups, StartEvidence, join_initial_cluster};
use quorate_core::membership::start_action::{
    AfterAside, LoneData, StartAction, StartObservation, cluster_existed, compares_with_bucket,
    decide,
};
use quorate_etcd::data_dir::{self, DataDirState};
use std::path::PathBuf;

/// Gathering the start evidence took long enough to say so at info level.
const SLOW_START_EVIDENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// Why the member does not start now.
#[derive(Debug)]
pub enum NotYet {
    /// Wait and try again.
    Wait(Wait),
    /// A restore from the bucket failed: try again with a growing pause, not in a storm.
    RestoreFailed(Wait),
    /// The data could not be compared with the bucket, or not moved aside to be replaced: try
    /// again at the configuration pace, as every comparison starts etcd.
    CheckLater(Wait),
    /// The data was moved aside to be replaced but the restore failed: decide again at once.
    DecideAgain,
}

impl From<Wait> for NotYet {
    fn from(w: Wait) -> Self {
        NotYet::Wait(w)
    }
}

/// Works out how etcd starts and performs what the start needs (moving unusable data aside,
/// adding this member as a learner, removing its stale entry, restoring from the bucket).
pub async fn prepare_start<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
) -> Result<StartMode, NotYet> {
    // Data moved aside is looked at again once: the directory is empty then.
    for _ in 0..2 {
        let seen = observe(coord, cluster, opts, state).await?;
        let action = decide(cluster, &opts.member, &seen);
        if let Some(mode) = act(coord, cluster, opts, state, &seen, action).await? {
            return Ok(mode);
        }
    }
    Err(Wait::new(format!(
        "{} holds data again right after it was moved aside; looking again",
        opts.data_dir.display()
    ))
    .into())
}

/// Gathers everything the start decision needs, each part read once; the member lists and the
/// bucket only where they can matter (see [`StartObservation`]).
async fn observe<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
) -> Result<StartObservation, NotYet> {
    let me = &opts.member;
    data_dir::check_guard(&opts.data_dir, &cluster.cluster_token)
        .map_err(|e| Wait::new(e.to_string()))?;
    let validating = std::time::Instant::now();
    let (own, unusable) = match data_dir::inspect(&opts.data_dir) {
        DataDirState::Valid => (facts::load(&opts.data_dir), None),
        DataDirState::Empty => (DataState::Empty, None),
        DataDirState::Unreadable(reason) => (DataState::Unknown { reason }, None),
        DataDirState::Invalid(why) => (
            DataState::Unknown {
                reason: why.clone(),
            },
            Some(why),
        ),
    };
    state.metrics().validated(
        validating.elapsed(),
        !matches!(own, DataState::Unknown { .. }) || unusable.is_some(),
    );
    let started = std::time::Instant::now();
    let leases = coord
        .member_leases()
        .await
        .map_err(|e| Wait::new(format!("reading the member leases: {e}")))?;
    let leases_read = started.elapsed();
    let mut peers_asked = None;
    let peers = PeerData::from_leases(cluster, me, &leases);
    let executor = Executor::new(cluster, me);
    let mut seen = StartObservation {
        evidence: StartEvidence {
            own,
            member_list: None,
            cluster_existed: cluster_existed(&leases, &peers),
            backups: Backups::NotConfigured,
            peers,
            recovery_requested: cluster.recovery_request.is_some(),
        },
        unusable,
        leases,
        superseded: state.get().superseded_recoveries,
        recovering: state.get().recovery.is_some(),
        leader_list: None,
        observed: Vec::new(),
        lone: LoneData::NotCompared,
    };
    if let DataState::Present {
        cluster_id,
        member_id,
        ..
    } = &seen.evidence.own
    {
        if cluster_id.is_some() && member_id.is_some() {
            seen.leader_list = executor.leader_member_list().await;
        }
        if compares_with_bucket(cluster) {
            seen.lone = lone_data(cluster, opts).await;
        }
    } else {
        let asked = std::time::Instant::now();
        let starting: Vec<&str> = seen
            .evidence
            .peers
            .iter()
            .filter(|p| p.is_starting())
            .map(|p| p.name.as_str())
            .collect();
        let list = executor.peers_member_list_except(&starting).await;
        peers_asked = Some(asked.elapsed());
        match list {
            Some(list) => {
                seen.observed = executor.observe(&list).await;
                seen.evidence.member_list = Some(list.members);
            }
            None => seen.evidence.backups = crate::restore::backups_in_store(cluster).await,
        }
    }
    // What the start waited on: at info for a start slow to begin, else at debug (an agent
    // waiting for its turn to join gathers it five times a second).
    let total = started.elapsed();
    let (leases_ms, peers_ms, total_ms) = (
        leases_read.as_millis(),
        peers_asked.map(|d| d.as_millis()),
        total.as_millis(),
    );
    if total >= SLOW_START_EVIDENCE {
        tracing::info!(member = %me, leases_ms, peers_ms, total_ms, "start evidence gathered");
    } else {
        tracing::debug!(member = %me, leases_ms, peers_ms, total_ms, "start evidence gathered");
    }
    Ok(seen)
}

/// A lone member's data, opened on a private port before any client can reach it, and the
/// bucket it is compared with.
async fn lone_data(cluster: &ClusterConfig, opts: &AgentOptions) -> LoneData {
    let (cluster_id, revision) = match crate::private_start::data_facts(cluster, opts).await {
        Ok(facts) => facts,
        Err(why) => return LoneData::Unopened(why.into()),
    };
    let backups = crate::restore::backups_in_store(cluster).await;
    let chain = match backups {
        Backups::Available { .. } => crate::restore::chain_cluster(cluster).await,
        _ => None,
    };
    LoneData::Opened {
        cluster_id,
        revision,
        backups,
        chain,
    }
}

/// Carries out the start decision: `Some(mode)` to start etcd in, `None` when the data was
/// moved aside and the start is decided again.
async fn act<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
    seen: &StartObservation,
    action: StartAction,
) -> Result<Option<StartMode>, NotYet> {
    let me = &opts.member;
    if !matches!(
        action,
        StartAction::MoveDataAside {
            then: AfterAside::DecideAgain,
            ..
        }
    ) {
        state.update(|s| s.data_state = Some(seen.evidence.own.clone()));
    }
    let executor = Executor::new(cluster, me).with_metrics(state.metrics());
    match action {
        StartAction::Start(StartMode::Restart) => Ok(Some(StartMode::Restart)),
        StartAction::Start(mode) => {
            about_to_have_data(coord, cluster, me, state).await?;
            Ok(Some(mode))
        }
        StartAction::Wait(reason) => Err(Wait::new(reason).into()),
        StartAction::CheckLater(reason) => Err(NotYet::CheckLater(Wait::new(reason))),
        StartAction::MoveDataAside {
            why,
            then: AfterAside::DecideAgain,
        } => {
            move_data_aside(opts, &why)?;
            Ok(None)
        }
        StartAction::MoveDataAside {
            why,
            then: AfterAside::RestoreFromBackup,
        } => replace_from_backup(
            cluster,
            opts,
            state,
            &why,
            RecoveryRecord::all(&seen.leases),
        )
        .await
        .map(Some),
        StartAction::RestoreFromBackup => {
            about_to_have_data(coord, cluster, me, state).await?;
            crate::restore::restore_member(cluster, opts, state, RecoveryRecord::all(&seen.leases))
                .await
                .map_err(|e| NotYet::RestoreFailed(Wait::new(e.to_string())))?;
            Ok(Some(StartMode::Restart))
        }
        StartAction::AddSelfAsLearner { peer_urls } => {
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
            Ok(Some(StartMode::Join {
                initial_cluster: join_initial_cluster(cluster, &members),
            }))
        }
        StartAction::ReplaceSelf { id } => {
            executor.remove_stale_self(id).await?;
            tracing::warn!(member = %me, id = %format!("{id:x}"), "removed stale member entry; will rejoin as a learner");
            Err(Wait::new(format!(
                "removed stale member entry {id:x}; rejoining as a learner"
            ))
            .into())
        }
    }
}

/// Replaces the data with the bucket's newest state (the old data moved aside, never deleted);
/// the decision was made on evidence already, so this restores without deciding again (the
/// others may be gone, and the start decision would wait for them). `superseded`: the recovery
/// records read before the restore (they cannot speak of the data it brings).
pub async fn replace_from_backup(
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
    why: &str,
    superseded: Vec<RecoveryRecord>,
) -> Result<StartMode, NotYet> {
    tracing::warn!(member = %opts.member, %why, "data is an older state of the backups' history; restoring");
    move_data_aside(opts, why).map_err(NotYet::CheckLater)?;
    match crate::restore::restore_member(cluster, opts, state, superseded).await {
        Ok(()) => Ok(StartMode::Restart),
        Err(e) => {
            tracing::warn!(member = %opts.member, error = %e, "restoring from the bucket failed; deciding again");
            Err(NotYet::DecideAgain)
        }
    }
}

/// The one place the agent moves this member's data directory aside (kept, never deleted), for
/// the reason `why`; a failure is a wait that says both.
pub fn move_data_aside(opts: &AgentOptions, why: &str) -> Result<PathBuf, Wait> {
    match data_dir::move_aside(&opts.data_dir, crate::clock::now().as_second()) {
        Ok(aside) => {
            tracing::warn!(member = %opts.member, %why, aside = %aside.display(), "data directory moved aside");
            Ok(aside)
        }
        Err(e) => Err(Wait::new(format!(
            "{why}; moving the data aside failed: {e}"
        ))),
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
