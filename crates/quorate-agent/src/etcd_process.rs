//! The member's `etcd` as a child process: started with the computed flags, logging to a file,
//! killed by the kernel if the agent itself dies (so a `kill -9` of the agent never leaves an
//! orphaned etcd holding the member's ports and data directory).

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use thiserror::Error;
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

/// A running etcd child.
#[derive(Debug)]
pub struct EtcdProcess {
    child: Child,
}

impl EtcdProcess {
    /// Starts `binary` with `args`, appending its output to `log`.
    pub fn spawn(binary: &Path, args: &[String], log: &Path) -> Result<Self, SpawnError> {
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
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe and touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().map_err(|source| SpawnError::Binary {
            binary: binary.display().to_string(),
            source,
        })?;
        Ok(Self { child })
    }

    /// Process ID, for logs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the process to exit by itself.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Stops etcd: SIGTERM, then SIGKILL after `grace`. etcd flushes and exits cleanly on SIGTERM.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}
