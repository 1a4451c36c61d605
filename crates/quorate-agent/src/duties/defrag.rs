//! The defragmentation duty: this member's part in defragmentation rounds (one decision, core
//! `maintenance::defrag::decide`): while its member leads, start a round when one is due; always adopt
//! the newest round any lease names, and take this member's turn when it comes: defragment its
//! own etcd, or, as the leader, hand leadership to a defragmented follower first.
//!
//! The defragmentation itself runs as a task beside the member loop (it may take minutes on a
//! large database, and the loop must go on noticing an exiting etcd or a shutdown); the loop
//! records its outcome with [`finished`] and publishes it on the lease.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::lease::MemberLease;
use quorate_core::maintenance::defrag::{
    DefragEvidence, DefragOutcome, DefragPeer, DefragRecord, DefragRound, DefragStep, DefragTurn,
    LeaderView, NoSpaceVerdict, RoundReason, decide,
};
use quorate_core::membership::planner::{MemberRef, Step};
use quorate_core::membership::recovery::EtcdAnswer;
use quorate_etcd::{Alarm, AlarmKind, EtcdTimeouts, MemberClient, MemberStatus};
use tokio::task::JoinHandle;

use super::Tick;
use crate::executor::Executor;
use crate::state::SharedState;

/// A defragmentation of this member's etcd in progress; dropping it (etcd exited, shutdown)
/// stops waiting for it.
pub struct Running(JoinHandle<DefragOutcome>);

impl std::future::Future for Running {
    type Output = DefragOutcome;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<DefragOutcome> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|joined| joined.unwrap_or_else(|e| panic!("the defragmentation task failed: {e}")))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// This member's record as its lease carries it (read once at start, so a restarted agent
/// neither forgets that it is through with a round nor the round itself).
pub fn record_of(leases: &[MemberLease], cluster: &ClusterConfig, me: &str) -> DefragRecord {
    let lease_name = cluster.member(me).map(|m| m.lease_name.as_str());
    leases
        .iter()
        .find(|l| Some(l.name.as_str()) == lease_name)
        .and_then(DefragRecord::of_lease)
        .unwrap_or_default()
}

