//! The local controller of one cluster: it keeps the applied manifest true on this machine
//! (configuration written, one agent per desired member, crashed agents restarted) and writes
//! the cluster's status from the member leases, exactly as the operator does on Kubernetes.

use crate::agents::Agents;
use crate::etcd_view::{EtcdView, EtcdViewPoller};
use crate::object::{load_object, load_record, save_record};
use crate::ports;
use crate::render::{base_ports, render_cluster_config};
use crate::state_dir::ClusterDir;
use crate::status::{MemberProcess, StatusInputs, compute_status};
use crate::{LocalError, probe};
use quorate_api::annotations::HIBERNATE_WITHOUT_FINAL_SNAPSHOT;
use quorate_api::status::EtcdStatus;
use quorate_coord::{Coordination, FileCoordination, json_file};
use quorate_core::backup_ready::BackupLeases;
use quorate_core::cluster_config::ClusterConfig;
use quorate_core::components::cluster_config::annotation;
use quorate_core::etcd_version::{MemberVersions, VersionDecision};
use quorate_core::hibernation::{self, Hibernation, HibernationStep};
use quorate_core::lease::SnapshotLease;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the supervisor reconciles.
pub const TICK: Duration = Duration::from_millis(250);

/// `lastOperation.runID` of the supervisor with process ID `pid`: tells a status written by
/// the running supervisor from one a previous run left behind.
pub fn run_id(pid: u32) -> String {
    format!("local-{pid}")
}

/// The supervisor of one local cluster.
pub struct Supervisor {
    dir: ClusterDir,
    coord: FileCoordination,
    agents: Agents,
    written_config: Option<ClusterConfig>,
    status: EtcdStatus,
    run_id: String,
    etcd_view: EtcdViewPoller,
}

impl Supervisor {
    /// A supervisor for the cluster in `dir`, starting agents from `quorate_bin`. Must be
    /// called inside a Tokio runtime (etcd is polled in the background).
    pub fn new(dir: ClusterDir, quorate_bin: PathBuf, etcd_bin: Option<PathBuf>) -> Self {
        let coord = FileCoordination::new(dir.root());
        let status = json_file::read(&dir.status(), "cluster status")
            .ok()
            .flatten()
            .unwrap_or_default();
        let run_id = run_id(std::process::id());
        Self {
            agents: Agents::new(dir.clone(), quorate_bin, etcd_bin),
            dir,
            coord,
            written_config: None,
            status,
            run_id,
            etcd_view: EtcdViewPoller::start(),
        }
    }

