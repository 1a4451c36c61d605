//! The local-mode commands behind `quorate up|apply|down|get|members|endpoints`.

use crate::object::{self, Applied, load_object, load_record};
use crate::ports;
use crate::state_dir::{ClusterDir, list_clusters};
use crate::supervisor::Supervisor;
use crate::{LocalError, lock};
use quorate_api::annotations::ETCD_VERSION;
use quorate_api::status::{ConditionStatus, EtcdStatus};
use quorate_api::{Etcd, EtcdVersion};
use quorate_coord::json_file;
use quorate_etcd::binaries::EtcdBinaries;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;

/// Where things are and which binaries to run.
#[derive(Clone, Debug)]
pub struct LocalContext {
    /// The state directory holding every local cluster.
    pub state_dir: PathBuf,
    /// The `quorate` binary agents are started from.
    pub quorate_bin: PathBuf,
    /// An etcd binary the user chose (`--etcd-binary`), used for its own version; other
    /// versions come from the standard places (`quorate_etcd::binaries`).
    pub etcd_bin: Option<PathBuf>,
}

impl LocalContext {
    /// Where each etcd version's binary is found.
    pub fn etcd_binaries(&self) -> EtcdBinaries {
        EtcdBinaries::with_pinned(self.etcd_bin.clone())
    }

    /// The directory of cluster `name`.
    pub fn cluster(&self, name: &str) -> ClusterDir {
        ClusterDir::new(&self.state_dir, name)
    }

    /// The directory of an existing cluster, or `NotFound`.
    pub fn existing(&self, name: &str) -> Result<ClusterDir, LocalError> {
        let dir = self.cluster(name);
        if dir.exists() {
            Ok(dir)
        } else {
            Err(LocalError::NotFound {
                name: name.to_string(),
            })
        }
    }
}

/// Reads and validates a manifest file.
pub fn read_manifest(file: &Path) -> Result<Etcd, LocalError> {
    let (text, source) = if file == Path::new("-") {
        (read_stdin_manifest()?, "<stdin>".to_string())
    } else {
        let text = std::fs::read_to_string(file).map_err(|source| LocalError::Io {
            action: "read",
            path: file.display().to_string(),
            source,
        })?;
        (text, file.display().to_string())
    };
    let manifest = quorate_api::manifest::read_single_etcd_manifest(&text, &source)?;
    // Ignored fields are said, as kubectl says them: a typo must not pass unnoticed.
    for unknown in &manifest.unknown_fields {
        eprintln!("Warning: {source}: {unknown}");
    }
    quorate_api::validate::validate(&manifest.etcd)?;
    Ok(manifest.etcd)
}

/// The most a manifest on standard input may hold (an `Etcd` is a few KiB).
pub const STDIN_MANIFEST_LIMIT: u64 = 4 << 20;

/// Reads a manifest from standard input (`-f -`, as kubectl takes it), once per process:
/// a second `-` would read nothing, so it is refused rather than taken as an empty manifest.
fn read_stdin_manifest() -> Result<String, LocalError> {
    use std::io::Read;
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if TAKEN.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(LocalError::Stdin(
            "standard input was already read for another option; give one of them a file",
        ));
    }
    let mut text = String::new();
    std::io::stdin()
        .lock()
        .take(STDIN_MANIFEST_LIMIT + 1)
        .read_to_string(&mut text)
        .map_err(|source| LocalError::Io {
            action: "read",
            path: "standard input".to_string(),
            source,
        })?;
    if text.len() as u64 > STDIN_MANIFEST_LIMIT {
        return Err(LocalError::Stdin(
            "standard input holds more than 4 MiB, more than any Etcd manifest; pipe the manifest alone",
        ));
    }
    if text.trim().is_empty() {
        return Err(LocalError::Stdin(
            "standard input is empty; pipe an Etcd manifest in (e.g. `cat etcd.yaml | quorate up -f -`)",
        ));
    }
    Ok(text)
}