/// One maintenance check while etcd runs (the tick's status answer is its answer just now).
/// Returns a task when this member's defragmentation starts; the caller awaits it and passes
/// its outcome to [`finished`]. Returns whether the record changed (to be published).
pub async fn run<C: Coordination>(
    cluster: &ClusterConfig,
    me: &str,
    client: &MemberClient,
    tick: &Tick<'_, C>,
    state: &SharedState,
    leading_since: Option<Timestamp>,
) -> (Option<Running>, bool) {
    let status = tick.status;
    state.metrics().member().database(
        u64::try_from(status.db_size).unwrap_or(0),
        u64::try_from(status.db_size_in_use).unwrap_or(0),
    );
    let leases = tick.seen.leases().await.unwrap_or_default();
    let mine = state.get().defrag;
    if leading_since.is_none() {
        // Only the leader speaks for the alarm; a former leader's verdict goes with its role.
        clear_no_space_message(state);
    }
    let known: Vec<DefragRecord> = leases.iter().filter_map(DefragRecord::of_lease).collect();
    let maintenance = &cluster.maintenance;
    let schedule = maintenance.schedule();
    let mut evidence = DefragEvidence {
        me,
        mine: &mine,
        known: &known,
        peers: None,
        leader: None,
        schedule: &schedule,
        policy: maintenance.defrag_thresholds,
        quota: cluster.etcd.quota_backend_bytes,
        request: maintenance.defrag_request.as_deref(),
    };
    // A follower through with the newest round any lease names has nothing to do and asks no
    // member anything (only the leader watches for a round to start).
    if leading_since.is_none()
        && let DefragStep::Follow(newest) = decide(&evidence)
    {
        let changed = newest.as_ref().map(|r| r.id) != mine.round.as_ref().map(|r| r.id);
        if changed {
            state.update(|s| s.defrag.round = newest);
        }
        return (None, changed);
    }
    let executor = Executor::new(cluster, me);
    let Some(peers) = peers(&executor, cluster, me, client, leases, state).await else {
        return (None, false);
    };
    let no_space: Vec<Alarm> = match leading_since {
        Some(_) => client.alarms().await.unwrap_or_default(),
        None => Vec::new(),
    }
    .into_iter()
    .filter(|a| a.kind == AlarmKind::NoSpace)
    .collect();
    evidence.peers = Some(&peers);
    evidence.leader = leading_since.map(|since| LeaderView {
        since,
        no_space: !no_space.is_empty(),
        revision: status.revision,
        now: crate::clock::now(),
    });
    let DefragStep::Act(plan) = decide(&evidence) else {
        return (None, false);
    };
    if leading_since.is_some() {
        answer_no_space(me, client, &no_space, plan.no_space, state).await;
    }
    let (mut round, mut turn) = (plan.current, plan.turn);
    if let Some(new) = plan.start {
        if start(me, client, status, &new).await {
            round = Some(new);
        } else {
            // The round is tried again on the next check; the current one is over for this
            // member (a round is only due once the current one is complete).
            turn = DefragTurn::Idle;
        }
    }
    let mut changed = false;
    if round.as_ref().map(|r| r.id) != mine.round.as_ref().map(|r| r.id) {
        state.update(|s| s.defrag.round = round.clone());
        changed = true;
    }
    match turn {
        DefragTurn::Idle => (None, changed),
        DefragTurn::Wait(why) => {
            tracing::debug!(member = %me, %why, "defragmentation waits");
            (None, changed)
        }
        DefragTurn::Skip => {
            let size = u64::try_from(status.db_size).unwrap_or(0);
            let outcome = DefragOutcome {
                round: round.as_ref().map_or(0, |r| r.id),
                at: crate::clock::now(),
                size_before: size,
                size_after: size,
                millis: 0,
                skipped: true,
                error: None,
            };
            state.metrics().defragmented(me, &outcome);
            state.update(|s| s.defrag.last = Some(outcome));
            (None, true)
        }
        DefragTurn::HandOver { name, id } => {
            let from = MemberRef {
                id: status.member_id,
                name: me.to_string(),
            };
            let step = Step::MoveLeader {
                from,
                to: MemberRef {
                    id,
                    name: name.clone(),
                },
            };
            match executor.apply(&step).await {
                Ok(_) => {
                    tracing::info!(member = %me, to = %name, "moved leadership to a defragmented member before defragmenting")
                }
                Err(wait) => {
                    tracing::info!(member = %me, to = %name, reason = %wait, "moving leadership before defragmenting")
                }
            }
            (None, changed)
        }
        DefragTurn::Defragment => {
            let Some(round) = round else {
                return (None, changed);
            };
            let url = cluster
                .member(me)
                .map(|m| m.client_url.clone())
                .unwrap_or_default();
            let timeout = Duration::from_secs(maintenance.defrag_timeout_secs.max(1));
            let tls = quorate_etcd::client_tls(cluster);
            let name = me.to_string();
            tracing::info!(member = %me, round = round.id, "defragmenting");
            let task = tokio::spawn(async move {
                defragment(&name, &url, tls.as_ref(), timeout, round.id).await
            });
            (Some(Running(task)), changed)
        }
    }
}

/// Records a finished defragmentation of this member.
pub fn finished(me: &str, state: &SharedState, outcome: DefragOutcome) {
    match &outcome.error {
        None => tracing::info!(
            member = %me,
            round = outcome.round,
            before = outcome.size_before,
            after = outcome.size_after,
            millis = outcome.millis,
            "defragmented"
        ),
        Some(error) => {
            tracing::warn!(member = %me, round = outcome.round, %error, "defragmentation failed; the round goes on without it")
        }
    }
    state.metrics().defragmented(me, &outcome);
    state.update(|s| s.defrag.last = Some(outcome));
}

/// Every member etcd lists (in desired order), with its answer, sizes and record; `None` when
/// this member's etcd cannot say who the members are.
async fn peers(
    executor: &Executor<'_>,
    cluster: &ClusterConfig,
    me: &str,
    client: &MemberClient,
    leases: &[MemberLease],
    state: &SharedState,
) -> Option<Vec<DefragPeer>> {
    let list = client.member_list_of_cluster().await.ok()?;
    let mine = state.get().defrag;
    let mut peers = Vec::with_capacity(list.members.len());
    for member in &list.members {
        let status = match executor.url_of(member) {
            Some(url) if member.is_started() => executor.answer(&url).await,
            _ => None,
        };
        // A member added but never started answers nothing, so every turn waits for it.
        let name = if member.name.is_empty() {
            format!("the member added as {}", quorate_etcd::format_id(member.id))
        } else {
            member.name.clone()
        };
        let record = if name == me {
            mine.clone()
        } else {
            record_of(leases, cluster, &name)
        };
        peers.push(DefragPeer {
            answer: status.as_ref().map(|s| EtcdAnswer {
                cluster_id: s.cluster_id,
                member_id: s.member_id,
                revision: s.revision,
                leader_id: s.leader_id,
            }),
            sizes: status.as_ref().map(|s| {
                (
                    u64::try_from(s.db_size).unwrap_or(0),
                    u64::try_from(s.db_size_in_use).unwrap_or(0),
                )
            }),
            record,
            name,
        });
    }
    let ordinal = |name: &str| cluster.members.iter().position(|m| m.name == name);
    peers.sort_by_key(|p| ordinal(&p.name).unwrap_or(usize::MAX));
    Some(peers)
}

