//! The operator as its own process (`quorate operator`), so its memory and CPU are its alone:
//! started against the benchmark's API server, its `/metrics` read over plain HTTP, its
//! resident memory sampled from `/proc/<pid>/status`, stopped with SIGTERM.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorate_testkit::{ChildGuard, Signal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{BenchError, Result};

/// How often the operator's resident memory is sampled.
pub const RSS_SAMPLE_PERIOD: Duration = Duration::from_millis(200);

/// How long the operator may take to answer `/healthz` after its start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `quorate operator`; killed when dropped.
pub struct OperatorProcess {
    child: ChildGuard,
    http: String,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    sampler: RssSampler,
}

impl OperatorProcess {
    /// Starts `quorate operator` with the given `--etcd-workers` against the API server of
    /// `kubeconfig`, with webhooks and leader election off and every other setting at its
    /// default, and waits until its `/readyz` answers.
    /// `shard` is `(index, count)`: the process runs with `--shard index/count`.
    pub async fn start(
        quorate: &Path,
        kubeconfig: &Path,
        workers: u16,
        shard: (u32, u32),
        dir: &Path,
    ) -> Result<OperatorProcess> {
        let port = quorate_testkit::free_port();
        let http = format!("127.0.0.1:{port}");
        let (index, count) = shard;
        let log = dir.join(format!(
            "operator-{workers}-workers-shard-{index}-of-{count}.log"
        ));
        let out = std::fs::File::create(&log).map_err(BenchError::io("create", &log))?;
        let err = out.try_clone().map_err(BenchError::io("open", &log))?;
        let mut cmd = std::process::Command::new(quorate);
        cmd.arg("operator")
            .arg("--disable-webhooks")
            .arg("--leader-election=false")
            .arg(format!("--http-address={http}"))
            .arg(format!("--etcd-workers={workers}"))
            .arg(format!("--shard={index}/{count}"))
            .env("KUBECONFIG", kubeconfig)
            .env_remove("QUORATE_LOG")
            .env_remove("POD_NAME")
            .env_remove("POD_NAMESPACE")
            .env_remove("IMAGEVECTOR_OVERWRITE")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err);
        let mut child = ChildGuard::spawn(&mut cmd).map_err(BenchError::io("start", quorate))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(BenchError::failed(format!(
                    "quorate operator exited during start with {status}; log:\n{}",
                    tail(&log, 20)
                )));
            }
            if let Ok((200, _)) = http_get(&http, "/readyz").await {
                break;
            }
            if Instant::now() > deadline {
                return Err(BenchError::failed(format!(
                    "quorate operator did not answer /readyz on {http} within {START_TIMEOUT:?}; \
                     log:\n{}",
                    tail(&log, 20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sampler = RssSampler::start(child.pid());
        Ok(OperatorProcess {
            child,
            http,
            log,
            sampler,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The operator's `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        match http_get(&self.http, "/metrics").await {
            Ok((200, body)) => Ok(body),
            Ok((code, body)) => Err(BenchError::failed(format!(
                "the operator's /metrics answered {code}: {body}"
            ))),
            Err(e) => Err(BenchError::failed(format!(
                "reading the operator's /metrics on {}: {e}",
                self.http
            ))),
        }
    }

    /// Fails when the operator has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(BenchError::failed(format!(
                "quorate operator exited with {status}; log:\n{}",
                tail(&self.log, 20)
            ))),
            _ => Ok(()),
        }
    }

    /// The memory samples so far.
    pub fn rss(&self) -> RssSamples {
        self.sampler.samples()
    }

    /// Reads the final memory figures, then stops the operator with SIGTERM (SIGKILL after
    /// 10 s) and returns them with the exit status.
    pub fn stop(mut self) -> (Memory, String) {
        let status = read_status(self.pid());
        let samples = self.sampler.samples();
        self.sampler.stop();
        let memory = Memory {
            hwm_kib: status.as_ref().and_then(|s| s.hwm_kib),
            rss_kib: status.as_ref().and_then(|s| s.rss_kib),
            peak_sampled_kib: samples.peak_kib,
            samples: samples.count,
        };
        let _ = self.child.signal(Signal::SIGTERM);
        let exit = match self.child.wait_timeout(Duration::from_secs(10)) {
            Ok(Some(status)) => status.to_string(),
            _ => match self.child.kill() {
                Ok(status) => format!("did not stop within 10 s of SIGTERM; killed ({status})"),
                Err(e) => format!("could not be killed: {e}"),
            },
        };
        (memory, exit)
    }
}

/// The operator as M processes, one per share (`--shard I/M`), read as one: CPU and passes
/// are their sum, memory the largest process's (what one replica needs).
pub struct OperatorGroup {
    processes: Vec<OperatorProcess>,
}

impl OperatorGroup {
    /// Starts `replicas` processes (see [`OperatorProcess::start`]), each with its share.
    pub async fn start(
        quorate: &Path,
        kubeconfig: &Path,
        workers: u16,
        replicas: u32,
        dir: &Path,
    ) -> Result<OperatorGroup> {
        let mut processes = Vec::new();
        for index in 0..replicas.max(1) {
            processes.push(
                OperatorProcess::start(quorate, kubeconfig, workers, (index, replicas.max(1)), dir)
                    .await?,
            );
        }
        Ok(OperatorGroup { processes })
    }

