//! The temporary etcd a restore replays delta snapshots through: started on the restored data
//! directory, reachable only on loopback ports chosen by the OS, and stopped before the data
//! directory is swapped into place.
//!
//! The process is killed when its handle is dropped and dies with the thread that started it
//! (parent-death signal), so a failed or abandoned restore never leaves an etcd holding the
//! directory.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use thiserror::Error;
use tokio::process::{Child, Command};

/// How the temporary etcd runs.
#[derive(Clone, Debug)]
pub struct TempEtcdConfig {
    /// The `etcd` binary.
    pub binary: PathBuf,
    /// The data directory (already restored from a full snapshot).
    pub data_dir: PathBuf,
    /// `--name`; must be the member name the data directory was restored with.
    pub name: String,
    /// Where etcd's output goes.
    pub log_file: PathBuf,
    /// `--quota-backend-bytes`: large, so a big replay never hits the space alarm.
    pub quota_backend_bytes: u64,
    /// `--election-timeout`. It also sets etcd's minimum lease TTL (1.5 × the timeout) and how
    /// long leases are extended when the member becomes leader, so it bounds how quickly the
    /// lease keeper must start after etcd is up.
    pub election_timeout: Duration,
    /// How long etcd may take to become ready.
    pub start_timeout: Duration,
    /// How long a clean stop may take before etcd is killed.
    pub stop_timeout: Duration,
    /// `--unsafe-no-fsync` (etcd 3.5+): one fsync per replayed revision dominates the replay
    /// time, and the directory is worthless until the replay has finished anyway; the caller
    /// syncs the files once after the clean stop.
    pub no_fsync: bool,
}

impl TempEtcdConfig {
    /// Defaults for replaying into `data_dir` as member `name`.
    pub fn new(binary: &Path, data_dir: &Path, name: &str, log_file: &Path) -> TempEtcdConfig {
        TempEtcdConfig {
            binary: binary.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            name: name.to_string(),
            log_file: log_file.to_path_buf(),
            quota_backend_bytes: DEFAULT_QUOTA_BACKEND_BYTES,
            election_timeout: Duration::from_millis(2000),
            start_timeout: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(30),
            no_fsync: false,
        }
    }
}

/// 8 GiB, etcd's recommended maximum and what etcd-backup-restore gives its embedded etcd.
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Largest request the temporary etcd accepts: one source revision is one txn, and a lease
/// revocation can delete thousands of keys in one revision.
const MAX_REQUEST_BYTES: u64 = 64 * 1024 * 1024;
/// Most operations in one txn, for the same reason.
const MAX_TXN_OPS: u64 = 1_000_000;
/// Attempts with fresh ports when another process took one between probe and bind.
const START_ATTEMPTS: usize = 3;

/// The temporary etcd could not be run.
#[derive(Debug, Error)]
pub enum TempEtcdError {
    /// The binary could not be started.
    #[error(
        "cannot start the restore's temporary etcd ({binary}): {source}; install etcd or pass the \
         path of an etcd binary"
    )]
    Spawn {
        /// The binary.
        binary: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Local file trouble (log file, ports).
    #[error("restore's temporary etcd: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// It exited or never became ready.
    #[error(
        "the restore's temporary etcd on {data_dir} {reason}; its log is {log_file}, last lines:\n{log_tail}"
    )]
    NotReady {
        /// The data directory.
        data_dir: String,
        /// What happened.
        reason: String,
        /// The log file.
        log_file: String,
        /// Its last lines.
        log_tail: String,
    },
    /// It did not stop cleanly.
    #[error(
        "the restore's temporary etcd on {data_dir} did not stop within {timeout:?} and was \
         killed; its log is {log_file}"
    )]
    StopTimeout {
        /// The data directory.
        data_dir: String,
        /// The time allowed.
        timeout: Duration,
        /// The log file.
        log_file: String,
    },
}

/// A running temporary etcd.
#[derive(Debug)]
pub struct TempEtcd {
    child: Child,
    config: TempEtcdConfig,
    client_url: String,
}