    /// Reconciles until `shutdown` turns true, then stops every member cleanly.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), LocalError> {
        loop {
            if let Err(e) = self.tick().await {
                tracing::error!(error = %e, "reconcile failed");
            }
            if tokio::time::timeout(TICK, shutdown.wait_for(|stop| *stop))
                .await
                .is_ok()
            {
                break;
            }
        }
        tracing::info!("stopping all members");
        let leader = self.leader_by_leases().await;
        self.agents
            .stop_all(Duration::from_secs(15), leader.as_deref())
            .await;
        Ok(())
    }

    /// The member whose lease says it leads, if one does.
    async fn leader_by_leases(&self) -> Option<String> {
        use quorate_coord::Coordination;
        let coord = quorate_coord::FileCoordination::new(self.dir.root());
        let leases = coord.member_leases().await.ok()?;
        leases
            .into_iter()
            .find(|l| {
                l.holder_identity
                    .as_deref()
                    .is_some_and(|h| h.ends_with(":Leader"))
            })
            .map(|l| l.name)
    }

    /// One reconcile pass.
    pub async fn tick(&mut self) -> Result<(), LocalError> {
        let now = Instant::now();
        let etcd = load_object(&self.dir)?;
        let mut record = load_record(&self.dir)?;
        let desired = quorate_api::names::member_lease_names(&etcd);
        let view = self.etcd_view.latest();

        let before = record.clone();
        if let Some(started) = view.started_members() {
            // Only the leader's word changes who is in the cluster.
            record.etcd_members = started;
        }
        if etcd.spec.replicas > 0 {
            record.hibernation = None;
        }
        let to_run = record.members_to_run(&desired);
        ports::assign(
            &mut record.ports,
            &to_run,
            base_ports(&etcd),
            ports::free_port,
        )?;
        if record.bootstrap_members.is_empty()
            && !desired.is_empty()
            && !self.cluster_existed().await
        {
            record.bootstrap_members = desired.clone();
        }

        let leases = self.coord.member_leases().await?;
        let version = self.etcd_version_step(&etcd, &mut record, &desired, &leases);
        let config = render_cluster_config(&etcd, &record, &self.dir)?;
        if self.written_config.as_ref() != Some(&config) {
            self.coord.write_cluster_config(&config)?;
            self.written_config = Some(config.clone());
        }
        self.etcd_view.set_config(&config);
        if etcd.spec.replicas == 0 {
            Self::hibernate(&etcd, &config, &mut record, &leases);
        }
        if record != before {
            save_record(&self.dir, &record)?;
        }

        for (member, ended) in self.agents.reap(now) {
            tracing::info!(%member, ?ended, "agent ended");
        }
        let to_run = record.members_to_run(&desired);
        let running: Vec<String> = self.agents.running().cloned().collect();
        for member in running.iter().filter(|m| !to_run.contains(m)) {
            self.agents.stop(member, Duration::from_secs(15)).await;
        }
        let mut start_errors = Vec::new();
        for member in &to_run {
            let port = record.ports[member].agent;
            let tls = config.agent_tls.as_ref();
            if let Err(e) = self.agents.ensure_started(member, now, port, tls).await {
                start_errors.push(format!("starting the agent of {member}: {e}"));
            }
        }
        self.trash_removed_members(&to_run, &view);

        let mut processes = BTreeMap::new();
        for member in &desired {
            let port = record.ports[member].agent;
            let running = self.agents.is_running(member);
            let ready = running
                && probe::agent_ready(port, config.agent_tls.as_ref(), Duration::from_millis(300))
                    .await;
            processes.insert(member.clone(), MemberProcess { running, ready });
        }
        let backup = self.snapshot_leases(&config, &mut record).await?;
        self.status = compute_status(StatusInputs {
            etcd: &etcd,
            previous: &self.status,
            leases: &leases,
            config: &config,
            processes: &processes,
            etcd_view: &view,
            hibernation: record.hibernation.as_ref(),
            backup,
            etcd_version: version.as_ref(),
            start_errors: &start_errors,
            run_id: &self.run_id,
            now: jiff::Timestamp::now(),
        });
        json_file::write_atomic(&self.dir.status(), &self.status)?;
        Ok(())
    }

    /// The etcd version the members run in this pass (core `etcd_version::decide`): the
    /// record's step, or the next one towards the object's requested version once every
    /// member's lease shows etcd through the step; recorded in `record`. A request refused
    /// now (it was accepted at `apply`) keeps the step and says why.
    fn etcd_version_step(
        &self,
        etcd: &quorate_api::Etcd,
        record: &mut crate::record::ClusterRecord,
        desired: &[String],
        leases: &[quorate_core::lease::MemberLease],
    ) -> Option<VersionDecision> {
        let requested = quorate_api::etcd_version::requested(etcd).ok().flatten();
        let running = record.etcd_version.or(requested);
        let members = MemberVersions::from_leases(desired, leases);
        let without_snapshot = quorate_api::etcd_version::without_snapshot(etcd);
        match quorate_core::etcd_version::decide(requested, running, &members, without_snapshot) {
            Ok(decision) => {
                if record.etcd_version != Some(decision.run) {
                    tracing::info!(
                        cluster = %self.dir.root().display(),
                        version = %decision.run,
                        progress = decision.progress.as_deref().unwrap_or_default(),
                        "etcd version step"
                    );
                }
                record.etcd_version = Some(decision.run);
                Some(decision)
            }
            Err(refused) => {
                tracing::warn!(%refused, "etcd version change refused");
                None
            }
        }
    }

    /// A hibernation in progress: the members stop once the backup leader reports the final
    /// snapshot stored (or without one when there is no store, or a person overrides it).
    fn hibernate(
        etcd: &quorate_api::Etcd,
        config: &ClusterConfig,
        record: &mut crate::record::ClusterRecord,
        leases: &[quorate_core::lease::MemberLease],
    ) {
        if record.hibernated() {
            return;
        }
        let now = jiff::Timestamp::now();
        if record.bootstrap_members.is_empty() {
            // The cluster never formed: there is nothing to snapshot or stop.
            record.hibernation = Some(Hibernation::Hibernated {
                final_snapshot_revision: None,
                warning: Some("no member had started: nothing to snapshot".into()),
                at: now,
            });
            return;
        }
        let request = config.hibernation_request.clone().unwrap_or_default();
        let overridden =
            annotation(etcd, HIBERNATE_WITHOUT_FINAL_SNAPSHOT).as_deref() == Some("true");
        let (HibernationStep::Wait(state) | HibernationStep::Stop(state)) =
            hibernation::next_step(&request, config.backup.is_some(), overridden, leases, now);
        if let Hibernation::Hibernated { warning, .. } = &state {
            tracing::info!(?warning, "hibernating: stopping every member");
        }
        record.hibernation = Some(state);
    }

    /// Moves the data of members etcd removed to the cluster's trash (deleted by
    /// `down --purge`): members that neither run nor should, whose agent ended as removed or
    /// whom the leader positively does not list.
    fn trash_removed_members(&self, to_run: &[String], view: &EtcdView) {
        for member in self.dir.member_dirs() {
            if to_run.contains(&member) || self.agents.is_running(&member) {
                continue;
            }
            if !self.dir.member_removed_marker(&member).exists() && !view.leader_lacks(&member) {
                continue;
            }
            match self
                .dir
                .trash_member(&member, jiff::Timestamp::now().as_second())
            {
                Ok(Some(trash)) => {
                    tracing::info!(%member, trash = %trash.display(), "member left the cluster; its data moved to the trash")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%member, error = %e, "moving a removed member's data to the trash failed")
                }
            }
        }
    }

    /// The snapshot leases of a cluster with backups, created (as druid creates them) when missing.
    async fn snapshot_leases(
        &self,
        config: &ClusterConfig,
        record: &mut crate::record::ClusterRecord,
    ) -> Result<Option<BackupLeases>, LocalError> {
        let Some(backup) = &config.backup else {
            return Ok(None);
        };
        let mut leases = Vec::new();
        for name in [&backup.full_snapshot_lease, &backup.delta_snapshot_lease] {
            let lease = match self.coord.snapshot_lease(name).await? {
                Some(lease) => lease,
                None => {
                    let lease = SnapshotLease::new(name.clone());
                    self.coord.put_snapshot_lease(&lease).await?;
                    lease
                }
            };
            leases.push(lease);
        }
        if record.snapshot_leases_created.is_none() {
            record.snapshot_leases_created = Some(jiff::Timestamp::now());
            save_record(&self.dir, record)?;
        }
        let delta = leases.pop();
        Ok(Some(BackupLeases {
            full: leases.pop(),
            delta,
            full_created: record.snapshot_leases_created,
        }))
    }

    /// Whether any member lease shows a cluster ID, i.e. the etcd cluster was formed before.
    async fn cluster_existed(&self) -> bool {
        self.coord.member_leases().await.is_ok_and(|leases| {
            leases.iter().any(|l| {
                l.holder_identity
                    .as_deref()
                    .and_then(|h| h.parse::<quorate_core::lease::HolderIdentity>().ok())
                    .is_some_and(|h| h.cluster_id.is_some())
            })
        })
    }
}
