//! The member's `etcd` process: started with the computed flags, logging to a file, or adopted
//! from an earlier agent of the same member (see `adopt`). etcd outlives the agent: it runs
//! without a parent-death signal, so a crash of the agent (a `kill -9`, a panic — the binary
//! aborts on one instead of unwinding —, an out-of-memory kill) never stops it; the restarted agent adopts it. A
//! temporary etcd (`private_start`) still dies with the agent, since nobody would adopt it.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use thiserror::Error;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};

/// A failure to start the etcd process.
#[derive(Debug, Error)]
pub enum SpawnError {
    /// The binary is missing or not executable.
    #[error(
        "cannot run etcd binary {binary}: {source}; install it (`apt-get install etcd-server`) or \
         point QUORATE_ETCD_BIN at an etcd binary"
    )]
    Binary {
        /// The binary that was tried.
        binary: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The log file could not be opened.
    #[error("cannot open etcd log file {path}: {source}")]
    Log {
        /// The log file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Leaves out of etcd's environment every variable etcd reads as a setting (`ETCD_*`): quorate
/// configures etcd by its flags alone. Otherwise Kubernetes' service links (`<SERVICE>_PORT` and
/// more for every Service of the namespace: `ETCD_MAIN_CLIENT_PORT` for `etcd-main-client`) or
/// the shell `quorate up` runs in reach etcd, which warns about each variable it does not know
/// (13 lines per Service at every start) and applies each one it does.
fn clear_etcd_settings(command: &mut Command, inherited: impl IntoIterator<Item = OsString>) {
    for name in inherited {
        if name.as_encoded_bytes().starts_with(b"ETCD_") {
            command.env_remove(name);
        }
    }
}

/// Whether a started etcd outlives the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// The member's etcd: survives the agent's death, to be adopted by the next agent.
    OutlivesAgent,
    /// A temporary etcd only this agent uses: killed by the kernel when the agent dies.
    DiesWithAgent,
}

/// A running etcd, started by this agent or adopted.
#[derive(Debug)]
pub struct EtcdProcess {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Child(Child),
    /// Not our child: watched through a pidfd, which turns readable when the process exits.
    Adopted {
        pid: u32,
        pidfd: AsyncFd<OwnedFd>,
    },
    /// Stopped or exited; nothing left to do.
    Done,
}

impl EtcdProcess {
    /// Starts `binary` with `args`, appending its output to `log`.
    pub fn spawn(
        binary: &Path,
        args: &[String],
        log: &Path,
        lifetime: Lifetime,
    ) -> Result<Self, SpawnError> {
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|source| SpawnError::Log {
                    path: log.display().to_string(),
                    source,
                })
        };
        let stdout = open_log()?;
        let stderr = open_log()?;
        let mut command = Command::new(binary);
        clear_etcd_settings(&mut command, std::env::vars_os().map(|(name, _)| name));
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        match lifetime {
            // It stays in the agent's process group: whoever ends that whole group (a test's
            // guard, a machine-crash simulation) means etcd too; a signal to the agent alone
            // does not reach it.
            Lifetime::OutlivesAgent => {}
            Lifetime::DiesWithAgent => {
                command.kill_on_drop(true);
                // SAFETY: prctl is async-signal-safe and touches no memory shared with the parent.
                unsafe {
                    command.pre_exec(|| {
                        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                            .map_err(std::io::Error::from)
                    });
                }
            }
        }
        let child = command.spawn().map_err(|source| SpawnError::Binary {
            binary: binary.display().to_string(),
            source,
        })?;
        Ok(Self {
            inner: Inner::Child(child),
        })
    }

    /// Takes over a running etcd that is not this process's child, known by `pidfd` (opened
    /// before the evidence about `pid` was gathered, so it cannot name a reused PID).
    pub fn adopt(pid: u32, pidfd: OwnedFd) -> std::io::Result<Self> {
        // SAFETY: the OwnedFd is moved into the AsyncFd, stays open and keeps its number until
        // the AsyncFd is dropped.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                .map_err(std::io::Error::from)?;
        Ok(Self {
            inner: Inner::Adopted { pid, pidfd },
        })
    }

    /// Process ID, for logs and the process record.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Child(child) => child.id(),
            Inner::Adopted { pid, .. } => Some(*pid),
            Inner::Done => None,
        }
    }

    /// Waits for the process to exit by itself; says how it ended (an adopted process's exit
    /// status belongs to its parent, so it only says that it exited).
    pub async fn wait(&mut self) -> std::io::Result<String> {
        match &mut self.inner {
            Inner::Child(child) => child.wait().await.map(|s| s.to_string()),
            Inner::Adopted { pid, pidfd } => {
                let pid = *pid;
                pidfd.readable().await?.retain_ready();
                self.inner = Inner::Done;
                Ok(format!("adopted etcd {pid} exited"))
            }
            Inner::Done => std::future::pending().await,
        }
    }

    /// Stops etcd: SIGTERM, then SIGKILL after `grace`. etcd flushes and exits cleanly on SIGTERM.
    pub async fn stop(mut self, grace: Duration) {
        match std::mem::replace(&mut self.inner, Inner::Done) {
            Inner::Child(mut child) => {
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
            Inner::Adopted { pidfd, .. } => {
                let signal = rustix::process::Signal::TERM;
                let _ = rustix::process::pidfd_send_signal(pidfd.get_ref(), signal);
                if tokio::time::timeout(grace, pidfd.readable()).await.is_ok() {
                    return;
                }
                let kill = rustix::process::Signal::KILL;
                let _ = rustix::process::pidfd_send_signal(pidfd.get_ref(), kill);
                let _ = pidfd.readable().await;
            }
            Inner::Done => {}
        }
    }
}

impl Drop for EtcdProcess {
    /// A drop (the member loop's task aborted, as tests do) kills etcd, as it always did. The
    /// `quorate agent` process never unwinds through it: its panic hook aborts the process,
    /// so a panicking agent leaves etcd running for the next agent to adopt.
    fn drop(&mut self) {
        match &mut self.inner {
            Inner::Child(child) => {
                let _ = child.start_kill();
            }
            Inner::Adopted { pidfd, .. } => {
                let kill = rustix::process::Signal::KILL;
                let _ = rustix::process::pidfd_send_signal(pidfd.get_ref(), kill);
            }
            Inner::Done => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_inherits_no_etcd_setting() {
        let mut command = Command::new("etcd");
        let inherited = [
            "ETCD_TLS_CLIENT_PORT",
            "PATH",
            "ETCD_QUOTA_BACKEND_BYTES",
            "ETCDCTL_API",
            "HOME",
        ];
        clear_etcd_settings(&mut command, inherited.map(OsString::from));
        let removed: Vec<_> = command
            .as_std()
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            removed,
            ["ETCD_QUOTA_BACKEND_BYTES", "ETCD_TLS_CLIENT_PORT"]
        );
    }
}
