//! The member loop: decide how to start (`start`), start etcd, keep it running with the current
//! configuration, promote it when it is a learner, renew its lease, take part in quorum-loss
//! recovery, and stop for good when the member has been removed from the cluster.

use crate::adopt::{self, Found};
use crate::etcd_process::{EtcdProcess, Lifetime, SpawnError};
use crate::executor::{Executor, own_etcd};
use crate::options::AgentOptions;
use crate::start::{self, NotYet, prepare_start};
use crate::state::{Phase, SharedState};
use crate::wait::Wait;
use crate::{duties, facts, publish};
use quorate_coord::{CoordError, Coordination};
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::maintenance::defrag::DefragOutcome;
use quorate_core::member_etcd_config::{MemberEtcdConfig, StartMode, member_etcd_config};
use quorate_core::membership::MemberList;
use quorate_core::membership::data_state::DataState;
use quorate_core::membership::recovery::{Gone, RecoveryRecord, why_gone};
use quorate_etcd::binaries::MissingEtcd;
use quorate_etcd::{MemberClient, MemberStatus};
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
    let mut looked_for_etcd = false;
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
        // Once per agent: an etcd an earlier agent of this member started may still run.
        let mut adopted = None;
        if !looked_for_etcd {
            match adopt::look(&opts).await {
                Found::Adopted(process, started_with) => {
                    looked_for_etcd = true;
                    tracing::info!(member = %opts.member, pid = ?process.pid(), "adopted the running etcd");
                    adopted = Some((process, started_with));
                }
                Found::Start(why) => {
                    looked_for_etcd = true;
                    tracing::info!(member = %opts.member, %why, "no running etcd to adopt");
                }
                Found::Wait(why) => {
                    let reason = Wait::new(why);
                    wait(&state, &opts, &mut shutdown, reason, opts.retry_interval).await;
                    continue;
                }
            }
        }
        let end = if let Some((process, started_with)) = adopted {
            // Whatever mode it started in, the running etcd has its data: a plain restart's
            // configuration is the one it runs with.
            let data_dir = opts.data_dir.display().to_string();
            let config =
                member_etcd_config(&started_with, &opts.member, &data_dir, &StartMode::Restart);
            match config {
                Ok(config) => {
                    run_process(
                        &coord,
                        &started_with,
                        &opts,
                        config,
                        process,
                        &state,
                        &mut shutdown,
                    )
                    .await?
                }
                // Recorded by an agent that ran it: it was a member of that configuration.
                Err(e) => {
                    tracing::warn!(member = %opts.member, error = %e, "the adopted etcd's recorded configuration does not describe this member; stopping it");
                    process
                        .stop(Duration::from_secs(
                            quorate_core::agent_exit::ETCD_STOP_SECONDS,
                        ))
                        .await;
                    adopt::forget(&opts.data_dir);
                    continue;
                }
            }
        } else {
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
            run_etcd(&coord, &cluster, &opts, mode, &state, &mut shutdown).await?
        };
        match end {
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

/// Runs etcd in `mode` until a duty, its exit, a removal or a shutdown ends this run. The loop
/// only schedules: each timer is one call into a duty (see `duties`).
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
    let binary = opts.etcd_binaries.etcd(cluster.etcd_version)?;
    let process = EtcdProcess::spawn(&binary, &args, &opts.etcd_log, Lifetime::OutlivesAgent)?;
    tracing::info!(member = %me, pid = ?process.pid(), ?mode, "etcd started");
    if let Some(pid) = process.pid() {
        adopt::record(&opts.data_dir, pid, cluster);
    }
    run_process(coord, cluster, opts, config, process, state, shutdown).await
}

