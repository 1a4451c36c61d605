//! The status of a local cluster: this module fills the one observed-state input of
//! `quorate_core::status` from what the supervisor sees — its agent processes and their
//! `/healthz`, the lease files, etcd's alarms and member list — so local mode and the operator
//! compute status by the same rules. Without a running supervisor no member runs (agents and
//! etcd die with it), and [`stopped_status`] says so instead of repeating the last file.

use std::collections::BTreeMap;

use quorate_api::Etcd;
use quorate_api::status::EtcdStatus;
use quorate_core::backup_ready::BackupLeases;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::last_operation::ErrorCode;
use quorate_core::lease::MemberLease;
use quorate_core::membership::rollout::config_hash;
use quorate_core::status::{
    MemberObservation, ObservedCluster, PassOutcome, Presence, Workload, rollout_from_config_hashes,
};

use crate::etcd_view::EtcdView;

/// What the supervisor knows of one member's agent process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberProcess {
    /// The agent process runs (a member not running is known stopped).
    pub running: bool,
    /// Its agent answers `/healthz` with 200 (etcd serves with a leader).
    pub ready: bool,
}

/// What the status of a supervised cluster is computed from.
pub struct StatusInputs<'a> {
    /// The applied object.
    pub etcd: &'a Etcd,
    /// The status computed last time (for transition times and the first-reconcile signal).
    pub previous: &'a EtcdStatus,
    /// Member leases as the agents last renewed them.
    pub leases: &'a [MemberLease],
    /// The configuration the supervisor wrote for the agents.
    pub config: &'a ClusterConfig,
    /// Per desired member name: its agent process.
    pub processes: &'a BTreeMap<String, MemberProcess>,
    /// etcd's own view (alarms, unstarted members, the leader's member list).
    pub etcd_view: &'a EtcdView,
    /// Where a requested hibernation stands.
    pub hibernation: Option<&'a quorate_core::hibernation::Hibernation>,
    /// The snapshot leases, when backups are configured.
    pub backup: Option<BackupLeases>,
    /// The etcd version the members run and where a change of it stands.
    pub etcd_version: Option<&'a quorate_core::etcd_version::VersionDecision>,
    /// Agents that could not be started in this pass.
    pub start_errors: &'a [String],
    /// Identifier of this supervisor run, for `lastOperation.runID`.
    pub run_id: &'a str,
    /// Now.
    pub now: jiff::Timestamp,
}

/// The new status of a supervised cluster.
pub fn compute_status(i: StatusInputs<'_>) -> EtcdStatus {
    let outcome = if i.start_errors.is_empty() {
        PassOutcome::Succeeded
    } else {
        PassOutcome::Failed(
            i.start_errors
                .iter()
                .map(|e| (ErrorCode::StartMember, e.clone()))
                .collect(),
        )
    };
    let members: BTreeMap<String, MemberObservation> = i
        .processes
        .iter()
        .map(|(name, p)| (name.clone(), observation(*p)))
        .collect();
    let workload = workload(i.etcd, i.leases, Some(i.config), &members);
    quorate_core::status::compute_status(&ObservedCluster {
        etcd: i.etcd,
        previous: i.previous,
        leases: i.leases,
        members,
        workload,
        alarms: i.etcd_view.alarms.clone(),
        unstarted: i.etcd_view.unstarted.clone(),
        backup: i.backup,
        voters: i.etcd_view.voters(),
        hibernation: i.hibernation.cloned(),
        etcd_version: i.etcd_version.cloned(),
        outcome: &outcome,
        pass_waits_for_members: false,
        run_id: i.run_id,
        now: i.now,
    })
}

/// The status of a cluster no supervisor runs: every member is stopped, whatever the leases
/// renewed moments before say; the last operation and errors stay as the last run left them.
pub fn stopped_status(
    etcd: &Etcd,
    previous: &EtcdStatus,
    leases: &[MemberLease],
    config: Option<&ClusterConfig>,
    backup: Option<BackupLeases>,
    hibernation: Option<&quorate_core::hibernation::Hibernation>,
    now: jiff::Timestamp,
) -> EtcdStatus {
    let members: BTreeMap<String, MemberObservation> = quorate_api::names::member_lease_names(etcd)
        .into_iter()
        .map(|name| (name, observation(MemberProcess::default())))
        .collect();
    let run_id = previous
        .last_operation
        .as_ref()
        .map(|op| op.run_id.clone())
        .unwrap_or_default();
    let workload = workload(etcd, leases, config, &members);
    quorate_core::status::compute_status(&ObservedCluster {
        etcd,
        previous,
        leases,
        members,
        workload,
        alarms: Vec::new(),
        unstarted: Vec::new(),
        backup,
        voters: None,
        hibernation: hibernation.cloned(),
        etcd_version: None,
        outcome: &PassOutcome::NotRun,
        pass_waits_for_members: false,
        run_id: &run_id,
        now,
    })
}

fn observation(p: MemberProcess) -> MemberObservation {
    MemberObservation {
        presence: if p.running {
            Presence::Running
        } else {
            Presence::Stopped
        },
        ready: p.running && p.ready,
    }
}