/// Settles the etcd version `etcd` asks for (its target; without the annotation, the target
/// the stored object names, or for a new cluster the default), checks it against the version
/// the members run now (the record's step, core `etcd_version::decide`), records it in
/// `etcd`'s annotation, and checks that the binary of every step towards it is here: a
/// refused version change or a missing or mismatched binary fails before anything is stored or
/// started. The supervisor then moves the members step by step.
fn settle_etcd_version(
    ctx: &LocalContext,
    dir: &ClusterDir,
    etcd: &mut Etcd,
) -> Result<EtcdVersion, LocalError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let stored_target = dir.manifest().exists().then(|| {
        load_object(dir)
            .ok()
            .and_then(|stored| quorate_api::etcd_version::requested(&stored).ok().flatten())
            .unwrap_or(EtcdVersion::UNRECORDED)
    });
    let running = stored_target.map(|target| {
        load_record(dir)
            .ok()
            .and_then(|record| record.etcd_version)
            .unwrap_or(target)
    });
    let requested =
        quorate_api::etcd_version::requested(etcd).map_err(|reason| LocalError::EtcdVersion {
            name: name.clone(),
            reason,
        })?;
    let version =
        quorate_core::etcd_version::decide(requested.or(stored_target), running, &[], false)
            .map_err(|refused| LocalError::EtcdVersion {
                name,
                reason: refused.to_string(),
            })?
            .target;
    if let Some(pinned) = &ctx.etcd_bin {
        let found = quorate_etcd::binaries::binary_version(pinned);
        if found != Some(version) {
            return Err(LocalError::EtcdBinaryVersion {
                path: pinned.display().to_string(),
                found: found.map_or_else(
                    || "not a runnable etcd".to_string(),
                    |v| format!("etcd {v}"),
                ),
                version,
            });
        }
    }
    let steps = running.map_or_else(Vec::new, |running| running.steps_to(version));
    for step in steps.into_iter().chain([version]) {
        ctx.etcd_binaries()
            .etcd(step)
            .map_err(|missing| LocalError::EtcdMissing {
                path: missing.to_string(),
            })?;
    }
    etcd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ETCD_VERSION.to_string(), version.to_string());
    Ok(version)
}

/// Applies `etcd` to the state directory (creating the cluster if new) and checks that the ports
/// of members that are not running yet are free. Nothing runs yet.
///
/// Ports the manifest moved are taken up while the cluster is stopped, except a started
/// member's peer port, which etcd's membership knows it by for life; the ones kept are in
/// [`Applied::kept_ports`].
pub fn prepare(ctx: &LocalContext, mut etcd: Etcd) -> Result<(ClusterDir, Applied), LocalError> {
    let name = etcd.metadata.name.clone().unwrap_or_default();
    let dir = ctx.cluster(&name);
    settle_etcd_version(ctx, &dir, &mut etcd)?;
    let running = lock::running_supervisor(&dir).is_some();
    let mut applied = object::apply(&dir, etcd, jiff::Timestamp::now(), rand::random())?;
    object::ensure_agent_token(&dir)?;
    let etcd = load_object(&dir)?;
    let base = crate::render::base_ports(&etcd);
    let desired = quorate_api::names::member_lease_names(&etcd);
    if running {
        applied.kept_ports = ports::moved(&load_record(&dir)?.ports, &desired, base);
    } else {
        let mut record = load_record(&dir)?;
        if etcd.spec.replicas > 0 {
            // A wake: the members start on their data again, then the leaving ones go.
            record.hibernation = None;
        }
        let members = record.members_to_run(&desired);
        for moved in ports::moved(&record.ports, &members, base) {
            let started = dir.member_data(&moved.member).join("member").is_dir();
            let Some(ports) = record.ports.get_mut(&moved.member) else {
                continue;
            };
            match moved.field {
                "spec.etcd.serverPort" if started => applied.kept_ports.push(moved),
                "spec.etcd.serverPort" => ports.peer = moved.wanted,
                "spec.etcd.clientPort" => ports.client = moved.wanted,
                _ => ports.agent = moved.wanted,
            }
        }
        ports::assign(&mut record.ports, &members, base, ports::free_port)?;
        // A member whose agent or etcd still runs (the supervisor or the agent crashed) holds
        // its own ports: the new supervisor adopts the agent, a new agent adopts etcd.
        let serving: Vec<&String> = members
            .iter()
            .filter(|m| crate::orphans::member_runs(&dir, m))
            .collect();
        for member in &members {
            if let Some(ports) = record.ports.get_mut(member)
                && !serving.contains(&member)
            {
                ports::free_metrics_port(ports);
            }
        }
        object::save_record(&dir, &record)?;
        for member in members.iter().filter(|m| !serving.contains(m)) {
            ports::check_available(member, &record.ports[member])?;
        }
    }
    Ok((dir, applied))
}

