//! The measured method: `quorate up -d` a 1-member cluster, then `quorate apply` the same
//! manifest with `spec.replicas: 3` and wait until etcd itself shows three started voters.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::error::{BenchError, Result};
use crate::hand::CONVERGE_TIMEOUT;
use crate::observe::{LeaderMonitor, Writer, wait_for_voters};
use crate::scale_out_report::{Method, RoundResult};

/// Cluster name used in every round (each round has its own state directory).
pub const NAME: &str = "bench";
/// Bound on `quorate up -d`, passed as its `--timeout`.
const UP_TIMEOUT: &str = "60s";
/// Bound on any other quorate command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// The `Etcd` manifest of the benchmark cluster with `replicas` members.
pub fn manifest(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: {name}
spec:
  replicas: {replicas}
  labels:
    app: {name}
  etcd:
    heartbeatDuration: 1s
  backup: {{}}
"
    )
}

/// Kills the cluster's supervisor, agents and etcds when dropped,
/// whatever way the round ends; a clean `quorate down` first makes this a no-op.
struct SupervisorGuard {
    lock_file: PathBuf,
    pid: Option<i32>,
}

impl SupervisorGuard {
    fn new(state_dir: &Path) -> SupervisorGuard {
        SupervisorGuard {
            lock_file: state_dir
                .join("clusters")
                .join(NAME)
                .join("supervisor.lock"),
            pid: None,
        }
    }

    /// Remembers the supervisor's PID while the lock file is there to read.
    fn remember(&mut self) {
        if let Some(pid) = read_pid(&self.lock_file) {
            self.pid = Some(pid);
        }
    }
}

fn read_pid(lock_file: &Path) -> Option<i32> {
    std::fs::read_to_string(lock_file).ok()?.trim().parse().ok()
}

/// True when `pid` is (still) a quorate supervisor, so a recycled PID is never signalled.
fn is_supervisor(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| cmdline.split(|&b| b == 0).any(|arg| arg == b"supervise"))
        .unwrap_or(false)
}