/// Runs the member with `process`, an etcd started (or adopted) with `cluster`'s configuration,
/// until a duty, its exit, a removal or a shutdown ends this run.
async fn run_process<C: Coordination>(
    coord: &C,
    cluster: &ClusterConfig,
    opts: &AgentOptions,
    config: MemberEtcdConfig,
    mut process: EtcdProcess,
    state: &SharedState,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<RunEnd, AgentError> {
    let me = &opts.member;
    state.update(|s| {
        s.hibernation_request = cluster.hibernation_request.clone();
        s.phase = Phase::Running;
        s.message = String::new();
        s.etcd_args = config.to_args();
    });
    let mut run = Running::new(coord, cluster, opts, state, config).await;
    let mut probe = tokio::time::interval(opts.retry_interval);
    let mut config_check = tokio::time::interval(opts.poll_interval);
    let mut quorum_check = tokio::time::interval(opts.poll_interval);
    loop {
        let ending = tokio::select! {
            outcome = run.defragmentation(), if run.defragmenting.is_some() => {
                run.defragmented(outcome).await;
                None
            }
            status = process.wait() => {
                let why = status.unwrap_or_else(|e| e.to_string());
                adopt::forget(&opts.data_dir);
                state.update(|s| s.healthy = false);
                return Ok(removal(coord, cluster, me, state).await.unwrap_or(RunEnd::Exited(why)));
            }
            _ = shutdown.changed() => {
                let grace = Duration::from_secs(quorate_core::agent_exit::ETCD_STOP_SECONDS);
                process.stop(grace).await;
                adopt::forget(&opts.data_dir);
                tracing::info!(member = %me, "stopping: etcd stopped");
                state.update(|s| s.healthy = false);
                return Ok(RunEnd::Shutdown);
            }
            _ = config_check.tick() => run.config_check().await,
            _ = quorum_check.tick(), if state.get().member_id.is_some() => run.quorum_check().await,
            _ = probe.tick() => {
                run.probe().await;
                None
            }
        };
        if let Some(ending) = ending {
            process.stop(Duration::from_secs(10)).await;
            adopt::forget(&opts.data_dir);
            return Ok(ending.into());
        }
    }
}

impl From<duties::Ending> for RunEnd {
    fn from(ending: duties::Ending) -> Self {
        match ending {
            duties::Ending::ConfigChanged => RunEnd::ConfigChanged,
            duties::Ending::Dropped => RunEnd::Dropped,
            duties::Ending::Recover(mode) => RunEnd::Recover(mode),
            duties::Ending::BehindBackup(why) => RunEnd::BehindBackup(why),
        }
    }
}

/// One run of etcd as the loop's timers see it: what the duties remember from one tick to the
/// next (when each last ran, the client of this member's etcd, a defragmentation in progress).
struct Running<'a, C> {
    coord: &'a C,
    cluster: &'a ClusterConfig,
    opts: &'a AgentOptions,
    state: &'a SharedState,
    /// The configuration etcd runs with.
    config: MemberEtcdConfig,
    member_client: Option<MemberClient>,
    last_publish: Option<Instant>,
    /// What the last publish said of the member's liveness: whether it renewed (etcd had a
    /// leader), and as which member, cluster and role. A change is published at once instead
    /// of at the next heartbeat, so the status sees a member serve (or lead) when it starts to.
    published: Option<(bool, u64, u64, bool)>,
    /// Whether the member list has this member's configured peer URL (checked once per run).
    peer_urls_settled: bool,
    recorded_ids: Option<(u64, u64)>,
    last_drop_check: Option<Instant>,
    last_scale_in_check: Option<Instant>,
    last_version_check: Option<Instant>,
    last_defrag_check: Option<Instant>,
    secrets_written: Instant,
    /// The newest configuration the config check read (maintenance settings change without a
    /// restart, so the defragmentation check reads them from here).
    newest: ClusterConfig,
    defragmenting: Option<duties::defrag::Running>,
    leading_since: Option<jiff::Timestamp>,
}

impl<'a, C: Coordination> Running<'a, C> {
    async fn new(
        coord: &'a C,
        cluster: &'a ClusterConfig,
        opts: &'a AgentOptions,
        state: &'a SharedState,
        config: MemberEtcdConfig,
    ) -> Self {
        if state.get().defrag == Default::default() {
            let leases = coord.member_leases().await.unwrap_or_default();
            let record = duties::defrag::record_of(&leases, cluster, &opts.member);
            state.update(|s| s.defrag = record);
        }
        Running {
            coord,
            cluster,
            opts,
            state,
            config,
            member_client: None,
            last_publish: None,
            published: None,
            peer_urls_settled: false,
            recorded_ids: None,
            last_drop_check: None,
            last_scale_in_check: None,
            last_version_check: None,
            last_defrag_check: None,
            secrets_written: Instant::now(),
            newest: cluster.clone(),
            defragmenting: None,
            leading_since: None,
        }
    }

    /// The defragmentation in progress (the loop polls it only while there is one).
    async fn defragmentation(&mut self) -> DefragOutcome {
        self.defragmenting.as_mut().expect("guarded").await
    }

    /// Records and publishes a finished defragmentation.
    async fn defragmented(&mut self, outcome: DefragOutcome) {
        self.defragmenting = None;
        let me = &self.opts.member;
        duties::defrag::finished(me, self.state, outcome);
        publish::publish(self.coord, self.cluster, me, self.state, true).await;
    }

    /// The configuration check: follow the newest configuration, restart for it in turn.
    async fn config_check(&mut self) -> Option<duties::Ending> {
        let seen = duties::Seen::new(self.coord);
        let refresh =
            self.secrets_written.elapsed() >= SECRET_REFRESH && seen.latest().await.is_some();
        if refresh {
            self.secrets_written = Instant::now();
        }
        let latest = duties::rollout::follow(&seen, &self.opts.member, self.state, refresh).await?;
        self.newest = latest.clone();
        let client = self.member_client.as_ref();
        duties::rollout::run(
            &seen,
            self.cluster,
            &latest,
            &self.config,
            self.opts,
            client,
            self.state,
        )
        .await
    }

