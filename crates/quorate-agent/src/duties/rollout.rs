//! The rollout duty: on each configuration check, follow the newest cluster configuration (its
//! TLS files, the upgrade's snapshot request) and, when etcd must restart to pick it up, take
//! this member's turn as core `rollout::restart_turn` decides: restart now, hand leadership to
//! an updated follower first, or wait and say why.

use super::{Ending, Seen};
use crate::executor::Executor;
use crate::options::AgentOptions;
use crate::state::SharedState;
use quorate_coord::Coordination;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::member_etcd_config::{MemberEtcdConfig, restart_needed};
use quorate_core::membership::planner::{MemberRef, Step};
use quorate_core::membership::rollout::{RestartEvidence, RestartTurn, restart_turn};
use quorate_core::upgrade::upgrade_snapshot_request;
use quorate_etcd::MemberClient;

/// The newest configuration, once its files are in place: its TLS files and backup keys
/// written again when `refresh` (a rotated certificate reaches etcd), the CA bundles' digests
/// added. `None` when it cannot be read, or a CA bundle is being written (looked at again next
/// time).
pub async fn follow<C: Coordination>(
    seen: &Seen<'_, C>,
    me: &str,
    state: &SharedState,
    refresh: bool,
) -> Option<ClusterConfig> {
    let latest = seen.latest().await?;
    let coord = seen.coord();
    if refresh {
        if let Err(reason) = crate::secret_files::write_secret_files(coord, latest).await {
            tracing::warn!(member = %me, %reason, "refreshing the TLS files failed");
        }
        crate::certificates::record(state, latest);
        if let Err(reason) = crate::secret_files::write_backup_keys(coord, latest).await {
            tracing::warn!(member = %me, %reason, "refreshing the backup encryption keys failed");
        }
    }
    // After the refresh, so a new CA bundle is seen as soon as it is written.
    match crate::secret_files::with_trust_digests(latest.clone()) {
        Ok(latest) => Some(latest),
        Err(reason) => {
            tracing::debug!(member = %me, %reason, "configuration check skipped");
            None
        }
    }
}

/// One configuration check of the member running etcd with `config` (from `running`): publish
/// what `latest` asks of the agent and, when etcd must restart for it, take this member's turn.
/// `Some` when etcd restarts now.
pub async fn run<C: Coordination>(
    seen: &Seen<'_, C>,
    running: &ClusterConfig,
    latest: &ClusterConfig,
    config: &MemberEtcdConfig,
    opts: &AgentOptions,
    client: Option<&MemberClient>,
    state: &SharedState,
) -> Option<Ending> {
    let me = opts.member.as_str();
    let leads = state.get().is_leader;
    let leases = match latest.backup.is_some() && leads {
        true => seen.leases().await.unwrap_or_default(),
        false => &[],
    };
    let upgrade = upgrade_snapshot_request(running.etcd_version, latest, leads, leases);
    // With TLS configured the listener serves TLS or nothing, never plain: a changed TLS
    // configuration has its files written at once.
    if latest.agent_tls != state.get().agent_tls
        && let Err(reason) = crate::secret_files::write_secret_files(seen.coord(), latest).await
    {
        tracing::warn!(member = %me, %reason, "writing the agents' TLS files failed");
    }
    state.update(|s| {
        s.agent_tls = latest.agent_tls.clone();
        s.hibernation_request = latest.hibernation_request.clone();
        s.upgrade_snapshot_request = upgrade;
    });
    let data_dir = opts.data_dir.display().to_string();
    let pending = restart_needed(config, latest, me, &data_dir);
    state.metrics().member().configuration(latest, me, pending);
    let client = client.filter(|_| pending)?;
    match turn(seen, running, latest, opts, client).await {
        RestartTurn::Restart => {
            tracing::info!(member = %me, "configuration changed; restarting etcd");
            Some(Ending::ConfigChanged)
        }
        RestartTurn::HandOver(to) => {
            hand_over(latest, me, state, to).await;
            None
        }
        RestartTurn::Wait(reason) => {
            state.update(|s| s.message = reason);
            None
        }
    }
}

/// The evidence of this member's restart turn, gathered once, and core's decision on it.
async fn turn<C: Coordination>(
    seen: &Seen<'_, C>,
    running: &ClusterConfig,
    latest: &ClusterConfig,
    opts: &AgentOptions,
    client: &MemberClient,
) -> RestartTurn {
    let me = opts.member.as_str();
    // A restart onto a version this machine lacks, or without the TLS files the new
    // configuration names, would only stop the member.
    if let Err(missing) = opts.etcd_binaries.etcd(latest.etcd_version) {
        return RestartTurn::Wait(missing.to_string());
    }
    if let Err(wait) = crate::secret_files::write_secret_files(seen.coord(), latest).await {
        return RestartTurn::Wait(wait.into());
    }
    let list = match client.member_list_of_cluster().await {
        Ok(list) => list,
        Err(e) => return RestartTurn::Wait(format!("reading the member list: {e}")),
    };
    let leases = seen.leases().await.unwrap_or_default();
    let answers: Vec<_> = Executor::new(latest, me)
        .answers(&list)
        .await
        .into_iter()
        .map(|(m, a)| (m.name, a))
        .collect();
    let downgrade = if latest.etcd_version < running.etcd_version {
        let status = match client.status().await {
            Ok(status) => status,
            Err(e) => return RestartTurn::Wait(format!("reading etcd's status: {e}")),
        };
        let cluster = crate::etcd_version::cluster_version(latest, me).await;
        Some(crate::etcd_version::evidence(&status, cluster))
    } else {
        None
    };
    restart_turn(&RestartEvidence {
        me,
        running: running.etcd_version,
        latest,
        leases,
        answers: &answers,
        downgrade,
    })
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