    /// The process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(OperatorProcess::pid).collect()
    }

    /// Every process's `/metrics` text, one after the other (counters add up when parsed).
    pub async fn metrics(&self) -> Result<String> {
        let mut all = String::new();
        for p in &self.processes {
            all.push_str(&p.metrics().await?);
            all.push('\n');
        }
        Ok(all)
    }

    /// Fails when any process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.processes
            .iter_mut()
            .try_for_each(OperatorProcess::check_running)
    }

    /// The memory samples so far: the largest process's peak and latest, all samples counted.
    pub fn rss(&self) -> RssSamples {
        self.processes
            .iter()
            .map(OperatorProcess::rss)
            .fold(RssSamples::default(), |a, b| RssSamples {
                peak_kib: a.peak_kib.max(b.peak_kib),
                last_kib: a.last_kib.max(b.last_kib),
                count: a.count + b.count,
            })
    }

    /// The logs.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.processes.iter().map(|p| p.log.clone()).collect()
    }

    /// Stops every process (see [`OperatorProcess::stop`]): the largest memory figures and each
    /// exit status.
    pub fn stop(self) -> (Memory, String) {
        let mut memory = Memory::default();
        let mut exits = Vec::new();
        for p in self.processes {
            let (m, exit) = p.stop();
            memory = Memory {
                hwm_kib: m.hwm_kib.max(memory.hwm_kib),
                rss_kib: m.rss_kib.max(memory.rss_kib),
                peak_sampled_kib: m.peak_sampled_kib.max(memory.peak_sampled_kib),
                samples: m.samples + memory.samples,
            };
            exits.push(exit);
        }
        exits.dedup();
        (memory, exits.join("; "))
    }
}

/// Memory of the operator at the end of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Memory {
    /// `VmHWM`: the peak resident set the kernel recorded over the process's life.
    pub hwm_kib: Option<u64>,
    /// `VmRSS` at the end.
    pub rss_kib: Option<u64>,
    /// The highest `VmRSS` sampled.
    pub peak_sampled_kib: u64,
    /// How many samples were taken.
    pub samples: u64,
}

/// The sampled `VmRSS` so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RssSamples {
    /// Highest sample, KiB.
    pub peak_kib: u64,
    /// Latest sample, KiB.
    pub last_kib: u64,
    /// Number of samples.
    pub count: u64,
}

struct RssSampler {
    samples: Arc<Mutex<RssSamples>>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let samples = Arc::new(Mutex::new(RssSamples::default()));
        let shared = samples.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(RSS_SAMPLE_PERIOD);
            loop {
                tick.tick().await;
                let Some(rss) = read_status(pid).and_then(|s| s.rss_kib) else {
                    return;
                };
                if let Ok(mut s) = shared.lock() {
                    s.peak_kib = s.peak_kib.max(rss);
                    s.last_kib = rss;
                    s.count += 1;
                }
            }
        });
        RssSampler { samples, task }
    }

    fn samples(&self) -> RssSamples {
        self.samples.lock().map(|s| *s).unwrap_or_default()
    }

    fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `VmRSS` and `VmHWM` of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStatus {
    /// Resident now, KiB.
    pub rss_kib: Option<u64>,
    /// Peak resident, KiB.
    pub hwm_kib: Option<u64>,
}

/// Reads `/proc/<pid>/status`; `None` when the process is gone.
pub fn read_status(pid: u32) -> Option<ProcStatus> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(parse_status(&text))
}

/// The `VmRSS` and `VmHWM` lines (in kB) of a `/proc/<pid>/status` text.
pub fn parse_status(text: &str) -> ProcStatus {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    ProcStatus {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
    }
}

/// A plain HTTP/1.1 GET (`Connection: close`) of `path` on `addr`: the status code and body.
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::other("no answer within 10 s"))??;
    parse_response(&response)
}

/// Status code and body of an HTTP/1.1 response (plain or chunked).
fn parse_response(response: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = |what: &str| std::io::Error::other(format!("bad HTTP response: {what}"));
    let text = String::from_utf8_lossy(response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let code = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((code, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or_else(|| bad("chunk size"))?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("chunk size"))?;
        if size == 0 {
            return Ok((code, out));
        }
        let chunk = after.get(..size).ok_or_else(|| bad("short chunk"))?;
        out.push_str(chunk);
        rest = after.get(size + 2..).ok_or_else(|| bad("chunk end"))?;
    }
}

fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Counts the lines of the operator's logs at WARN and ERROR level, with the first few.
pub fn log_warnings(paths: &[PathBuf]) -> (usize, Vec<String>) {
    let text: String = paths
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect::<Vec<_>>()
        .join("\n");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    let first = warnings.iter().take(3).map(|l| l.to_string()).collect();
    (warnings.len(), first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_in_kib() {
        let text =
            "Name:\tquorate\nVmPeak:\t  900000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   30720 kB\n";
        assert_eq!(
            parse_status(text),
            ProcStatus {
                rss_kib: Some(30720),
                hwm_kib: Some(40960)
            }
        );
        let own = read_status(std::process::id()).unwrap();
        assert!(own.rss_kib.unwrap() > 0 && own.hwm_kib.unwrap() >= own.rss_kib.unwrap());
    }

    #[test]
    fn plain_and_chunked_responses() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        assert_eq!(parse_response(plain).unwrap(), (200, "ok".to_string()));
        let chunked =
            b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n4\r\nstar\r\n4\r\nting\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked).unwrap(),
            (503, "starting".to_string())
        );
        assert!(parse_response(b"garbage").is_err());
    }
}
