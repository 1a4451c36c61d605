//! The member loop: decide how to start (`start`), start etcd, keep it running with the current
//! configuration, promote it when it is a learner, renew its lease, take part in quorum-loss
//! recovery, and stop for good when the member has been removed from the cluster.

use crate::etcd_process::{EtcdProcess, SpawnError};
use crate::executor::{Executor, own_etcd};
use crate::options::AgentOptions;
use crate::recovery::QuorumAction;
use crate::start::{self, NotYet, prepare_start};
use crate::state::{Phase, SharedState};
use crate::wait::Wait;
use crate::{duties, facts, publish};
use quorate_coord::{CoordError, Coordination};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::member_etcd_config::{MemberEtcdConfig, StartMode, member_etcd_config};
use quorate_core::membership::MemberList;
use quorate_core::membership::data_state::DataState;
use quorate_core::membership::planner::{MemberRef, Step};
use quorate_core::membership::recovery::RecoveryRecord;
use quorate_core::membership::rollout::{RolloutPeer, handover_target, may_restart, rollout_key};
use quorate_core::upgrade::{downgrade_gate, members_behind, snapshot_gate, snapshot_request};
use quorate_etcd::MemberClient;
use quorate_etcd::binaries::MissingEtcd;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::watch;

/// How often a running member writes its TLS Secrets' files again, so a rotated certificate
/// reaches etcd.
const SECRET_REFRESH: Duration = Duration::from_secs(60);

/// Why the agent stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentExit {
    /// Asked to stop; etcd was stopped cleanly and its data kept.
    Shutdown,
    /// The member was removed from the cluster; restarting it would be wrong.
    Removed,
}