/// Starts `round` as the leader: a round for a `NOSPACE` alarm first compacts the history at
/// the current revision (etcd accepts that under the alarm), so the defragmentations have
/// something to reclaim. False when that failed (the round is tried again on the next check).
async fn start(
    me: &str,
    client: &MemberClient,
    status: &MemberStatus,
    round: &DefragRound,
) -> bool {
    if round.reason == RoundReason::NoSpace {
        match client.compact(status.revision).await {
            Ok(()) => {
                tracing::warn!(member = %me, revision = status.revision, "NOSPACE: compacted the history")
            }
            // Compacted already at or past this revision: nothing more to free that way.
            Err(e) if e.to_string().contains("compacted") => {}
            Err(e) => {
                tracing::warn!(member = %me, error = %e, "NOSPACE: compacting failed; trying again");
                return false;
            }
        }
    }
    tracing::info!(member = %me, round = round.id, reason = ?round.reason, "starting a defragmentation round");
    true
}

/// For the leader: once the round for a `NOSPACE` alarm is over, disarms the alarm when every
/// database has room again, or says (in its waiting reason, on its lease) why it stays.
async fn answer_no_space(
    me: &str,
    client: &MemberClient,
    alarms: &[Alarm],
    verdict: NoSpaceVerdict,
    state: &SharedState,
) {
    if alarms.is_empty() {
        clear_no_space_message(state);
    }
    match verdict {
        NoSpaceVerdict::Nothing => {}
        NoSpaceVerdict::Disarm => {
            for alarm in alarms {
                match client.disarm(*alarm).await {
                    Ok(()) => {
                        tracing::warn!(member = %me, %alarm, "NOSPACE: space reclaimed; disarmed the alarm")
                    }
                    Err(e) => {
                        tracing::warn!(member = %me, %alarm, error = %e, "NOSPACE: disarming failed; trying again")
                    }
                }
            }
            clear_no_space_message(state);
        }
        NoSpaceVerdict::TooLarge(why) => {
            if state.get().message != why {
                tracing::error!(member = %me, "{why}");
            }
            state.update(|s| {
                s.message = why;
                s.message_is_no_space = true;
            });
        }
    }
}

fn clear_no_space_message(state: &SharedState) {
    state.update(|s| {
        if s.message_is_no_space {
            s.message.clear();
            s.message_is_no_space = false;
        }
    });
}

/// Defragments the member at `url` within `timeout`, with its sizes before and after.
async fn defragment(
    me: &str,
    url: &str,
    tls: Option<&quorate_etcd::EtcdTls>,
    timeout: Duration,
    round: u64,
) -> DefragOutcome {
    let started = Instant::now();
    let mut outcome = DefragOutcome {
        round,
        at: crate::clock::now(),
        size_before: 0,
        size_after: 0,
        millis: 0,
        skipped: false,
        error: None,
    };
    let timeouts = EtcdTimeouts {
        long_request: timeout,
        ..crate::executor::timeouts()
    };
    let client = match MemberClient::connect(url, tls, timeouts).await {
        Ok(client) => client,
        Err(e) => {
            outcome.error = Some(e.to_string());
            return outcome;
        }
    };
    let size = |s: MemberStatus| u64::try_from(s.db_size).unwrap_or(0);
    outcome.size_before = client.status().await.map(size).unwrap_or(0);
    let result = client.defragment().await;
    outcome.millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome.at = crate::clock::now();
    match result {
        Ok(()) => {
            outcome.size_after = client
                .status()
                .await
                .map(size)
                .unwrap_or(outcome.size_before);
        }
        Err(e) => {
            tracing::debug!(member = %me, error = %e, "defragment call failed");
            outcome.size_after = outcome.size_before;
            outcome.error = Some(e.to_string());
        }
    }
    outcome
}