/// Runs the supervisor of `name` in this process until `shutdown` turns true.
pub async fn supervise(
    ctx: &LocalContext,
    name: &str,
    shutdown: watch::Receiver<bool>,
) -> Result<(), LocalError> {
    let dir = ctx.existing(name)?;
    let _lock = lock::acquire(&dir, name)?;
    Supervisor::new(dir, ctx.quorate_bin.clone(), ctx.etcd_bin.clone())
        .run(shutdown)
        .await
}

/// Starts a detached supervisor for `name` (a `quorate supervise` process in its own session).
pub fn spawn_supervisor(ctx: &LocalContext, name: &str) -> Result<u32, LocalError> {
    let dir = ctx.existing(name)?;
    let log_path = dir.supervisor_log();
    let io = |source| LocalError::Io {
        action: "start the supervisor, log",
        path: log_path.display().to_string(),
        source,
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io)?;
    let mut command = std::process::Command::new(&ctx.quorate_bin);
    command
        .arg("--state-dir")
        .arg(&ctx.state_dir)
        .arg("supervise")
        .arg(name)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log);
    if let Some(pinned) = &ctx.etcd_bin {
        command.arg("--etcd-binary").arg(pinned);
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe; it detaches the supervisor from our terminal.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = command.spawn().map_err(io)?;
    Ok(child.id())
}

