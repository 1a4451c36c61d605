//! The member loop: decide how to start, start etcd, keep it running with the current
//! configuration, promote it when it is a learner, renew its lease, and stop for good when the
//! member has been removed from the cluster.

use crate::etcd_process::{EtcdProcess, SpawnError};
use crate::state::{Phase, SharedState};
use quorate_api::status::EtcdRole;
use quorate_coord::{CoordError, Coordination};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::{HolderIdentity, MemberLease};
use quorate_core::member_etcd_config::{MemberEtcdConfig, StartMode, member_etcd_config};
use quorate_core::member_start::{
    Backups, ListedMember, StartDecision, StartEvidence, decide_start, join_initial_cluster,
};
use quorate_core::rollout::{CONFIG_HASH_ANNOTATION, config_hash, may_restart};
use quorate_etcd::data_dir::{self, DataDirState};
use quorate_etcd::{ClusterClient, EtcdTimeouts, MemberClient, client_tls};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::watch;

/// Settings of one agent.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The member this agent runs (etcd member name).
    pub member: String,
    /// etcd's data directory.
    pub data_dir: PathBuf,
    /// File etcd's output is appended to.
    pub etcd_log: PathBuf,
    /// The etcd binary.
    pub etcd_binary: PathBuf,
    /// How often the agent checks its configuration for changes.
    pub poll_interval: Duration,
    /// How often the agent probes etcd and retries a refused step ("unhealthy cluster",
    /// "learner not in sync"): short, because etcd lifts these refusals at a moment it does not
    /// announce, and every retry is one cheap RPC.
    pub retry_interval: Duration,
}

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
}

/// How one run of etcd ended.
enum RunEnd {
    ConfigChanged,
    /// A single member whose data ends before the newest backup: its data must be replaced.
    BehindBackup(String),
    Exited(String),
    Removed,
    Shutdown,
}