/// A failure the agent cannot wait out.
#[derive(Debug, Error)]
pub enum AgentError {
    /// etcd could not be started at all.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// Coordination state is unreadable.
    #[error(transparent)]
    Coord(#[from] CoordError),
    /// The etcd version the cluster runs is not installed here.
    #[error(transparent)]
    MissingEtcd(#[from] MissingEtcd),
}

/// How one run of etcd ended.
enum RunEnd {
    ConfigChanged,
    /// A single member whose data is an older state of the bucket's history: replace it.
    BehindBackup(String),
    Exited(String),
    Removed,
    /// A recovery dropped this member: its data belongs to the old membership.
    Dropped,
    /// This member recovers the cluster: start next in this mode, without deciding again.
    Recover(StartMode),
    Shutdown,
}

/// Runs the member until `shutdown` turns true or the member is removed.
pub async fn run_agent<C: Coordination>(
    coord: C,
    opts: AgentOptions,
    state: SharedState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<AgentExit, AgentError> {
    crate::clock::init(&opts.member);
    let mut failures: u32 = 0;
    let mut restore_failures: u32 = 0;
    let mut next_mode: Option<StartMode> = None;
    // Data found behind the bucket's history while etcd ran: why.
    let mut behind: Option<String> = None;
    state.update(|s| {
        s.recovery = facts::load_recovery(&opts.data_dir);
        s.superseded_recoveries = facts::load_superseded(&opts.data_dir);
    });
    loop {
        if *shutdown.borrow() {
            return Ok(AgentExit::Shutdown);
        }
        let cluster = match coord.cluster_config().await {
            Ok(c) => c,
            Err(CoordError::NoConfig { .. }) => {
                let reason = Wait::new("no cluster configuration yet");
                wait(&state, &opts, &mut shutdown, reason, opts.poll_interval).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if let Err(reason) = crate::secret_files::write_secret_files(&coord, &cluster).await {
            wait(&state, &opts, &mut shutdown, reason, opts.poll_interval).await;
            continue;
        }
        // etcd starts trusting what the CA files hold now; see `with_trust_digests`.
        let cluster = match crate::secret_files::with_trust_digests(cluster) {
            Ok(cluster) => cluster,
            Err(reason) => {
                wait(&state, &opts, &mut shutdown, reason, opts.poll_interval).await;
                continue;
            }
        };
        // The TLS files are in place: the listener may serve TLS (`spec.backup.tls`).
        state.update(|s| s.agent_tls = cluster.agent_tls.clone());
        crate::certificates::record(&state, &cluster);
        // A restore from an encrypted bucket needs the keys; without them it fails and says so.
        if let Err(reason) = crate::secret_files::write_backup_keys(&coord, &cluster).await {
            tracing::warn!(member = %opts.member, %reason, "backup encryption keys not written");
        }
        let started = match (next_mode.take(), behind.take()) {
            (Some(mode), _) => Ok(mode),
            (None, Some(why)) => {
                // Read before the restore: these records cannot speak of the data it brings.
                let superseded =
                    RecoveryRecord::all(&coord.member_leases().await.unwrap_or_default());
                start::replace_from_backup(&cluster, &opts, &state, &why, superseded).await
            }
            (None, None) => prepare_start(&coord, &cluster, &opts, &state).await,
        };
        let mode = match started {
            Ok(mode) => {
                restore_failures = 0;
                mode
            }
            Err(not_yet) => {
                let counted = &mut restore_failures;
                not_started(
                    &coord,
                    &cluster,
                    &opts,
                    &state,
                    &mut shutdown,
                    not_yet,
                    counted,
                )
                .await;
                continue;
            }
        };
        match run_etcd(&coord, &cluster, &opts, mode, &state, &mut shutdown).await? {
            RunEnd::Shutdown => return Ok(AgentExit::Shutdown),
            RunEnd::Removed => {
                state.update(|s| {
                    s.phase = Phase::Removed;
                    s.healthy = false;
                    s.message = "member was removed from the cluster".into();
                });
                return Ok(AgentExit::Removed);
            }
            RunEnd::ConfigChanged => failures = 0,
            RunEnd::Recover(mode) => next_mode = Some(mode),
            RunEnd::Dropped => {
                tracing::warn!(member = %opts.member, "a quorum-loss recovery dropped this member; moving its data aside and rejoining as a learner");
                if let Err(reason) = start::move_data_aside(&opts, "dropped by a recovery") {
                    wait(&state, &opts, &mut shutdown, reason, opts.poll_interval).await;
                }
            }
            // Replaced from the bucket next, before anything else is decided.
            RunEnd::BehindBackup(why) => behind = Some(why),
            RunEnd::Exited(why) => {
                failures += 1;
                let backoff = opts.poll_interval * failures.min(10);
                tracing::warn!(member = %opts.member, %why, ?backoff, "etcd exited; restarting");
                let reason = Wait::new(format!("etcd exited ({why}); restarting"));
                wait(&state, &opts, &mut shutdown, reason, backoff).await;
            }
        }
    }
}

/// Waits as `not_yet` asks when etcd does not start yet: a refusal briefly, a comparison with
/// the bucket at the configuration pace, a failed restore with a growing pause (counted in
/// `restore_failures`).
async fn not_started<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    state: &SharedState,
    shutdown: &mut watch::Receiver<bool>,
    not_yet: NotYet,
    restore_failures: &mut u32,
) {
    let (reason, how_long) = match not_yet {
        NotYet::DecideAgain => return,
        NotYet::Wait(reason) => (reason, opts.retry_interval),
        NotYet::CheckLater(reason) => (reason, opts.poll_interval),
        NotYet::RestoreFailed(reason) => {
            *restore_failures += 1;
            let backoff = (opts.poll_interval * 2u32.saturating_pow(*restore_failures))
                .min(Duration::from_secs(300));
            let reason = Wait::new(format!(
                "restoring from the bucket failed ({} attempt(s); next in {}s): {reason}",
                restore_failures,
                backoff.as_secs()
            ));
            tracing::warn!(member = %opts.member, %reason, "restore failed");
            (reason, backoff)
        }
    };
    wait_published(coord, cluster, state, opts, shutdown, reason, how_long).await;
}

/// Like [`wait`], and publishes the member's evidence on its lease when the reason is new.
async fn wait_published<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    state: &SharedState,
    opts: &AgentOptions,
    shutdown: &mut watch::Receiver<bool>,
    reason: Wait,
    how_long: Duration,
) {
    if note_wait(state, opts, reason) {
        publish::publish(coord, cluster, &opts.member, state, false).await;
    }
    let _ = tokio::time::timeout(how_long, shutdown.changed()).await;
}

/// Records why the member waits and sleeps for `how_long` (or until shutdown).
async fn wait(
    state: &SharedState,
    opts: &AgentOptions,
    shutdown: &mut watch::Receiver<bool>,
    reason: Wait,
    how_long: Duration,
) {
    note_wait(state, opts, reason);
    let _ = tokio::time::timeout(how_long, shutdown.changed()).await;
}

/// Records why the member waits, logging a reason that is new; true when it was.
fn note_wait(state: &SharedState, opts: &AgentOptions, reason: Wait) -> bool {
    let reason = String::from(reason);
    let s = state.get();
    let new = s.message != reason || s.phase != Phase::Waiting;
    if new {
        tracing::info!(member = %opts.member, %reason, "waiting");
    }
    state.update(|s| {
        s.phase = Phase::Waiting;
        s.healthy = false;
        s.message = reason;
    });
    new
}

async fn run_etcd<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    mode: StartMode,
    state: &SharedState,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<RunEnd, AgentError> {
    let me = &opts.member;
    let data_dir = opts.data_dir.display().to_string();
    let config = member_etcd_config(cluster, me, &data_dir, &mode)
        .expect("prepare_start only succeeds for desired members");
    let args = config.to_args();
    std::fs::create_dir_all(&opts.data_dir).map_err(|source| SpawnError::Log {
        path: opts.data_dir.display().to_string(),
        source,
    })?;
    state.update(|s| s.hibernation_request = cluster.hibernation_request.clone());
    let binary = opts.etcd_binaries.etcd(cluster.etcd_version)?;
    let mut process = EtcdProcess::spawn(&binary, &args, &opts.etcd_log)?;
    tracing::info!(member = %me, pid = ?process.pid(), ?mode, "etcd started");
    state.update(|s| {
        s.phase = Phase::Running;
        s.message = String::new();
        s.etcd_args = args.clone();
    });
    let (endpoint, tls) = own_etcd(cluster, me);
    let mut member_client: Option<MemberClient> = None;
    let heartbeat = Duration::from_millis(cluster.heartbeat_millis);
    let mut last_publish: Option<Instant> = None;
    // Whether the member list has this member's configured peer URL (checked once per run).
    let mut peer_urls_settled = false;
    let mut recorded_ids = None;
    let mut probe = tokio::time::interval(opts.retry_interval);
    let mut config_check = tokio::time::interval(opts.poll_interval);
    let mut quorum_check = tokio::time::interval(opts.poll_interval);
    let mut last_drop_check: Option<Instant> = None;
    let mut last_scale_in_check: Option<Instant> = None;
    let mut last_version_check: Option<Instant> = None;
    let mut secrets_written = Instant::now();
    if state.get().defrag == Default::default() {
        let leases = coord.member_leases().await.unwrap_or_default();
        let record = crate::defrag::record_of(&leases, cluster, me);
        state.update(|s| s.defrag = record);
    }
    // The newest configuration the config check read (maintenance settings change without a
    // restart, so the defragmentation check reads them from here).
    let mut newest = cluster.clone();
    let mut defragmenting: Option<crate::defrag::Running> = None;
    let mut last_defrag_check: Option<Instant> = None;
    let mut leading_since: Option<jiff::Timestamp> = None;
    loop {
        tokio::select! {
            outcome = async { defragmenting.as_mut().expect("guarded").await }, if defragmenting.is_some() => {
                defragmenting = None;
                crate::defrag::finished(me, state, outcome);
                publish::publish(coord, cluster, me, state, true).await;
            }
            status = process.wait() => {
                let why = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                state.update(|s| s.healthy = false);
                return Ok(removal(coord, cluster, me, state).await.unwrap_or(RunEnd::Exited(why)));
            }
            _ = shutdown.changed() => {
                let grace = Duration::from_secs(quorate_core::agent_exit::ETCD_STOP_SECONDS);
                process.stop(grace).await;
                tracing::info!(member = %me, "stopping: etcd stopped");
                state.update(|s| s.healthy = false);
                return Ok(RunEnd::Shutdown);
            }
            _ = config_check.tick() => {
                let latest = coord.cluster_config().await;
                if let Ok(latest) = &latest
                    && secrets_written.elapsed() >= SECRET_REFRESH
                {
                    secrets_written = Instant::now();
                    if let Err(reason) = crate::secret_files::write_secret_files(coord, latest).await {
                        tracing::warn!(member = %me, %reason, "refreshing the TLS files failed");
                    }
                    crate::certificates::record(state, latest);
                    if let Err(reason) = crate::secret_files::write_backup_keys(coord, latest).await {
                        tracing::warn!(member = %me, %reason, "refreshing the backup encryption keys failed");
                    }
                }
                // After the refresh, so a new CA bundle is seen as soon as it is written; a
                // bundle being written is looked at again next time.
                let latest = match latest.map(crate::secret_files::with_trust_digests) {
                    Ok(Ok(latest)) => Ok(latest),
                    Ok(Err(reason)) => {
                        tracing::debug!(member = %me, %reason, "configuration check skipped");
                        continue;
                    }
                    Err(e) => Err(e),
                };
                if let Ok(latest) = &latest {
                    newest = latest.clone();
                    let upgrade = upgrade_snapshot_request(coord, cluster, latest, state).await;
                    // With TLS configured the listener serves TLS or nothing, never plain: a
                    // changed TLS configuration has its files written at once.
                    if latest.agent_tls != state.get().agent_tls
                        && let Err(reason) =
                            crate::secret_files::write_secret_files(coord, latest).await
                    {
                        tracing::warn!(member = %me, %reason, "writing the agents' TLS files failed");
                    }
                    let agent_tls = latest.agent_tls.clone();
                    state.update(|s| {
                        s.agent_tls = agent_tls;
                        s.hibernation_request = latest.hibernation_request.clone();
                        s.upgrade_snapshot_request = upgrade;
                    });
                }
                let pending = latest
                    .as_ref()
                    .is_ok_and(|latest| restart_needed(&config, latest, me, &data_dir));
                if let Ok(latest) = &latest {
                    state.metrics().member().configuration(latest, me, pending);
                }
                if let Ok(latest) = latest
                    && pending
                    && let Some(client) = &member_client
                {
                    match restart_turn(coord, cluster, &latest, opts, client).await {
                        Ok(None) => {
                            tracing::info!(member = %me, "configuration changed; restarting etcd");
                            process.stop(Duration::from_secs(10)).await;
                            return Ok(RunEnd::ConfigChanged);
                        }
                        Ok(Some((to, id))) => hand_over(&latest, me, state, MemberRef { id, name: to }).await,
                        Err(reason) => state.update(|s| s.message = reason.into()),
                    }
                }
            }
            _ = quorum_check.tick(), if state.get().member_id.is_some() => {
                let Some(client) = &member_client else { continue };
                // With a leader, only whether a recovery dropped this member matters, and a
                // heartbeat is soon enough; without one, quorum is looked at every tick.
                let healthy = state.get().healthy;
                if healthy && last_drop_check.is_some_and(|t: Instant| t.elapsed() < heartbeat) {
                    continue;
                }
                last_drop_check = Some(Instant::now());
                let latest = coord.cluster_config().await.unwrap_or_else(|_| cluster.clone());
                let action = if healthy {
                    crate::recovery::dropped(coord, state).await
                } else {
                    crate::recovery::check(coord, &latest, me, client, state).await
                };
                match action {
                    QuorumAction::None => {}
                    QuorumAction::Dropped => {
                        process.stop(Duration::from_secs(10)).await;
                        return Ok(RunEnd::Dropped);
                    }
                    QuorumAction::ForceNewCluster(record) => {
                        if crate::recovery::record(coord, &latest, me, &opts.data_dir, state, &record).await {
                            process.stop(Duration::from_secs(10)).await;
                            return Ok(RunEnd::Recover(StartMode::ForceNewCluster));
                        }
                    }
                    QuorumAction::RestoreFromBucket(record) => {
                        if crate::recovery::record(coord, &latest, me, &opts.data_dir, state, &record).await {
                            process.stop(Duration::from_secs(10)).await;
                            return Ok(RunEnd::BehindBackup(format!(
                                "quorum-loss recovery: the bucket holds a newer state (revision {}) of this cluster's history",
                                record.revision
                            )));
                        }
                    }
                }
            }
            _ = probe.tick() => {
                if member_client.is_none() {
                    member_client = MemberClient::connect(&endpoint, tls.as_ref(), crate::executor::timeouts()).await.ok();
                }
                let Some(client) = &member_client else { continue };
                match client.status().await {
                    Ok(st) => {
                        // This tick's one observation, for every duty that needs more than `st`.
                        let tick = duties::Tick::observe(cluster, me, &st).await;
                        // Readiness asks for a linearizable read as a voter; a learner or a
                        // member without a leader is not asked (it cannot serve one).
                        let read = !st.is_learner
                            && st.leader_id != 0
                            && client.linearizable_read().await.is_ok();
                        if recorded_ids != Some((st.cluster_id, st.member_id)) {
                            facts::store(&opts.data_dir, st.cluster_id, st.member_id, st.revision);
                            crate::restore::continue_chain_after_restore(cluster, &opts.data_dir, st.cluster_id).await;
                            recorded_ids = Some((st.cluster_id, st.member_id));
                        }
                        state.update(|s| {
                            s.member_id = Some(st.member_id);
                            s.cluster_id = Some(st.cluster_id);
                            s.is_learner = st.is_learner;
                            s.is_leader = st.leader_id == st.member_id;
                            s.etcd_version = Some(st.version.clone());
                            s.healthy = st.leader_id != 0;
                            s.linearizable_read = read;
                            if s.healthy && s.message_is_quorum_wait {
                                s.message.clear();
                                s.message_is_quorum_wait = false;
                            }
                            s.data_state = Some(DataState::Present {
                                cluster_id: Some(st.cluster_id),
                                member_id: Some(st.member_id),
                                revision: Some(st.revision),
                            });
                        });
                        let leads = st.leader_id == st.member_id && st.leader_id != 0;
                        if !leads {
                            leading_since = None;
                        } else if leading_since.is_none() {
                            leading_since = Some(crate::clock::now());
                        }
                        if defragmenting.is_none()
                            && st.leader_id != 0
                            && !st.is_learner
                            && last_defrag_check.is_none_or(|t| t.elapsed() >= opts.poll_interval)
                        {
                            last_defrag_check = Some(Instant::now());
                            let (started, changed) = crate::defrag::check(coord, &newest, me, client, &st, state, leading_since).await;
                            defragmenting = started;
                            if changed {
                                publish::publish(coord, cluster, me, state, true).await;
                            }
                        }
                        if leads && last_scale_in_check.is_none_or(|t| t.elapsed() >= opts.poll_interval) {
                            last_scale_in_check = Some(Instant::now());
                            duties::scale_in::remove_leaving_members(coord, me, client, &tick, state).await;
                        } else if !leads {
                            state.update(|s| s.membership = None);
                        }
                        if last_version_check.is_none_or(|t| t.elapsed() >= opts.poll_interval) {
                            last_version_check = Some(Instant::now());
                            crate::etcd_version::check(&newest, me, &opts.data_dir, client, &st, state).await;
                        }
                        duties::promote::run(cluster, me, &tick, state).await;
                        if !st.is_learner && !peer_urls_settled && st.leader_id != 0 {
                            peer_urls_settled =
                                settle_peer_urls(client, cluster, me, st.member_id, state).await;
                        }
                        let due = last_publish.is_none_or(|t| t.elapsed() >= heartbeat);
                        if due && publish::publish(coord, cluster, me, state, st.leader_id != 0).await {
                            last_publish = Some(Instant::now());
                        }
                    }
                    Err(e) => {
                        tracing::debug!(member = %me, error = %e, "status probe failed");
                        state.update(|s| s.healthy = false);
                    }
                }
            }
        }
    }
}

/// Whether the running etcd must restart to pick up `latest`.
fn restart_needed(
    running: &MemberEtcdConfig,
    latest: &ClusterConfig,
    me: &str,
    data_dir: &str,
) -> bool {
    match member_etcd_config(latest, me, data_dir, &StartMode::Restart) {
        Ok(next) => next.runtime != running.runtime,
        Err(_) => false,
    }
}

/// Whether this member may restart now for a new configuration, from etcd's view of every
/// member: `Ok(None)` restart now; `Ok(Some(follower))` this member leads, so leadership moves
/// to that updated follower first; `Err` what it waits for.
async fn restart_turn<C: Coordination>(
    coord: &C,
    running: &ClusterConfig,
    latest: &ClusterConfig,
    opts: &AgentOptions,
    client: &MemberClient,
) -> Result<Option<(String, u64)>, Wait> {
    let me = opts.member.as_str();
    // A restart onto a version this machine lacks, or without the TLS files the new
    // configuration names, would only stop the member.
    opts.etcd_binaries
        .etcd(latest.etcd_version)
        .map_err(|missing| Wait::new(missing.to_string()))?;
    crate::secret_files::write_secret_files(coord, latest).await?;
    let list = client
        .member_list_of_cluster()
        .await
        .map_err(|e| Wait::new(format!("reading the member list: {e}")))?;
    let leases = coord.member_leases().await.unwrap_or_default();
    let executor = Executor::new(latest, me);
    let answers: Vec<(
        String,
        Option<quorate_core::membership::recovery::EtcdAnswer>,
    )> = executor
        .answers(&list)
        .await
        .into_iter()
        .map(|(m, a)| (m.name, a))
        .collect();
    snapshot_gate(running.etcd_version, latest, &leases).map_err(Wait::new)?;
    if latest.etcd_version < running.etcd_version {
        let status = client
            .status()
            .await
            .map_err(|e| Wait::new(format!("reading etcd's status: {e}")))?;
        let cluster = crate::etcd_version::cluster_version(latest, me).await;
        let evidence = crate::etcd_version::evidence(&status, cluster);
        downgrade_gate(running.etcd_version, latest.etcd_version, evidence).map_err(Wait::new)?;
    }
    let peers = RolloutPeer::from_leases(latest, &leases, &answers);
    let hash = rollout_key(latest);
    may_restart(me, &peers, &hash).map_err(Wait::new)?;
    Ok(handover_target(me, &peers, &hash))
}

/// Moves leadership from this member to `to` (an updated follower) before this member restarts
/// for a new configuration; the next configuration check restarts it once it no longer leads.
async fn hand_over(latest: &ClusterConfig, me: &str, state: &SharedState, to: MemberRef) {
    let from = MemberRef {
        id: state.get().member_id.unwrap_or(0),
        name: me.to_string(),
    };
    let name = to.name.clone();
    match Executor::new(latest, me)
        .apply(&Step::MoveLeader { from, to })
        .await
    {
        Ok(_) => {
            tracing::info!(member = %me, to = %name, "moved leadership to an updated member before restarting")
        }
        Err(wait) => state.update(|s| {
            s.message = format!(
                "moving leadership to {name} before restarting: {}",
                String::from(wait)
            )
        }),
    }
}

/// The full snapshot an etcd upgrade of `latest` waits for, while this member (running
/// `running`) or, seen from the leader, any member's lease is not on `latest`'s version yet.
async fn upgrade_snapshot_request<C: Coordination>(
    coord: &C,
    running: &ClusterConfig,
    latest: &ClusterConfig,
    state: &SharedState,
) -> Option<String> {
    latest.backup.as_ref()?;
    let behind = running.etcd_version != latest.etcd_version
        || (state.get().is_leader
            && !members_behind(latest, &coord.member_leases().await.unwrap_or_default())
                .is_empty());
    behind.then(|| snapshot_request(latest.etcd_version))
}

/// Makes the cluster know this member by the peer URL it is configured with, as etcd keeps a
/// member's peer URLs from when it joined: after peer TLS is turned on, etcd already listens
/// with https but its peers would still dial http. etcd-backup-restore does the same
/// (`updatePeerURLIfChanged`). Records the registered URLs; true once they are right.
async fn settle_peer_urls(
    client: &MemberClient,
    cluster: &ClusterConfig,
    me: &str,
    id: u64,
    state: &SharedState,
) -> bool {
    let Some(wanted) = cluster.member(me).map(|m| vec![m.peer_url.clone()]) else {
        return true;
    };
    let registered = match client.member_list().await {
        Ok(list) => list.into_iter().find(|m| m.id == id).map(|m| m.peer_urls),
        Err(e) => {
            tracing::debug!(member = %me, error = %e, "member list failed");
            return false;
        }
    };
    let Some(registered) = registered else {
        return false;
    };
    if registered == wanted {
        state.update(|s| s.registered_peer_urls = registered);
        return true;
    }
    match client.update_peer_urls(id, &wanted).await {
        Ok(_) => {
            tracing::info!(member = %me, from = ?registered, to = ?wanted, "updated the member's peer URLs");
            state.update(|s| s.registered_peer_urls = wanted);
            true
        }
        Err(e) => {
            tracing::warn!(member = %me, error = %e, "updating the member's peer URLs failed; retrying");
            state.update(|s| s.registered_peer_urls = registered);
            false
        }
    }
}

/// After etcd exited: was this member removed from the cluster, dropped by a recovery, or
/// neither? Only a member list from this member's own cluster is evidence (a fork's is not).
async fn removal(
    coord: &impl Coordination,
    cluster: &ClusterConfig,
    me: &str,
    state: &SharedState,
) -> Option<RunEnd> {
    let s = state.get();
    let (Some(id), Some(cluster_id)) = (s.member_id, s.cluster_id) else {
        return None;
    };
    let list: MemberList = Executor::new(cluster, me).peers_member_list().await?;
    if list.cluster_id != cluster_id
        || list.members.is_empty()
        || list.members.iter().any(|m| m.id == id)
    {
        return None;
    }
    let leases = coord.member_leases().await.unwrap_or_default();
    if RecoveryRecord::dropped_by_any(&leases, cluster_id, id, &s.superseded_recoveries) {
        Some(RunEnd::Dropped)
    } else {
        Some(RunEnd::Removed)
    }
}