impl TempEtcd {
    /// Starts etcd on the config's data directory and waits until it has elected itself and
    /// answers; returns it with a connected client.
    pub async fn start(config: TempEtcdConfig) -> Result<(TempEtcd, Client), TempEtcdError> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let mut etcd = TempEtcd::spawn(&config)?;
            match etcd.wait_ready().await {
                Ok(client) => return Ok((etcd, client)),
                Err(e @ TempEtcdError::NotReady { .. })
                    if e.to_string().contains("address already in use") =>
                {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn spawn(config: &TempEtcdConfig) -> Result<TempEtcd, TempEtcdError> {
        let [client_port, peer_port] = free_ports()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&config.log_file)
                .map_err(|source| TempEtcdError::Io {
                    what: format!("open log file {}", config.log_file.display()),
                    source,
                })
        };
        let election_ms = config.election_timeout.as_millis().max(500);
        let mut command = Command::new(&config.binary);
        command
            .arg(format!("--name={}", config.name))
            .arg(format!("--data-dir={}", config.data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!(
                "--quota-backend-bytes={}",
                config.quota_backend_bytes
            ))
            .arg(format!("--max-request-bytes={MAX_REQUEST_BYTES}"))
            .arg(format!("--max-txn-ops={MAX_TXN_OPS}"))
            .arg(format!("--heartbeat-interval={}", election_ms / 10))
            .arg(format!("--election-timeout={election_ms}"))
            // No compaction: the restored member keeps the history the source had.
            .arg("--auto-compaction-retention=0")
            .args(config.no_fsync.then_some("--unsafe-no-fsync"))
            .stdin(Stdio::null())
            .stdout(open_log()?)
            .stderr(open_log()?)
            // etcd reads ETCD_* variables as flags; the caller's environment must not change it.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe and touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().map_err(|source| TempEtcdError::Spawn {
            binary: config.binary.display().to_string(),
            source,
        })?;
        Ok(TempEtcd {
            child,
            config: config.clone(),
            client_url,
        })
    }

    async fn wait_ready(&mut self) -> Result<Client, TempEtcdError> {
        let deadline = Instant::now() + self.config.start_timeout;
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(10));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.not_ready(format!("exited during start-up with {status}")));
            }
            let last =
                match Client::connect([self.client_url.as_str()], Some(options.clone())).await {
                    Ok(mut client) => match client.status().await {
                        Ok(status) if status.leader() != 0 => return Ok(client),
                        Ok(_) => "no leader yet".to_string(),
                        Err(e) => e.to_string(),
                    },
                    Err(e) => e.to_string(),
                };
            if Instant::now() >= deadline {
                return Err(self.not_ready(format!(
                    "was not ready after {:?} (last: {last})",
                    self.config.start_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The client URL.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// The log file.
    pub fn log_file(&self) -> &Path {
        &self.config.log_file
    }

    /// The last lines of etcd's log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.config.log_file, 20)
    }

    /// Stops etcd gracefully (SIGTERM: it finishes applying, syncs and closes its database)
    /// and waits for it to exit.
    pub async fn stop(mut self) -> Result<ExitStatus, TempEtcdError> {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        match tokio::time::timeout(self.config.stop_timeout, self.child.wait()).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(source)) => Err(TempEtcdError::Io {
                what: "wait for the temporary etcd to exit".to_string(),
                source,
            }),
            Err(_) => Err(TempEtcdError::StopTimeout {
                data_dir: self.config.data_dir.display().to_string(),
                timeout: self.config.stop_timeout,
                log_file: self.config.log_file.display().to_string(),
            }),
        }
    }

    fn not_ready(&self, reason: String) -> TempEtcdError {
        TempEtcdError::NotReady {
            data_dir: self.config.data_dir.display().to_string(),
            reason,
            log_file: self.config.log_file.display().to_string(),
            log_tail: self.log_tail(),
        }
    }
}

impl Drop for TempEtcd {
    fn drop(&mut self) {
        // Kill and reap now, so the caller can remove the data directory right after.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.start_kill();
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Two distinct loopback ports the OS reports free (bound together, then released).
fn free_ports() -> Result<[u16; 2], TempEtcdError> {
    let bind = || {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| TempEtcdError::Io {
            what: "find a free loopback port".to_string(),
            source,
        })
    };
    let (a, b) = (bind()?, bind()?);
    let port = |l: &TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(|source| TempEtcdError::Io {
                what: "find a free loopback port".to_string(),
                source,
            })
    };
    Ok([port(&a)?, port(&b)?])
}

/// The last `lines` lines of a log file.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