/// Replica counts from the processes, rollout facts from the configuration hash each member
/// publishes on its lease.
fn workload(
    etcd: &Etcd,
    leases: &[MemberLease],
    config: Option<&ClusterConfig>,
    members: &BTreeMap<String, MemberObservation>,
) -> Workload {
    let count = |f: fn(&MemberObservation) -> bool| {
        i32::try_from(members.values().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let desired_hash = config.map(config_hash).unwrap_or_default();
    Workload {
        current_replicas: count(|m| m.presence == Presence::Running),
        ready_replicas: count(|m| m.ready),
        rollout: Some(rollout_from_config_hashes(
            etcd,
            leases,
            members,
            &desired_hash,
        )),
        reference: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_api::status::{ConditionStatus, LastOperationState};
    use quorate_core::cluster_config::EtcdSettings;
    use quorate_core::membership::rollout::CONFIG_HASH_ANNOTATION;

    fn now() -> jiff::Timestamp {
        "2026-11-24T10:00:00Z".parse().unwrap()
    }

    fn etcd() -> Etcd {
        let mut e = Etcd::new("main", Default::default());
        e.metadata.generation = Some(1);
        e.spec.replicas = 3;
        e
    }

    fn config(e: &Etcd) -> ClusterConfig {
        ClusterConfig {
            cluster_name: "main".into(),
            namespace: "default".into(),
            cluster_token: "main-1".into(),
            members: Vec::new(),
            leaving: Vec::new(),
            bootstrap_members: Vec::new(),
            listen_host: "127.0.0.1".into(),
            etcd_version: quorate_api::EtcdVersion::V3_5,
            etcd_version_target: None,
            etcd: EtcdSettings::from_etcd(e),
            client_tls: None,
            peer_tls: None,
            agent_tls: None,
            secret_files: Vec::new(),
            heartbeat_millis: 1000,
            backup: None,
            recovery_request: None,
            maintenance: Default::default(),
            agent_token_secret: None,
            hibernation_request: None,
        }
    }

    /// Leases renewed just now by members running `config`.
    fn fresh_leases(config: &ClusterConfig) -> Vec<MemberLease> {
        (0..3)
            .map(|i| MemberLease {
                name: format!("main-{i}"),
                holder_identity: Some(format!("{}:c1:Member", i + 1)),
                renew_time: Some(now()),
                annotations: BTreeMap::from([(
                    CONFIG_HASH_ANNOTATION.to_string(),
                    config_hash(config),
                )]),
            })
            .collect()
    }

    fn condition(status: &EtcdStatus, type_: &str) -> ConditionStatus {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
            .unwrap_or_else(|| panic!("no {type_} in {:?}", status.conditions))
    }

    fn supervised(
        e: &Etcd,
        previous: &EtcdStatus,
        leases: &[MemberLease],
        config: &ClusterConfig,
        start_errors: &[String],
    ) -> EtcdStatus {
        let processes = (0..3)
            .map(|i| {
                let running = start_errors.is_empty() || i != 2;
                let p = MemberProcess {
                    running,
                    ready: running,
                };
                (format!("main-{i}"), p)
            })
            .collect();
        compute_status(StatusInputs {
            etcd: e,
            previous,
            leases,
            config,
            processes: &processes,
            etcd_view: &EtcdView::default(),
            hibernation: None,
            backup: None,
            etcd_version: None,
            start_errors,
            run_id: "local-7",
            now: now(),
        })
    }

    #[test]
    fn a_running_cluster_is_ready_and_all_members_updated() {
        let e = etcd();
        let config = config(&e);
        let leases = fresh_leases(&config);
        let s = supervised(&e, &EtcdStatus::default(), &leases, &config, &[]);
        assert_eq!(s.ready, Some(true));
        assert_eq!(condition(&s, "Ready"), ConditionStatus::True);
        assert_eq!(condition(&s, "AllMembersReady"), ConditionStatus::True);
        assert_eq!(condition(&s, "AllMembersUpdated"), ConditionStatus::True);
        assert_eq!((s.current_replicas, s.ready_replicas), (3, 3));
        assert_eq!(s.observed_generation, Some(1));
    }

    #[test]
    fn an_agent_that_cannot_start_has_its_own_error_code() {
        let e = etcd();
        let config = config(&e);
        let leases = fresh_leases(&config);
        let errors = ["starting the agent of main-2: permission denied".to_string()];
        let s = supervised(&e, &EtcdStatus::default(), &leases, &config, &errors);
        assert_eq!(s.last_errors.len(), 1);
        assert_eq!(s.last_errors[0].code, "ERR_START_MEMBER");
        assert_eq!(s.ready, Some(false));
        assert_eq!(condition(&s, "AllMembersReady"), ConditionStatus::False);
    }

    #[test]
    fn a_cluster_without_supervisor_is_shown_stopped_despite_fresh_leases() {
        let e = etcd();
        let config = config(&e);
        let leases = fresh_leases(&config);
        let last_written = supervised(&e, &EtcdStatus::default(), &leases, &config, &[]);
        assert_eq!(last_written.ready, Some(true));
        let s = stopped_status(&e, &last_written, &leases, Some(&config), None, None, now());
        assert_eq!(s.ready, Some(false));
        assert_eq!(condition(&s, "Ready"), ConditionStatus::False);
        assert_eq!(condition(&s, "AllMembersReady"), ConditionStatus::False);
        assert_eq!((s.current_replicas, s.ready_replicas), (0, 0));
        assert_eq!(
            s.last_operation.as_ref().map(|op| op.state),
            Some(LastOperationState::Succeeded),
            "what the last run did is kept"
        );
        assert_eq!(s.last_operation, last_written.last_operation);
    }
}
