//! One real etcd member as a child process: its flags, its log file, its readiness.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::binaries::etcd_binary;
use crate::child::ChildGuard;
use crate::ports::PortBlock;

/// `--initial-cluster-state`: bootstrap a new cluster, or join one that already lists this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Part of a fresh bootstrap.
    New,
    /// Joining a running cluster after a member add.
    Existing,
}

impl ClusterState {
    fn as_flag(self) -> &'static str {
        match self {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        }
    }
}

/// Raft heartbeat and election timeout (etcd requires election ≥ 5 × heartbeat).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTiming {
    /// `--heartbeat-interval`.
    pub heartbeat: Duration,
    /// `--election-timeout`.
    pub election: Duration,
}

impl RaftTiming {
    /// Test default: twice as fast as etcd's 100 ms / 1000 ms so elections and failover tests
    /// finish sooner, but long enough that a loaded 2-core machine does not flap leaders.
    pub const FAST: RaftTiming = RaftTiming {
        heartbeat: Duration::from_millis(50),
        election: Duration::from_millis(500),
    };
}

/// Server-side TLS files for etcd's client or peer listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// Server certificate (PEM).
    pub cert: PathBuf,
    /// Server private key (PEM).
    pub key: PathBuf,
    /// CA that signs the certificates of connecting clients or peers.
    pub trusted_ca: PathBuf,
    /// Require a client certificate signed by `trusted_ca`.
    pub client_cert_auth: bool,
}

/// Everything needed to start one etcd member; plain data so tests can tweak any field.
#[derive(Clone, Debug)]
pub struct EtcdMemberConfig {
    /// `--name`.
    pub name: String,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// Where etcd's stdout and stderr go (appended, so restarts keep history).
    pub log_file: PathBuf,
    /// Loopback client port.
    pub client_port: u16,
    /// Loopback peer port.
    pub peer_port: u16,
    /// Plain-HTTP `/health` and `/metrics` port, used for readiness regardless of TLS.
    pub metrics_port: u16,
    /// `--initial-cluster` entries: (member name, peer URL).
    pub initial_cluster: Vec<(String, String)>,
    /// `--initial-cluster-state`.
    pub initial_cluster_state: ClusterState,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// TLS on the client listener (client URLs become https).
    pub client_tls: Option<ServerTlsFiles>,
    /// TLS on the peer listener (peer URLs become https).
    pub peer_tls: Option<ServerTlsFiles>,
    /// Raft timing; `None` keeps etcd's own defaults.
    pub timing: Option<RaftTiming>,
    /// The etcd binary to run instead of [`etcd_binary`] (e.g. another version's).
    pub binary: Option<PathBuf>,
    /// Further flags appended verbatim.
    pub extra_args: Vec<String>,
    /// The probe sockets holding the three ports until the first spawn, so no other process
    /// (e.g. a restore's temporary etcd on an OS-chosen port) can take them in between.
    reservation: PortReservation,
}

/// A [`PortBlock`] shared by the clones of one config and released once, right before etcd
/// binds its ports.
#[derive(Clone, Debug, Default)]
struct PortReservation(Arc<Mutex<Option<PortBlock>>>);

impl PortReservation {
    fn release(&self) {
        let block = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(block.map(PortBlock::release));
    }
}

impl EtcdMemberConfig {
    /// A config for a single-member cluster named `name` in `dir`, on fresh loopback ports,
    /// with [`RaftTiming::FAST`].
    pub fn new(name: &str, dir: &Path) -> EtcdMemberConfig {
        let block = PortBlock::reserve(3);
        let ports = block.ports().to_vec();
        let mut config = EtcdMemberConfig {
            name: name.to_string(),
            data_dir: dir.join(format!("{name}.etcd")),
            log_file: dir.join(format!("{name}.log")),
            client_port: ports[0],
            peer_port: ports[1],
            metrics_port: ports[2],
            initial_cluster: Vec::new(),
            initial_cluster_state: ClusterState::New,
            initial_cluster_token: format!("quorate-test-{name}"),
            client_tls: None,
            peer_tls: None,
            timing: Some(RaftTiming::FAST),
            extra_args: Vec::new(),
            binary: None,
            reservation: PortReservation(Arc::new(Mutex::new(Some(block)))),
        };
        config.initial_cluster = vec![(config.name.clone(), config.peer_url())];
        config
    }

