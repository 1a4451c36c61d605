//! The agent processes of one local cluster: started as `quorate agent` children, restarted with
//! backoff when they crash, left down when their member was removed on purpose, and stopped
//! cleanly (SIGTERM, which stops etcd cleanly) on scale-down or shutdown.
//!
//! Agents outlive the supervisor: each runs in a session of its own, without a parent-death
//! signal, and is recorded (`members/<name>/agent-process.json`: PID and start time). A
//! restarted supervisor adopts a recorded agent that is still the same process, names this
//! cluster and member, and answers on its port (core `decide_agent_adoption`), instead of
//! starting a second one.

use crate::state_dir::ClusterDir;
use quorate_core::agent_exit::AGENT_EXIT_REMOVED;
use quorate_core::cluster_config::TlsFiles;
use quorate_core::membership::adopt::{Adoption, ProcessSeen, decide_agent_adoption};
use serde::{Deserialize, Serialize};
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
    process: Process,
    started: Instant,
}

/// An agent this supervisor started, or one it adopted from a supervisor that crashed.
enum Process {
    Child(Child),
    /// Not our child: known by PID and start time, watched through `/proc`.
    Adopted {
        pid: u32,
        start_time: u64,
    },
}

/// What the supervisor records about an agent it started.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AgentRecord {
    pid: u32,
    /// Field 22 of `/proc/PID/stat`; with the PID, names one process.
    start_time: u64,
}

fn record_path(dir: &ClusterDir, member: &str) -> PathBuf {
    dir.member(member).join("agent-process.json")
}

/// (start time, state) of `pid`.
fn stat(pid: u32) -> Option<(u64, char)> {
    quorate_proc::stat(pid).map(|st| (st.start_time, st.state))
}

/// Whether the process `pid` started at `start_time` still runs (not exited, not a zombie).
fn alive(pid: u32, start_time: u64) -> bool {
    matches!(stat(pid), Some((t, state)) if t == start_time && state != 'Z')
}

/// The recorded agent of `member` as `/proc` shows it: (PID, start time, what it is).
fn recorded_agent(dir: &ClusterDir, member: &str) -> Option<(u32, u64, ProcessSeen)> {
    let text = std::fs::read_to_string(record_path(dir, member)).ok()?;
    let record: AgentRecord = serde_json::from_str(&text).ok()?;
    let seen = match stat(record.pid) {
        None | Some((_, 'Z')) => ProcessSeen::Gone,
        Some((t, _)) if t != record.start_time => ProcessSeen::Reused,
        Some(_) if !is_agent_of(record.pid, dir, member) => ProcessSeen::OtherDataDir,
        Some(_) => ProcessSeen::Same,
    };
    Some((record.pid, record.start_time, seen))
}

/// Whether `pid`'s command line is `quorate agent --cluster-dir <dir> --member <member>`.
fn is_agent_of(pid: u32, dir: &ClusterDir, member: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let root = dir.root().as_os_str().as_encoded_bytes();
    let follows =
        |flag: &[u8], value: &[u8]| args.windows(2).any(|w| w[0] == flag && w[1] == value);
    args.contains(&b"agent".as_slice())
        && follows(b"--cluster-dir", root)
        && follows(b"--member", member.as_bytes())
}