/// Waits until the cluster's status says every member is ready and etcd's membership is the
/// one `spec.replicas` asks for (or the cluster hibernated), or `timeout` passes.
/// `supervisor` is the process that runs (or is starting to run) the cluster's supervisor:
/// the wait ends early only on evidence that it will not, that no supervisor holds the
/// cluster's lock and that process is gone; a slow start is waited for.
pub async fn wait_until_ready(
    ctx: &LocalContext,
    name: &str,
    generation: i64,
    supervisor: u32,
    timeout: Duration,
) -> Result<EtcdStatus, LocalError> {
    let dir = ctx.existing(name)?;
    let start = tokio::time::Instant::now();
    loop {
        let status = read_status(&dir);
        let all_ready = condition(&status, "AllMembersReady") == Some(ConditionStatus::True);
        let scaled = condition(&status, "ScaleOperationComplete") == Some(ConditionStatus::True);
        // A change that restarts the members is applied once every one runs it.
        let updated = condition(&status, "AllMembersUpdated") != Some(ConditionStatus::False);
        let replicas = load_object(&dir)?.spec.replicas;
        // Only a status the running supervisor wrote counts, not one a previous run left.
        let current = lock::running_supervisor(&dir).map(crate::supervisor::run_id);
        let fresh = current.is_some()
            && status.last_operation.as_ref().map(|op| &op.run_id) == current.as_ref();
        let settled =
            fresh && status.observed_generation == Some(generation) && status.ready == Some(true);
        if settled && scaled && updated && (all_ready || replicas == 0) {
            return Ok(status);
        }
        if current.is_none() && process_gone(supervisor) && lock::running_supervisor(&dir).is_none()
        {
            return Err(LocalError::SupervisorGone {
                name: name.to_string(),
                pid: supervisor,
                log: dir.supervisor_log().display().to_string(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(LocalError::Timeout {
                what: format!("cluster {name:?} becoming ready"),
                seconds: timeout.as_secs(),
                hint: format!(
                    "see `quorate get etcd {name} -o yaml` and the logs in {}",
                    dir.root().display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether process `pid` has ended: reaped here when it is this process's child (a
/// supervisor `spawn_supervisor` started), otherwise no longer known to the kernel.
fn process_gone(pid: u32) -> bool {
    use nix::errno::Errno;
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let Ok(raw) = i32::try_from(pid) else {
        return true;
    };
    let pid = nix::unistd::Pid::from_raw(raw);
    match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => true,
        Ok(_) => false,
        Err(_) => nix::sys::signal::kill(pid, None) == Err(Errno::ESRCH),
    }
}

/// The status of a cluster as its supervisor last wrote it.
pub fn read_status(dir: &ClusterDir) -> EtcdStatus {
    json_file::read(&dir.status(), "cluster status")
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The status of condition `type_`, if present.
pub fn condition(status: &EtcdStatus, type_: &str) -> Option<ConditionStatus> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status)
}

/// The cluster objects with their status, for `get`.
pub fn get(ctx: &LocalContext, name: Option<&str>) -> Result<Vec<Etcd>, LocalError> {
    let names = match name {
        Some(n) => vec![n.to_string()],
        None => list_clusters(&ctx.state_dir),
    };
    names
        .iter()
        .map(|n| {
            let dir = ctx.existing(n)?;
            let mut etcd = load_object(&dir)?;
            let status = read_status(&dir);
            etcd.status = Some(if lock::running_supervisor(&dir).is_some() {
                status
            } else {
                status_without_supervisor(&dir, &etcd, &status)?
            });
            Ok(etcd)
        })
        .collect()
}

/// The status of a cluster whose supervisor does not run (stopped with `quorate down`, or
/// killed): agents and etcd that outlived a killed supervisor are watched by nobody, so the
/// status is recomputed with every member stopped rather than shown as the supervisor last
/// wrote it.
fn status_without_supervisor(
    dir: &ClusterDir,
    etcd: &Etcd,
    last_written: &EtcdStatus,
) -> Result<EtcdStatus, LocalError> {
    use quorate_coord::Coordination;
    let coord = quorate_coord::FileCoordination::new(dir.root());
    // File coordination does plain file I/O behind its async interface; nothing here waits
    // on the runtime.
    let leases = futures::executor::block_on(coord.member_leases())?;
    let config = crate::render::read_config(dir).ok();
    let backup = match config.as_ref().and_then(|c| c.backup.as_ref()) {
        Some(b) => Some(quorate_core::backup_ready::BackupLeases {
            full: futures::executor::block_on(coord.snapshot_lease(&b.full_snapshot_lease))?,
            delta: futures::executor::block_on(coord.snapshot_lease(&b.delta_snapshot_lease))?,
            full_created: load_record(dir)?.snapshot_leases_created,
        }),
        None => None,
    };
    Ok(crate::status::stopped_status(
        etcd,
        last_written,
        &leases,
        config.as_ref(),
        backup,
        load_record(dir)?.hibernation.as_ref(),
        jiff::Timestamp::now(),
    ))
}

/// Stops cluster `name` (data kept), deleting its state directory too when `purge`. Returns
/// the bucket directory `purge` kept because it lies outside the state directory (a store
/// Secret's `hostPath`), to say so.
pub async fn down(
    ctx: &LocalContext,
    name: &str,
    purge: bool,
    timeout: Duration,
) -> Result<Option<std::path::PathBuf>, LocalError> {
    let dir = ctx.existing(name)?;
    if let Some(pid) = lock::running_supervisor(&dir) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = tokio::time::Instant::now() + timeout;
        while lock::running_supervisor(&dir).is_some() {
            if tokio::time::Instant::now() >= deadline {
                return Err(LocalError::Timeout {
                    what: format!("supervisor {pid} of {name:?} stopping"),
                    seconds: timeout.as_secs(),
                    hint: format!(
                        "kill it with `kill -9 {pid}`, then run `quorate down {name}` again: \
                         its agents and etcd outlive it and `down` stops them"
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // etcd outlives a crashed supervisor; stopping the cluster means it too.
    crate::orphans::stop_all(&dir, timeout).await?;
    if !purge {
        return Ok(None);
    }
    let kept = load_object(&dir)
        .ok()
        .and_then(|etcd| crate::bucket::kept_outside(&etcd, &dir));
    std::fs::remove_dir_all(dir.root()).map_err(|source| LocalError::Io {
        action: "delete",
        path: dir.root().display().to_string(),
        source,
    })?;
    Ok(kept)
}

/// Client URLs of the cluster's desired members, comma-separated for `etcdctl --endpoints`.
pub fn endpoints(ctx: &LocalContext, name: &str) -> Result<String, LocalError> {
    let dir = awake(ctx, name)?;
    let config = crate::render::read_config(&dir)?;
    Ok(config.desired_client_urls().join(","))
}

/// The directory of cluster `name`, unless it hibernates (then there is no etcd to reach).
pub fn awake(ctx: &LocalContext, name: &str) -> Result<ClusterDir, LocalError> {
    let dir = ctx.existing(name)?;
    if load_record(&dir)?.hibernated() && load_object(&dir)?.spec.replicas == 0 {
        return Err(LocalError::Hibernated {
            name: name.to_string(),
        });
    }
    Ok(dir)
}

/// `get`'s table of cluster `name` (or of every cluster), as `kubectl get etcd` prints it.
pub fn table(ctx: &LocalContext, name: Option<&str>, wide: bool) -> Result<String, LocalError> {
    let items = get(ctx, name)?;
    Ok(crate::table::render(&items, wide, jiff::Timestamp::now()))
}

/// Where a member of a local cluster keeps its data and how its etcd is addressed: what a tool
/// writing that member's data directory (`quorate restore --up`) needs to write it as the
/// member's agent would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalMember {
    /// etcd's data directory of the member.
    pub data_dir: PathBuf,
    /// The member's peer URL.
    pub peer_url: String,
    /// The cluster's `--initial-cluster-token` (also the wrong-volume guard's content).
    pub cluster_token: String,
}

/// Member `member` of the prepared local cluster `name`; the member must have been given ports
/// (every desired member has, once [`prepare`] ran).
pub fn local_member(
    ctx: &LocalContext,
    name: &str,
    member: &str,
) -> Result<LocalMember, LocalError> {
    let dir = ctx.cluster(name);
    let record = load_record(&dir)?;
    Ok(LocalMember {
        data_dir: dir.member_data(member),
        peer_url: format!("http://127.0.0.1:{}", record.ports[member].peer),
        cluster_token: record.cluster_token(name),
    })
}

/// The log file of cluster `name`: its supervisor's, or member `member`'s etcd log (its agent's
/// with `agent`). An unknown member is an error naming the members there are.
pub fn log_file(
    ctx: &LocalContext,
    name: &str,
    member: Option<&str>,
    agent: bool,
) -> Result<PathBuf, LocalError> {
    let dir = ctx.existing(name)?;
    let Some(member) = member else {
        return Ok(dir.supervisor_log());
    };
    let members = dir.member_dirs();
    if !members.iter().any(|m| m == member) {
        return Err(LocalError::UnknownMember {
            name: name.to_string(),
            member: member.to_string(),
            members: members.join(", "),
        });
    }
    let file = if agent { "agent.log" } else { "etcd.log" };
    Ok(dir.member(member).join(file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A child that runs until its stdin closes.
    fn child() -> std::process::Child {
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn a_cluster(state: &Path) -> LocalContext {
        let ctx = LocalContext {
            state_dir: state.to_path_buf(),
            quorate_bin: PathBuf::from("/nonexistent/quorate"),
            etcd_bin: None,
        };
        let dir = ctx.cluster("c");
        std::fs::create_dir_all(dir.root()).unwrap();
        let etcd = quorate_api::manifest::parse_etcd_manifest(
            "apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\nmetadata:\n  name: c\n  \
             namespace: default\nspec:\n  replicas: 1\n  labels:\n    app: c\n  etcd: {}\n  backup: {}\n",
            "test",
        )
        .unwrap();
        object::store_object(&dir, &etcd).unwrap();
        ctx
    }

    #[test]
    fn a_process_is_gone_once_it_ended_child_or_not() {
        let mut running = child();
        assert!(!process_gone(running.id()));
        assert!(!process_gone(std::process::id()), "not a child, alive");
        // Its stdin closed, `cat` ends; polled (not waited for) so `process_gone` reaps it.
        drop(running.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !process_gone(running.id()) {
            assert!(std::time::Instant::now() < deadline, "cat ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        // Reaped by `process_gone`: the kernel no longer knows it.
        assert!(process_gone(running.id()));
        assert!(process_gone(u32::MAX));
        // Already reaped: `wait` has nothing left to collect.
        assert!(running.wait().is_err());
    }

    #[tokio::test]
    async fn readiness_waits_for_a_slow_supervisor_and_stops_once_it_is_gone() {
        let state = tempfile::tempdir().unwrap();
        let ctx = a_cluster(state.path());
        // Alive but not (yet) holding the lock: only the overall deadline ends the wait, also
        // past the 5 s after which a supervisor without the lock used to count as failed.
        let mut slow = child();
        let err = wait_until_ready(&ctx, "c", 1, slow.id(), Duration::from_secs(6))
            .await
            .unwrap_err();
        assert!(matches!(err, LocalError::Timeout { .. }), "{err}");
        // Gone, and no supervisor holds the lock: said at once, with the log to read.
        drop(slow.stdin.take());
        let started = std::time::Instant::now();
        let err = wait_until_ready(&ctx, "c", 1, slow.id(), Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(30), "{err}");
        let LocalError::SupervisorGone { pid, log, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*pid, slow.id());
        assert!(log.ends_with("supervisor.log"), "{err}");
        assert!(slow.wait().is_err(), "reaped by the wait");
    }
}
