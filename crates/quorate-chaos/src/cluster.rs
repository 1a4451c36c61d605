//! A local quorate cluster driven through the real `quorate` binary, in a private state
//! directory; every process it started is killed when it is dropped (also on panic).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::faults::network::MemberPorts;

/// A `quorate` command failed.
#[derive(Debug, thiserror::Error)]
#[error("quorate {args}: {status}\n{output}")]
pub struct CommandFailed {
    args: String,
    status: String,
    output: String,
}

/// One local cluster under test.
pub struct LocalCluster {
    quorate_bin: PathBuf,
    state: tempfile::TempDir,
    /// `metadata.name`.
    pub name: String,
    env: Vec<(String, String)>,
}

impl LocalCluster {
    /// A cluster named `name`, not started yet; `env` is passed to every `quorate` command
    /// (and so to the supervisor and agents).
    pub fn new(
        quorate_bin: &Path,
        name: &str,
        env: Vec<(String, String)>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            quorate_bin: quorate_bin.to_path_buf(),
            state: tempfile::Builder::new()
                .prefix("quorate-chaos-")
                .tempdir()?,
            name: name.to_string(),
            env,
        })
    }

    /// Runs `quorate --state-dir <state> ARGS`, returning stdout.
    pub fn quorate(&self, args: &[&str]) -> Result<String, CommandFailed> {
        let out = Command::new(&self.quorate_bin)
            .arg("--state-dir")
            .arg(self.state.path())
            .args(args)
            .env("QUORATE_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .map_err(|e| CommandFailed {
                args: args.join(" "),
                status: e.to_string(),
                output: String::new(),
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(CommandFailed {
                args: args.join(" "),
                status: out.status.to_string(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    /// Writes `manifest` and runs `quorate up -d` (or `apply --wait` when it runs).
    pub fn up(&self, manifest: &str) -> Result<(), CommandFailed> {
        let path = self.write_manifest(manifest);
        self.quorate(&["up", "-d", "-f", &path, "--timeout", "120s"])
            .map(drop)
    }

    /// `quorate apply --wait` with a changed manifest.
    pub fn apply(&self, manifest: &str) -> Result<(), CommandFailed> {
        let path = self.write_manifest(manifest);
        self.quorate(&["apply", "-f", &path, "--wait", "--timeout", "180s"])
            .map(drop)
    }

    /// `quorate defrag NAME`: one defragmentation round of every member, waited for.
    pub fn defragment(&self) -> Result<(), CommandFailed> {
        self.quorate(&["defrag", &self.name, "--timeout", "180s"])
            .map(drop)
    }

    fn write_manifest(&self, manifest: &str) -> String {
        let path = self.state.path().join("etcd.yaml");
        std::fs::write(&path, manifest).expect("write the manifest");
        path.display().to_string()
    }

    /// The cluster's directory.
    pub fn dir(&self) -> PathBuf {
        self.state.path().join("clusters").join(&self.name)
    }

    /// Member `i`'s name.
    pub fn member(&self, i: usize) -> String {
        format!("{}-{i}", self.name)
    }

    /// Member `member`'s directory (its data is `data/` inside).
    pub fn member_dir(&self, member: &str) -> PathBuf {
        self.dir().join("members").join(member)
    }

    /// Client URLs of the members.
    pub fn endpoints(&self) -> Result<Vec<String>, CommandFailed> {
        Ok(self
            .quorate(&["endpoints", &self.name])?
            .trim()
            .split(',')
            .map(String::from)
            .collect())
    }

    /// The status the supervisor last wrote.
    pub fn status(&self) -> serde_json::Value {
        std::fs::read_to_string(self.dir().join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// PID of the supervisor.
    pub fn supervisor_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir().join("supervisor.lock"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// PID of `member`'s etcd.
    pub fn etcd_pid(&self, member: &str) -> Option<i32> {
        let data = self.member_dir(member).join("data");
        find_process(&["etcd", &format!("--data-dir={}", data.display())])
    }

    /// PID of `member`'s agent.
    pub fn agent_pid(&self, member: &str) -> Option<i32> {
        find_process(&[
            " agent ",
            &self.dir().display().to_string(),
            &format!("--member {member} "),
        ])
    }

    /// Sends `signal` to one process.
    pub fn signal(pid: i32, signal: Signal) {
        let _ = kill(Pid::from_raw(pid), signal);
    }

    /// Kills the supervisor's process group at once (supervisor, agents, etcds), as a machine
    /// crash would, and waits until none of them is left.
    pub fn crash(&self) {
        let dir = self.dir().display().to_string();
        let before = find_processes(&[&dir]);
        if let Some(pid) = self.supervisor_pid() {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Some(pid) = find_process(&[&dir]) {
            Self::signal(pid, Signal::SIGKILL);
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // A dying process's command line is gone once its memory is released, but its files
        // (listening sockets among them) close only after that: wait for the processes
        // themselves, or `up` finds their ports still in use (the soak found it).
        for pid in before {
            Self::signal(pid, Signal::SIGKILL);
            while !exited(pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // What `up` needs is the ports: the soak saw listening sockets outlive every process it
        // could still name (a process mid-exit, on a loaded machine). Wait for the ports.
        let ports = self.member_ports();
        while !ports.values().flatten().all(|p| port_free(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member's ports (client, peer, agent), from the cluster record.
    pub fn member_ports(&self) -> BTreeMap<String, MemberPorts> {
        let record: serde_json::Value = std::fs::read_to_string(self.dir().join("cluster.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        record["ports"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(member, p)| {
                let port = |k: &str| p[k].as_u64().and_then(|v| u16::try_from(v).ok());
                Some((
                    member.clone(),
                    [port("client")?, port("peer")?, port("agent")?],
                ))
            })
            .collect()
    }

    /// Copies the cluster's directory (logs, leases, status, data) to a new directory that
    /// outlives the run, for the post-mortem of a failed step; returns where (or why not).
    pub fn preserve(&self) -> String {
        let kept = match tempfile::Builder::new()
            .prefix("quorate-chaos-failed-")
            .tempdir()
        {
            Ok(dir) => dir.keep(),
            Err(e) => return format!("(not kept: {e})"),
        };
        match Command::new("cp")
            .arg("-a")
            .arg(self.dir())
            .arg(&kept)
            .status()
        {
            Ok(s) if s.success() => kept.display().to_string(),
            Ok(s) => format!("(copy to {} failed: {s})", kept.display()),
            Err(e) => format!("(copy to {} failed: {e})", kept.display()),
        }
    }

    /// The last lines of every agent's and etcd's log, for a failure report.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let members = self.dir().join("members");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(members)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        dirs.sort();
        for dir in dirs {
            for file in ["agent.log", "etcd.log"] {
                let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                out.push_str(&format!("--- {}\n{tail}\n", dir.join(file).display()));
            }
        }
        out
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Resume anything a fault left stopped, so SIGKILL and exit are delivered.
        let root = self.state.path().display().to_string();
        for pid in find_processes(&[&root]) {
            Self::signal(pid, Signal::SIGCONT);
        }
        self.crash();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(pid) = find_process(&[&root]) {
            Self::signal(pid, Signal::SIGKILL);
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether nothing listens on loopback port `port` (what `quorate up` checks).
fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Whether process `pid` is gone or a zombie (its files closed).
pub fn exited(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            Some(state == 'Z' || state == 'X')
        })
        .unwrap_or(true)
}

/// PID of a process whose command line contains every one of `needles`.
pub fn find_process(needles: &[&str]) -> Option<i32> {
    find_processes(needles).into_iter().next()
}

/// PIDs of every process whose command line contains every one of `needles`.
pub fn find_processes(needles: &[&str]) -> Vec<i32> {
    let me = std::process::id();
    quorate_proc::pids_naming(needles)
        .into_iter()
        .filter(|pid| *pid != me)
        .map(|pid| pid as i32)
        .collect()
}