/// PIDs of the agents of `dir`'s members that still run, by their records (for `down` when
/// the supervisor is gone).
pub fn recorded_running(dir: &ClusterDir, members: &[String]) -> Vec<u32> {
    members
        .iter()
        .filter_map(|m| recorded_agent(dir, m))
        .filter(|(_, _, seen)| *seen == ProcessSeen::Same)
        .map(|(pid, _, _)| pid)
        .collect()
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

    /// Starts `member`'s agent unless it runs, was removed on purpose, or is backing off; an
    /// agent a crashed supervisor started is adopted instead when it still runs and answers on
    /// `port` (over TLS with `tls`).
    pub async fn ensure_started(
        &mut self,
        member: &str,
        now: Instant,
        port: u16,
        tls: Option<&TlsFiles>,
    ) -> std::io::Result<()> {
        if self.running.contains_key(member) || self.dir.member_removed_marker(member).exists() {
            return Ok(());
        }
        if let Some((pid, start_time, seen)) = recorded_agent(&self.dir, member) {
            let answers = seen == ProcessSeen::Same
                && crate::probe::agent_answers(port, tls, Duration::from_millis(500)).await;
            match decide_agent_adoption(Some(pid), &seen, answers) {
                Adoption::Adopt => {
                    tracing::info!(%member, pid, "adopted the running agent");
                    let process = Process::Adopted { pid, start_time };
                    let running = Running {
                        process,
                        started: now,
                    };
                    self.running.insert(member.to_string(), running);
                    return Ok(());
                }
                Adoption::Wait(why) => {
                    tracing::info!(%member, %why, "waiting");
                    return Ok(());
                }
                Adoption::Start(why) => tracing::debug!(%member, %why, "starting an agent"),
            }
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
        // SAFETY: setsid, open and write are async-signal-safe; the path was prepared before the
        // fork, so nothing here allocates or touches memory shared with the parent.
        unsafe {
            command.pre_exec(move || {
                // A session of its own: the supervisor's death (or a terminal's Ctrl-C to its
                // group) does not reach the agent; `down` and the supervisor stop it by SIGTERM.
                nix::unistd::setsid().map_err(std::io::Error::from)?;
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
        if let Some((pid, start_time)) = child.id().and_then(|p| Some((p, stat(p)?.0))) {
            let record = AgentRecord { pid, start_time };
            let text = serde_json::to_string(&record).expect("the agent record serializes");
            let path = record_path(&self.dir, member);
            let tmp = path.with_extension("json.tmp");
            std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path))?;
        }
        self.running.insert(
            member.to_string(),
            Running {
                process: Process::Child(child),
                started: now,
            },
        );
        Ok(())
    }

    /// Collects agents that exited since the last call.
    pub fn reap(&mut self, now: Instant) -> Vec<(String, AgentEnded)> {
        let mut ended = Vec::new();
        for (member, agent) in &mut self.running {
            match &mut agent.process {
                Process::Child(child) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        let how = if status.code() == Some(i32::from(AGENT_EXIT_REMOVED)) {
                            AgentEnded::Removed
                        } else {
                            AgentEnded::Crashed(status.to_string())
                        };
                        ended.push((member.clone(), how, agent.started));
                    }
                }
                // Its exit status went to its first parent; a removed member's next agent
                // finds the member removed and ends with the code that says so.
                Process::Adopted { pid, start_time } if !alive(*pid, *start_time) => {
                    let how = AgentEnded::Crashed(format!("adopted agent {pid} exited"));
                    ended.push((member.clone(), how, agent.started));
                }
                Process::Adopted { .. } => {}
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
            terminate(&mut agent.process, grace).await;
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
                terminate(&mut agent.process, grace).await;
            });
        futures::future::join_all(stops).await;
        if let Some(mut agent) = leader.and_then(|l| self.running.remove(l)) {
            terminate(&mut agent.process, grace).await;
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

async fn terminate(process: &mut Process, grace: Duration) {
    let child = match process {
        Process::Child(child) => child,
        Process::Adopted { pid, start_time } => {
            let (pid, start_time) = (*pid, *start_time);
            stop_adopted(pid, start_time, grace).await;
            return;
        }
    };
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

/// Stops an agent that is not this process's child: SIGTERM, SIGKILL after `grace`.
async fn stop_adopted(pid: u32, start_time: u64, grace: Duration) {
    let signal = |signal| {
        if alive(pid, start_time) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
        }
    };
    signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while alive(pid, start_time) {
        if Instant::now() >= deadline {
            signal(nix::sys::signal::Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
