//! The agent processes of one local cluster: started as `quorate agent` children, restarted with
//! backoff when they crash, left down when their member was removed on purpose, and stopped
//! cleanly (SIGTERM, which stops etcd cleanly) on scale-down or shutdown.

use crate::state_dir::ClusterDir;
use quorate_core::agent_exit::AGENT_EXIT_REMOVED;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How an agent process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEnded {
    /// The member was removed from the cluster; it must not be restarted.
    Removed,
    /// Crashed or was killed; it will be restarted.
    Crashed(String),
}

struct Running {
    child: Child,
    started: Instant,
}

/// The agents of one cluster.
pub struct Agents {
    dir: ClusterDir,
    quorate_bin: PathBuf,
    etcd_bin: Option<PathBuf>,
    running: BTreeMap<String, Running>,
    /// Consecutive quick crashes per member, for backoff.
    crashes: BTreeMap<String, (u32, Instant)>,
}

impl Agents {
    /// Agents of the cluster in `dir`, started from `quorate_bin`, with `etcd_bin` pinned for its
    /// version when the user chose one.
    pub fn new(dir: ClusterDir, quorate_bin: PathBuf, etcd_bin: Option<PathBuf>) -> Self {
        Self {
            dir,
            quorate_bin,
            etcd_bin,
            running: BTreeMap::new(),
            crashes: BTreeMap::new(),
        }
    }

    /// Names of members whose agent process is running.
    pub fn running(&self) -> impl Iterator<Item = &String> {
        self.running.keys()
    }

    /// Whether `member`'s agent runs.
    pub fn is_running(&self, member: &str) -> bool {
        self.running.contains_key(member)
    }

    /// Starts `member`'s agent unless it runs, was removed on purpose, or is backing off.
    pub fn ensure_started(&mut self, member: &str, now: Instant) -> std::io::Result<()> {
        if self.running.contains_key(member) || self.dir.member_removed_marker(member).exists() {
            return Ok(());
        }
        if let Some((count, at)) = self.crashes.get(member) {
            let backoff = Duration::from_millis(500) * 2u32.saturating_pow((*count).min(6));
            if now < *at + backoff {
                return Ok(());
            }
        }
        let member_dir = self.dir.member(member);
        std::fs::create_dir_all(&member_dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(member_dir.join("agent.log"))?;
        let mut command = Command::new(&self.quorate_bin);
        command
            .arg("agent")
            .arg("--cluster-dir")
            .arg(self.dir.root())
            .arg("--member")
            .arg(member)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        if let Some(pinned) = &self.etcd_bin {
            command.arg("--etcd-binary").arg(pinned);
        }
        let cgroup_procs = member_cgroup_procs(self.dir.root(), member)?;
        // SAFETY: prctl, open and write are async-signal-safe; the path was prepared before the
        // fork, so nothing here allocates or touches memory shared with the parent.
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)?;
                if let Some(procs) = &cgroup_procs {
                    let fd = nix::fcntl::open(
                        procs.as_c_str(),
                        nix::fcntl::OFlag::O_WRONLY,
                        nix::sys::stat::Mode::empty(),
                    )?;
                    nix::unistd::write(&fd, b"0")?;
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        tracing::info!(%member, pid = ?child.id(), "agent started");
        self.running.insert(
            member.to_string(),
            Running {
                child,
                started: now,
            },
        );
        Ok(())
    }

    /// Collects agents that exited since the last call.
    pub fn reap(&mut self, now: Instant) -> Vec<(String, AgentEnded)> {
        let mut ended = Vec::new();
        for (member, agent) in &mut self.running {
            if let Ok(Some(status)) = agent.child.try_wait() {
                let how = if status.code() == Some(i32::from(AGENT_EXIT_REMOVED)) {
                    AgentEnded::Removed
                } else {
                    AgentEnded::Crashed(status.to_string())
                };
                ended.push((member.clone(), how, agent.started));
            }
        }
        ended
            .into_iter()
            .map(|(member, how, started)| {
                self.running.remove(&member);
                match &how {
                    AgentEnded::Removed => {
                        let _ = std::fs::write(self.dir.member_removed_marker(&member), b"removed from the cluster\n");
                        tracing::warn!(%member, "member was removed from the cluster; not restarting it");
                    }
                    AgentEnded::Crashed(why) => {
                        let quick = now.duration_since(started) < Duration::from_secs(30);
                        let count = if quick { self.crashes.get(&member).map_or(1, |(c, _)| c + 1) } else { 1 };
                        self.crashes.insert(member.clone(), (count, now));
                        tracing::warn!(%member, %why, "agent exited; restarting it");
                    }
                }
                (member, how)
            })
            .collect()
    }

    /// Stops `member`'s agent (and with it etcd) cleanly, waiting up to `grace`.
    pub async fn stop(&mut self, member: &str, grace: Duration) {
        if let Some(mut agent) = self.running.remove(member) {
            terminate(&mut agent.child, grace).await;
        }
    }

    /// Stops every agent: the followers together, then `leader`. A stopping etcd leader hands
    /// leadership to a connected peer first and waits up to etcd's request timeout (7 s) for
    /// it; stopped alongside its followers it picks one that is going away and waits that out,
    /// while with no peer left it stops at once.
    pub async fn stop_all(&mut self, grace: Duration, leader: Option<&str>) {
        let members: Vec<String> = self.running.keys().cloned().collect();
        let stops = members
            .iter()
            .filter(|m| Some(m.as_str()) != leader)
            .filter_map(|m| self.running.remove(m))
            .map(|mut agent| async move {
                terminate(&mut agent.child, grace).await;
            });
        futures::future::join_all(stops).await;
        if let Some(mut agent) = leader.and_then(|l| self.running.remove(l)) {
            terminate(&mut agent.child, grace).await;
        }
    }
}

/// Environment variable naming a cgroup v2 directory under which each member's agent (and so
/// its etcd) runs in a cgroup of its own, `<root>/<cluster>.<member>`: to limit or account one
/// member's resources, or to match its traffic (the fault suite cuts a member off the network
/// this way). Unset: agents stay in the supervisor's cgroup.
pub const MEMBER_CGROUP_ROOT_ENV: &str = "QUORATE_MEMBER_CGROUP_ROOT";

/// The `cgroup.procs` file `member`'s agent joins at start, created if needed; `None` without
/// [`MEMBER_CGROUP_ROOT_ENV`].
fn member_cgroup_procs(
    cluster_root: &std::path::Path,
    member: &str,
) -> std::io::Result<Option<std::ffi::CString>> {
    let Some(root) = std::env::var_os(MEMBER_CGROUP_ROOT_ENV) else {
        return Ok(None);
    };
    let cluster = cluster_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = PathBuf::from(root).join(format!("{cluster}.{member}"));
    std::fs::create_dir_all(&dir).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot create the member cgroup {} ({MEMBER_CGROUP_ROOT_ENV}): {e}",
                dir.display()
            ),
        )
    })?;
    let procs = dir.join("cgroup.procs");
    std::ffi::CString::new(procs.into_os_string().into_encoded_bytes())
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

async fn terminate(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}