/// Runs the member until `shutdown` turns true or the member is removed.
pub async fn run_agent<C: Coordination>(
    coord: C,
    opts: AgentOptions,
    state: SharedState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<AgentExit, AgentError> {
    let mut failures: u32 = 0;
    let mut silent_since = None;
    loop {
        if *shutdown.borrow() {
            return Ok(AgentExit::Shutdown);
        }
        let cluster = match coord.cluster_config().await {
            Ok(c) => c,
            Err(CoordError::NoConfig { .. }) => {
                let reason = "no cluster configuration yet".to_string();
                wait(&state, &opts, &mut shutdown, reason, opts.poll_interval).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let mode = match prepare_start(&coord, &cluster, &opts, &mut silent_since).await {
            Ok(mode) => mode,
            Err(reason) => {
                wait(&state, &opts, &mut shutdown, reason, opts.retry_interval).await;
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
            RunEnd::BehindBackup(why) => {
                tracing::warn!(member = %opts.member, %why, "data is older than the backups; restoring");
                let aside =
                    data_dir::move_aside(&opts.data_dir, jiff::Timestamp::now().as_second());
                if let Err(e) = aside {
                    wait(
                        &state,
                        &opts,
                        &mut shutdown,
                        format!("{why}; moving the data aside failed: {e}"),
                        opts.poll_interval,
                    )
                    .await;
                }
            }
            RunEnd::Exited(why) => {
                failures += 1;
                let backoff = opts.poll_interval * failures.min(10);
                tracing::warn!(member = %opts.member, %why, ?backoff, "etcd exited; restarting");
                let reason = format!("etcd exited ({why}); restarting");
                wait(&state, &opts, &mut shutdown, reason, backoff).await;
            }
        }
    }
}

/// Records why the member waits and sleeps for `how_long` (or until shutdown).
async fn wait(
    state: &SharedState,
    opts: &AgentOptions,
    shutdown: &mut watch::Receiver<bool>,
    reason: String,
    how_long: Duration,
) {
    if state.get().message != reason {
        tracing::info!(member = %opts.member, %reason, "waiting");
    }
    state.update(|s| {
        s.phase = Phase::Waiting;
        s.healthy = false;
        s.message = reason;
    });
    let _ = tokio::time::timeout(how_long, shutdown.changed()).await;
}

fn timeouts() -> EtcdTimeouts {
    EtcdTimeouts {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(3),
        ..EtcdTimeouts::default()
    }
}

/// A client for the cluster-wide calls, over `urls`.
async fn cluster_client(
    cluster: &ClusterConfig,
    urls: &[String],
) -> Result<ClusterClient, quorate_etcd::EtcdError> {
    ClusterClient::new(urls, client_tls(cluster).as_ref(), timeouts()).await
}

/// The client URLs of every desired member except `me`.
fn peers_client_urls(cluster: &ClusterConfig, me: &str) -> Vec<String> {
    cluster
        .members
        .iter()
        .filter(|m| m.name != me)
        .map(|m| m.client_url.clone())
        .collect()
}

async fn member_list(cluster: &ClusterConfig, me: &str) -> Option<Vec<ListedMember>> {
    let urls = peers_client_urls(cluster, me);
    if urls.is_empty() {
        return None;
    }
    let members = cluster_client(cluster, &urls)
        .await
        .ok()?
        .member_list()
        .await
        .ok()?;
    Some(
        members
            .into_iter()
            .map(|m| ListedMember {
                id: m.id,
                name: m.name,
                peer_urls: m.peer_urls,
                is_learner: m.is_learner,
            })
            .collect(),
    )
}

/// Works out how etcd starts, performing the membership change the start needs (adding this
/// member as a learner, or removing its stale entry). `Err` carries the reason to wait.
async fn prepare_start<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    silent_since: &mut Option<Instant>,
) -> Result<StartMode, String> {
    let me = &opts.member;
    data_dir::check_guard(&opts.data_dir, &cluster.cluster_token).map_err(|e| e.to_string())?;
    let has_data = match data_dir::inspect(&opts.data_dir) {
        DataDirState::Valid => true,
        DataDirState::Empty => false,
        DataDirState::Invalid(why) => {
            let aside = data_dir::move_aside(&opts.data_dir, jiff::Timestamp::now().as_second())
                .map_err(|e| format!("{why}; moving it aside failed: {e}"))?;
            tracing::warn!(member = %me, %why, aside = %aside.display(), "unusable data directory moved aside");
            false
        }
    };
    let (member_list, cluster_existed, backups) = if has_data {
        (None, true, Backups::NotConfigured)
    } else {
        let leases = coord.member_leases().await.map_err(|e| e.to_string())?;
        let existed = leases
            .iter()
            .filter_map(|l| l.holder_identity.as_deref())
            .filter_map(|h| h.parse::<HolderIdentity>().ok())
            .any(|h| h.cluster_id.is_some());
        let list = member_list(cluster, me).await;
        let backups = if list.is_none() {
            crate::restore::backups_in_store(cluster).await
        } else {
            Backups::NotConfigured
        };
        (list, existed, backups)
    };
    let silent = match (&member_list, has_data) {
        (None, false) => silent_since.get_or_insert_with(Instant::now).elapsed(),
        _ => {
            *silent_since = None;
            Duration::ZERO
        }
    };
    let evidence = StartEvidence {
        has_data,
        member_list,
        cluster_existed,
        backups,
        peers_silent_for: silent,
    };
    let peer_urls = peers_client_urls(cluster, me);
    let peers = || cluster_client(cluster, &peer_urls);
    match decide_start(cluster, me, &evidence) {
        StartDecision::Start(mode) => Ok(mode),
        StartDecision::Wait(reason) => Err(reason),
        StartDecision::RestoreFromBackup => {
            crate::restore::restore_member(cluster, opts).await?;
            Ok(StartMode::Restart)
        }
        StartDecision::AddSelfAsLearner => {
            let my_peer_url = cluster
                .member(me)
                .map(|m| m.peer_url.clone())
                .unwrap_or_default();
            let listed = evidence.member_list.unwrap_or_default();
            if let Some(reason) = crate::turn::not_my_turn(cluster, me, &listed) {
                return Err(reason);
            }
            // A data directory left half-initialised by an earlier attempt would make etcd
            // refuse to join; it holds nothing of value because the member never ran.
            let _ = std::fs::remove_dir_all(&opts.data_dir);
            let (_, members) = async { peers().await?.add_learner(&[my_peer_url]).await }
                .await
                .map_err(|e| format!("adding {me} as a learner: {e}"))?;
            let listed: Vec<ListedMember> = members
                .into_iter()
                .map(|m| ListedMember {
                    id: m.id,
                    name: m.name,
                    peer_urls: m.peer_urls,
                    is_learner: m.is_learner,
                })
                .collect();
            tracing::info!(member = %me, "added as a learner");
            Ok(StartMode::Join {
                initial_cluster: join_initial_cluster(cluster, &listed),
            })
        }
        StartDecision::ReplaceSelf { id } => {
            async { peers().await?.remove(id).await }
                .await
                .map_err(|e| {
                    format!("removing stale entry {id:x} of {me} (its data is gone): {e}")
                })?;
            tracing::warn!(member = %me, id = %format!("{id:x}"), "removed stale member entry; will rejoin as a learner");
            Err(format!(
                "removed stale member entry {id:x}; rejoining as a learner"
            ))
        }
    }
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
    let mut process = EtcdProcess::spawn(&opts.etcd_binary, &args, &opts.etcd_log)?;
    tracing::info!(member = %me, pid = ?process.pid(), ?mode, "etcd started");
    state.update(|s| {
        s.phase = Phase::Running;
        s.message = String::new();
        s.etcd_args = args.clone();
    });
    let endpoint = cluster
        .member(me)
        .map(|m| m.client_url.clone())
        .unwrap_or_default();
    let tls = client_tls(cluster);
    let mut member_client: Option<MemberClient> = None;
    let heartbeat = Duration::from_millis(cluster.heartbeat_millis);
    let mut last_renewal: Option<Instant> = None;
    // A lone member compares its revision with the bucket's once it serves (after etcd has
    // replayed its write-ahead log), as etcd-backup-restore does before starting etcd.
    let mut revision_checked = cluster.members.len() != 1 || cluster.backup.is_none();
    // Whether the member list has this member's configured peer URL (checked once per run).
    let mut peer_urls_settled = false;
    let mut probe = tokio::time::interval(opts.retry_interval);
    let mut config_check = tokio::time::interval(opts.poll_interval);
    loop {
        tokio::select! {
            status = process.wait() => {
                let why = status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                state.update(|s| s.healthy = false);
                if was_removed(cluster, me, state).await {
                    return Ok(RunEnd::Removed);
                }
                return Ok(RunEnd::Exited(why));
            }
            _ = shutdown.changed() => {
                process.stop(Duration::from_secs(10)).await;
                state.update(|s| s.healthy = false);
                return Ok(RunEnd::Shutdown);
            }
            _ = config_check.tick() => {
                if let Ok(latest) = coord.cluster_config().await
                    && restart_needed(&config, &latest, me, &data_dir)
                {
                    let leases = coord.member_leases().await.unwrap_or_default();
                    let turn = may_restart(&latest, me, &leases, &config_hash(&latest), jiff::Timestamp::now());
                    match turn {
                        Ok(()) => {
                            tracing::info!(member = %me, "configuration changed; restarting etcd");
                            process.stop(Duration::from_secs(10)).await;
                            return Ok(RunEnd::ConfigChanged);
                        }
                        Err(reason) => state.update(|s| s.message = reason),
                    }
                }
            }
            _ = probe.tick() => {
                if member_client.is_none() {
                    member_client = MemberClient::connect(&endpoint, tls.as_ref(), timeouts()).await.ok();
                }
                let Some(client) = &member_client else { continue };
                match client.status().await {
                    Ok(st) => {
                        // Checked before the member reports healthy, so nothing trusts data
                        // that is about to be replaced.
                        if !revision_checked && st.leader_id != 0 {
                            revision_checked = true;
                            if let Some(why) = behind_backups(cluster, st.revision).await {
                                process.stop(Duration::from_secs(10)).await;
                                return Ok(RunEnd::BehindBackup(why));
                            }
                        }
                        state.update(|s| {
                            s.member_id = Some(st.member_id);
                            s.cluster_id = Some(st.cluster_id);
                            s.is_learner = st.is_learner;
                            s.is_leader = st.leader_id == st.member_id;
                            s.healthy = st.leader_id != 0;
                        });
                        if st.is_learner {
                            promote(cluster, me, st.member_id).await;
                        } else if !peer_urls_settled && st.leader_id != 0 {
                            peer_urls_settled =
                                settle_peer_urls(client, cluster, me, st.member_id, state).await;
                        }
                        let due = last_renewal.is_none_or(|t| t.elapsed() >= heartbeat);
                        if due && st.leader_id != 0 && renew_lease(coord, cluster, me, state).await {
                            last_renewal = Some(Instant::now());
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

/// `Some(why)` when this lone member's data ends before the newest backup.
async fn behind_backups(cluster: &ClusterConfig, revision: i64) -> Option<String> {
    match crate::restore::backups_in_store(cluster).await {
        Backups::Available { newest_revision } if newest_revision > revision => Some(format!(
            "the data ends at revision {revision} but the backups reach {newest_revision}"
        )),
        _ => None,
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

async fn promote(cluster: &ClusterConfig, me: &str, id: u64) {
    let result = async {
        cluster_client(cluster, &cluster.client_urls())
            .await?
            .promote(id)
            .await
    }
    .await;
    match result {
        Ok(_) => tracing::info!(member = %me, "promoted from learner to voting member"),
        Err(e) if e.kind() == quorate_etcd::ErrorKind::MemberNotLearner => {}
        Err(e) => tracing::debug!(member = %me, error = %e, "promotion not possible yet"),
    }
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

/// Writes this member's lease; false when it could not be written.
async fn renew_lease<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    me: &str,
    state: &SharedState,
) -> bool {
    let s = state.get();
    let (Some(member_id), Some(lease_name)) = (
        s.member_id,
        cluster.member(me).map(|m| m.lease_name.clone()),
    ) else {
        return false;
    };
    let role = if s.is_leader {
        EtcdRole::Leader
    } else {
        EtcdRole::Member
    };
    let identity = HolderIdentity {
        member_id,
        cluster_id: s.cluster_id,
        role,
    };
    let mut lease = MemberLease::new(lease_name);
    lease.renew(&identity, s.peer_tls_enabled(), jiff::Timestamp::now());
    lease
        .annotations
        .insert(CONFIG_HASH_ANNOTATION.to_string(), config_hash(cluster));
    match coord.put_member_lease(&lease).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(member = %me, error = %e, "renewing the member lease failed");
            false
        }
    }
}

/// After etcd exited: is this member gone from the cluster's member list?
async fn was_removed(cluster: &ClusterConfig, me: &str, state: &SharedState) -> bool {
    let Some(id) = state.get().member_id else {
        return false;
    };
    match member_list(cluster, me).await {
        Some(list) => !list.is_empty() && !list.iter().any(|m| m.id == id),
        None => false,
    }
}