    /// The quorum check: with a leader, only whether a recovery dropped this member matters,
    /// and a heartbeat is soon enough; without one, quorum is looked at every time.
    async fn quorum_check(&mut self) -> Option<duties::Ending> {
        let client = self.member_client.as_ref()?;
        let heartbeat = Duration::from_millis(self.cluster.heartbeat_millis);
        if self.state.get().healthy
            && self
                .last_drop_check
                .is_some_and(|t| t.elapsed() < heartbeat)
        {
            return None;
        }
        self.last_drop_check = Some(Instant::now());
        let seen = duties::Seen::new(self.coord);
        let (me, data_dir) = (&self.opts.member, &self.opts.data_dir);
        duties::quorum::run(&seen, self.cluster, me, data_dir, client, self.state).await
    }

    /// The probe tick: ask this member's etcd for its status, record it, and hand the tick's
    /// one observation to every duty that is due.
    async fn probe(&mut self) {
        let (cluster, opts, state) = (self.cluster, self.opts, self.state);
        let me = opts.member.as_str();
        if self.member_client.is_none() {
            let (endpoint, tls) = own_etcd(cluster, me);
            let timeouts = crate::executor::timeouts();
            self.member_client = MemberClient::connect(&endpoint, tls.as_ref(), timeouts)
                .await
                .ok();
        }
        let Some(client) = &self.member_client else {
            return;
        };
        let st = match client.status().await {
            Ok(st) => st,
            Err(e) => {
                tracing::debug!(member = %me, error = %e, "status probe failed");
                state.update(|s| s.healthy = false);
                return;
            }
        };
        // This tick's one observation, for every duty that needs more than `st`.
        let tick = duties::Tick::observe(self.coord, cluster, me, &st).await;
        // Readiness asks for a linearizable read as a voter; a learner or a member without a
        // leader is not asked (it cannot serve one).
        let read = !st.is_learner && st.leader_id != 0 && client.linearizable_read().await.is_ok();
        if self.recorded_ids != Some((st.cluster_id, st.member_id)) {
            facts::store(&opts.data_dir, st.cluster_id, st.member_id, st.revision);
            adopt::note_ids(&opts.data_dir, st.cluster_id, st.member_id);
            crate::restore::continue_chain_after_restore(cluster, &opts.data_dir, st.cluster_id)
                .await;
            self.recorded_ids = Some((st.cluster_id, st.member_id));
        }
        record_status(state, &st, read);
        let leads = st.leader_id == st.member_id && st.leader_id != 0;
        if !leads {
            self.leading_since = None;
        } else if self.leading_since.is_none() {
            self.leading_since = Some(crate::clock::now());
        }
        if self.defragmenting.is_none()
            && st.leader_id != 0
            && !st.is_learner
            && due(&mut self.last_defrag_check, opts.poll_interval)
        {
            let since = self.leading_since;
            let (started, changed) =
                duties::defrag::run(&self.newest, me, client, &tick, state, since).await;
            self.defragmenting = started;
            if changed {
                publish::publish(self.coord, cluster, me, state, true).await;
            }
        }
        if leads && due(&mut self.last_scale_in_check, opts.poll_interval) {
            duties::scale_in::remove_leaving_members(me, client, &tick, state).await;
        } else if !leads {
            state.update(|s| s.membership = None);
        }
        if due(&mut self.last_version_check, opts.poll_interval) {
            crate::etcd_version::check(&self.newest, me, &opts.data_dir, client, &st, state).await;
        }
        duties::promote::run(cluster, me, &tick, state).await;
        if !st.is_learner && !self.peer_urls_settled && st.leader_id != 0 {
            self.peer_urls_settled =
                duties::peer_urls::settle(client, cluster, me, st.member_id, state).await;
        }
        let heartbeat = Duration::from_millis(cluster.heartbeat_millis);
        let renew = st.leader_id != 0;
        let says = (renew, st.member_id, st.cluster_id, leads);
        let publish_due = self.last_publish.is_none_or(|t| t.elapsed() >= heartbeat)
            || self.published != Some(says);
        if publish_due && publish::publish(self.coord, cluster, me, state, renew).await {
            self.last_publish = Some(Instant::now());
            self.published = Some(says);
        }
    }
}

/// Whether a check last done at `last` is due again after `every`; if so, notes it done now.
fn due(last: &mut Option<Instant>, every: Duration) -> bool {
    if last.is_some_and(|t| t.elapsed() < every) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

/// Records what this member's etcd answered (`read`: whether a linearizable read worked).
fn record_status(state: &SharedState, st: &MemberStatus, read: bool) {
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
}

/// After etcd exited: was this member removed from the cluster, dropped by a recovery, or
/// neither (core `why_gone`, on a member list from another member)?
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
    // Leases are only read when the list says this member is gone.
    let gone = why_gone(&list, id, cluster_id, &[], &s.superseded_recoveries);
    if gone == Gone::Exited {
        return None;
    }
    let leases = coord.member_leases().await.unwrap_or_default();
    match why_gone(&list, id, cluster_id, &leases, &s.superseded_recoveries) {
        Gone::Exited => None,
        Gone::Removed => Some(RunEnd::Removed),
        Gone::Dropped => Some(RunEnd::Dropped),
    }
}