impl Drop for SupervisorGuard {
    fn drop(&mut self) {
        let pid = read_pid(&self.lock_file).or(self.pid);
        if let Some(pid) = pid.filter(|&pid| pid > 1 && is_supervisor(pid)) {
            // The supervisor leads its own session and process group.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        // Agents run in sessions of their own and outlive the supervisor, etcd with them:
        // every process naming the cluster's directory goes too.
        if let Some(dir) = self.lock_file.parent() {
            for pid in quorate_proc::pids_naming(&[&dir.display().to_string()]) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

/// Runs `quorate --state-dir <state_dir> <args>`; returns its standard output, or an error
/// carrying its output when it fails or takes longer than [`COMMAND_TIMEOUT`].
async fn quorate(bin: &Path, state_dir: &Path, args: &[&str], limit: Duration) -> Result<String> {
    let what = format!("quorate {}", args.join(" "));
    let run = tokio::process::Command::new(bin)
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env_remove("QUORATE_STATE_DIR")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, run)
        .await
        .map_err(|_| BenchError::failed(format!("`{what}` did not finish in {limit:?}")))?
        .map_err(BenchError::io("run", bin))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(BenchError::failed(format!(
            "`{what}` failed ({}):\n{}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(stdout)
}

/// A local cluster `quorate up -d` started in a private state directory; its processes are
/// killed when it is dropped, whatever way the round ends.
pub struct LocalCluster {
    // Field order matters: the processes die before the directory is deleted.
    guard: SupervisorGuard,
    bin: PathBuf,
    state: PathBuf,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl LocalCluster {
    /// Starts `manifest` (named [`NAME`]) and waits until it is ready.
    pub async fn up(bin: &Path, manifest: String) -> Result<LocalCluster> {
        let dir = tempfile::Builder::new()
            .prefix("quorate-bench-q-")
            .tempdir()
            .map_err(BenchError::io(
                "create a temporary directory in",
                &std::env::temp_dir(),
            ))?;
        let state = dir.path().join("state");
        let file = dir.path().join("etcd.yaml");
        std::fs::write(&file, manifest).map_err(BenchError::io("write", &file))?;
        let mut cluster = LocalCluster {
            guard: SupervisorGuard::new(&state),
            bin: bin.to_path_buf(),
            state,
            file,
            _dir: dir,
        };
        let up = cluster
            .quorate(&[
                "up",
                "-d",
                "-f",
                &cluster.file_arg(),
                "--timeout",
                UP_TIMEOUT,
            ])
            .await;
        cluster.guard.remember();
        up.map(|_| cluster)
    }

    fn file_arg(&self) -> String {
        self.file.display().to_string()
    }

    async fn quorate(&self, args: &[&str]) -> Result<String> {
        quorate(&self.bin, &self.state, args, COMMAND_TIMEOUT).await
    }

    /// Runs `quorate <args>` against this cluster's state directory within `limit`; its
    /// standard output.
    pub async fn command(&self, args: &[&str], limit: Duration) -> Result<String> {
        quorate(&self.bin, &self.state, args, limit).await
    }

    /// The members' client URLs, member 0 first.
    pub async fn endpoints(&self) -> Result<Vec<String>> {
        let printed = self.quorate(&["endpoints", NAME]).await?;
        let urls: Vec<String> = printed
            .trim()
            .split(',')
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect();
        if urls.is_empty() {
            return Err(BenchError::failed("`quorate endpoints` printed no URL"));
        }
        Ok(urls)
    }

    /// `quorate apply` of `manifest`, without waiting.
    pub async fn apply(&self, manifest: String) -> Result<()> {
        std::fs::write(&self.file, manifest).map_err(BenchError::io("write", &self.file))?;
        self.quorate(&["apply", "-f", &self.file_arg()])
            .await
            .map(|_| ())
    }

    /// `quorate down --purge`; a note when it failed (the guard kills the processes then).
    pub async fn down(self) -> Option<String> {
        self.quorate(&["down", NAME, "--purge"])
            .await
            .err()
            .map(|e| format!("`down --purge` failed; killed the supervisor instead: {e}"))
    }
}

/// One round with quorate in a fresh state directory (ports are chosen by quorate from the OS).
pub async fn run_round(bin: &Path, round: u32) -> Result<RoundResult> {
    let up_started = Instant::now();
    let cluster = LocalCluster::up(bin, manifest(NAME, 1)).await?;
    let up_time = up_started.elapsed();
    let url = cluster.endpoints().await?.remove(0);

    let writer = Writer::start(&url).await?;
    let monitor = LeaderMonitor::start(&url).await?;

    let t0 = Instant::now();
    let writes_at_t0 = writer.counts();
    let procedure = async {
        cluster.apply(manifest(NAME, 3)).await?;
        Ok::<_, BenchError>(t0.elapsed())
    };
    let converge = wait_for_voters(&url, t0, 3, CONVERGE_TIMEOUT);
    let (apply_time, converged) = tokio::try_join!(procedure, converge)?;

    let (writes, write_errors) = writer.stop().await;
    let leader = monitor.stop().await;
    let mut notes = vec![
        format!("`up -d` (1 member) took {:.2} s", up_time.as_secs_f64()),
        format!("`apply` returned after {:.2} s", apply_time.as_secs_f64()),
    ];
    notes.extend(cluster.down().await);
    Ok(
        RoundResult::new(Method::Quorate, round, t0, converged, leader)
            .with_writes(writes - writes_at_t0, write_errors)
            .with_notes(notes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_has_the_druid_shape() {
        let text = manifest("bench", 3);
        assert!(text.starts_with("apiVersion: druid.gardener.cloud/v1alpha1\nkind: Etcd\n"));
        assert!(text.contains("  name: bench\n"));
        assert!(text.contains("  replicas: 3\n"));
        assert!(text.contains("    heartbeatDuration: 1s\n"));
        assert!(text.contains("  backup: {}\n"));
    }

    #[test]
    fn guard_ignores_missing_and_foreign_pids() {
        let dir = tempfile::tempdir().unwrap();
        let mut guard = SupervisorGuard::new(dir.path());
        guard.remember();
        assert_eq!(guard.pid, None);
        // Our own PID is not a supervisor: dropping must not signal it.
        let lock = dir.path().join("clusters").join(NAME);
        std::fs::create_dir_all(&lock).unwrap();
        std::fs::write(lock.join("supervisor.lock"), std::process::id().to_string()).unwrap();
        guard.remember();
        assert_eq!(guard.pid, Some(std::process::id() as i32));
        assert!(!is_supervisor(std::process::id() as i32));
        drop(guard);
    }
}