    /// The URL clients use (https when client TLS is on).
    pub fn client_url(&self) -> String {
        let scheme = if self.client_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The URL peers use (https when peer TLS is on).
    pub fn peer_url(&self) -> String {
        let scheme = if self.peer_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.peer_port)
    }

    /// Plain-HTTP base URL serving `/health` and `/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.metrics_port)
    }

    /// The `--initial-cluster` value.
    pub fn initial_cluster_arg(&self) -> String {
        format_initial_cluster(&self.initial_cluster)
    }

    /// Lets go of the three ports, so etcd can bind them; done by the spawn, and by a test that
    /// starts etcd from [`EtcdMemberConfig::args`] itself.
    pub fn release_ports(&self) {
        self.reservation.release();
    }

    /// The full etcd command line (without the binary).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--name={}", self.name),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-client-urls={}", self.client_url()),
            format!("--advertise-client-urls={}", self.client_url()),
            format!("--listen-peer-urls={}", self.peer_url()),
            format!("--initial-advertise-peer-urls={}", self.peer_url()),
            format!("--listen-metrics-urls={}", self.metrics_url()),
            format!("--initial-cluster={}", self.initial_cluster_arg()),
            format!(
                "--initial-cluster-state={}",
                self.initial_cluster_state.as_flag()
            ),
            format!("--initial-cluster-token={}", self.initial_cluster_token),
        ];
        if let Some(timing) = self.timing {
            args.push(format!(
                "--heartbeat-interval={}",
                timing.heartbeat.as_millis()
            ));
            args.push(format!(
                "--election-timeout={}",
                timing.election.as_millis()
            ));
        }
        if let Some(tls) = &self.client_tls {
            args.push(format!("--cert-file={}", tls.cert.display()));
            args.push(format!("--key-file={}", tls.key.display()));
            args.push(format!("--trusted-ca-file={}", tls.trusted_ca.display()));
            args.push(format!("--client-cert-auth={}", tls.client_cert_auth));
        }
        if let Some(tls) = &self.peer_tls {
            args.push(format!("--peer-cert-file={}", tls.cert.display()));
            args.push(format!("--peer-key-file={}", tls.key.display()));
            args.push(format!(
                "--peer-trusted-ca-file={}",
                tls.trusted_ca.display()
            ));
            args.push(format!("--peer-client-cert-auth={}", tls.client_cert_auth));
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// Formats `name=peerURL,...` for `--initial-cluster`.
pub fn format_initial_cluster(entries: &[(String, String)]) -> String {
    entries
        .iter()
        .map(|(name, url)| format!("{name}={url}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A running etcd member, killed (with its process group) and reaped on drop.
#[derive(Debug)]
pub struct EtcdProcess {
    config: EtcdMemberConfig,
    child: ChildGuard,
}

/// Why a member did not become ready: carries the end of its log so the test failure explains
/// itself.
#[derive(Debug, thiserror::Error)]
#[error(
    "etcd member `{name}` (client {client_url}) {reason}; last lines of {log_file}:\n{log_tail}"
)]
pub struct NotReady {
    /// Member name.
    pub name: String,
    /// Its client URL.
    pub client_url: String,
    /// What went wrong (timed out, exited early).
    pub reason: String,
    /// Path of the full log.
    pub log_file: String,
    /// The last lines of the log.
    pub log_tail: String,
    /// True when the process exited instead of becoming ready.
    pub exited: bool,
}

impl NotReady {
    pub(crate) fn spawn_failed(config: &EtcdMemberConfig, e: io::Error) -> NotReady {
        NotReady {
            name: config.name.clone(),
            client_url: config.client_url(),
            reason: format!("could not be spawned ({}): {e}", etcd_binary().display()),
            log_file: config.log_file.display().to_string(),
            log_tail: String::new(),
            exited: true,
        }
    }

    /// True when etcd exited because a port was taken (worth retrying on other ports).
    pub fn is_port_clash(&self) -> bool {
        self.exited && self.log_tail.contains("address already in use")
    }
}

impl EtcdProcess {
    /// Starts etcd with `config`, logging to `config.log_file`. Does not wait for readiness.
    pub fn start(config: EtcdMemberConfig) -> io::Result<EtcdProcess> {
        let child = spawn_etcd(&config)?;
        Ok(EtcdProcess { config, child })
    }

    /// Starts etcd and waits until it is ready.
    pub async fn start_ready(
        config: EtcdMemberConfig,
        timeout: Duration,
    ) -> Result<EtcdProcess, NotReady> {
        let mut process =
            EtcdProcess::start(config.clone()).map_err(|e| NotReady::spawn_failed(&config, e))?;
        process.wait_ready(timeout).await?;
        Ok(process)
    }

    /// Polls the member's `/health` until it reports healthy (a leader exists and a quorum read
    /// works; learners report healthy once they follow the leader). Fails early if etcd exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), NotReady> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.not_ready(format!("exited early with {status}"), true));
            }
            let last = match self.health().await {
                Ok(true) => return Ok(()),
                Ok(false) => "reports unhealthy".to_string(),
                Err(e) => format!("health probe failed: {e}"),
            };
            if Instant::now() >= deadline {
                return Err(self.not_ready(
                    format!("not ready after {timeout:?} (last probe: {last})"),
                    false,
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One `/health` probe on the metrics listener: `Ok(true)` when etcd says healthy.
    pub async fn health(&self) -> io::Result<bool> {
        let (status, body) = http_get(self.config.metrics_port, "/health").await?;
        Ok(status == 200 && body.contains(r#""health":"true""#))
    }

    /// The raw Prometheus text from `/metrics` (e.g. `etcd_server_is_learner`).
    pub async fn metrics(&self) -> io::Result<String> {
        Ok(http_get(self.config.metrics_port, "/metrics").await?.1)
    }

    /// SIGKILLs the member (no graceful shutdown), like a crash.
    pub fn kill(&mut self) {
        if let Err(e) = self.child.kill() {
            panic!("failed to kill etcd member {}: {e}", self.config.name);
        }
    }

    /// Starts the member again on the same data dir and ports after [`EtcdProcess::kill`] (or a
    /// crash); kills the old process first if it still runs.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.child = spawn_etcd(&self.config)?;
        Ok(())
    }

    /// Stops the member gracefully (SIGTERM, then SIGKILL after `grace`) and starts it again
    /// on the same data dir and ports with `binary` and `extra_args`: a rolling upgrade or
    /// downgrade step done by hand.
    pub fn restart_on(
        &mut self,
        binary: PathBuf,
        extra_args: Vec<String>,
        grace: Duration,
    ) -> io::Result<()> {
        self.child
            .signal(nix::sys::signal::Signal::SIGTERM)
            .map_err(io::Error::from)?;
        if self.child.wait_timeout(grace)?.is_none() {
            self.child.kill()?;
        }
        self.config.binary = Some(binary);
        self.config.extra_args = extra_args;
        self.child = spawn_etcd(&self.config)?;
        Ok(())
    }

    /// True while the etcd process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.is_running()
    }

    /// The process guard, e.g. to SIGSTOP the member.
    pub fn child(&self) -> &ChildGuard {
        &self.child
    }

    /// The configuration this member was started with.
    pub fn config(&self) -> &EtcdMemberConfig {
        &self.config
    }

    /// `--name`.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The member's client URL.
    pub fn client_url(&self) -> String {
        self.config.client_url()
    }

    /// The member's peer URL.
    pub fn peer_url(&self) -> String {
        self.config.peer_url()
    }

    /// The member's log file.
    pub fn log_file(&self) -> &Path {
        &self.config.log_file
    }

    /// The last `lines` lines of the member's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.config.log_file, lines)
    }

    fn not_ready(&self, reason: String, exited: bool) -> NotReady {
        NotReady {
            name: self.config.name.clone(),
            client_url: self.config.client_url(),
            reason,
            log_file: self.config.log_file.display().to_string(),
            log_tail: self.log_tail(30),
            exited,
        }
    }
}

fn spawn_etcd(config: &EtcdMemberConfig) -> io::Result<ChildGuard> {
    if let Some(parent) = config.log_file.parent() {
        fs::create_dir_all(parent)?;
    }
    let log = File::options()
        .create(true)
        .append(true)
        .open(&config.log_file)?;
    config.release_ports();
    let mut cmd = Command::new(config.binary.clone().unwrap_or_else(etcd_binary));
    cmd.args(config.args())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // etcd reads ETCD_* variables as flags; make sure the caller's environment cannot
        // change the member.
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    ChildGuard::spawn(&mut cmd)
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read log: {e})"),
    }
}

/// Minimal HTTP/1.0 GET on loopback; etcd closes the connection after the response.
async fn http_get(port: u16, path: &str) -> io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "HTTP GET timed out"))??;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            let start: String = response.chars().take(80).collect();
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not an HTTP response: {start:?}"),
            )
        })?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
