//! Drives the real `quorate` binary against real etcd in a private state directory, and kills
//! every process it started when dropped (also when a test panics).

#![allow(dead_code)]

pub mod canary;
pub mod versions;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// Slices the ports local clusters choose from are cut into, one per environment in turn.
const PORT_SLICES: u16 = 8;

/// A private local-mode environment.
pub struct Local {
    pub state: tempfile::TempDir,
    bin: PathBuf,
    /// `QUORATE_LOCAL_PORTS` for this environment's clusters.
    ports: String,
}

impl Local {
    pub fn new() -> Self {
        Self {
            state: tempfile::tempdir().expect("temp dir"),
            bin: PathBuf::from(env!("CARGO_BIN_EXE_quorate")),
            ports: own_port_slice(),
        }
    }

    /// The command `quorate --state-dir <state> ARGS`, for a test that adds to it.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .arg("--state-dir")
            .arg(self.state.path())
            .args(args)
            .env("QUORATE_LOG", "warn")
            .env("QUORATE_LOCAL_PORTS", &self.ports);
        command
    }

    /// Runs `quorate --state-dir <state> ARGS`.
    pub fn quorate(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run quorate")
    }

    /// Like [`Self::quorate`], panicking with the output unless it succeeds.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.quorate(args);
        assert!(
            out.status.success(),
            "quorate {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_tails()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The last lines of every member's agent and etcd log and every lease, so a failed
    /// command explains itself.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        let clusters = self.state.path().join("clusters");
        let mut files = Vec::new();
        for cluster in std::fs::read_dir(&clusters).into_iter().flatten().flatten() {
            for member in std::fs::read_dir(cluster.path().join("members"))
                .into_iter()
                .flatten()
                .flatten()
            {
                files.push(member.path().join("agent.log"));
                files.push(member.path().join("etcd.log"));
            }
            for lease in std::fs::read_dir(cluster.path().join("leases"))
                .into_iter()
                .flatten()
                .flatten()
            {
                files.push(lease.path());
            }
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            out.push_str(&format!("--- {}\n{tail}\n", file.display()));
        }
        out
    }

    /// Writes a manifest file and returns its path.
    pub fn manifest(&self, file: &str, text: &str) -> PathBuf {
        let path = self.state.path().join(file);
        std::fs::write(&path, text).expect("write manifest");
        path
    }

    pub fn cluster_dir(&self, name: &str) -> PathBuf {
        self.state.path().join("clusters").join(name)
    }

    /// The store Secret `s3-creds` of cluster `name`, as local mode reads it (its keys as
    /// files), with test credentials.
    pub fn s3_secret(&self, name: &str) {
        let secret = self.cluster_dir(name).join("secrets/s3-creds");
        std::fs::create_dir_all(&secret).unwrap();
        for (k, v) in [
            ("accessKeyID", "testing"),
            ("secretAccessKey", "testing"),
            ("region", "us-east-1"),
        ] {
            std::fs::write(secret.join(k), v).unwrap();
        }
    }

    /// Agent port of member `i`, from the cluster's rendered configuration.
    pub fn agent_port(&self, name: &str, i: usize) -> u16 {
        let config: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.cluster_dir(name).join("config.json")).unwrap(),
        )
        .unwrap();
        config["members"][i]["agentPort"].as_u64().unwrap() as u16
    }

    /// The agents' bearer token of cluster `name` (made by `up`).
    pub fn agent_token(&self, name: &str) -> String {
        let path = self
            .cluster_dir(name)
            .join(format!("secrets/{name}-agent-token/token"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The `/metrics` text of member `i`'s agent.
    pub fn agent_metrics(&self, name: &str, i: usize) -> String {
        let (code, body) = http_get(self.agent_port(name, i), "/metrics");
        assert_eq!(code, 200, "{body}");
        body
    }

    /// Client URLs of a cluster.
    /// The newest revision `quorate backups list` shows for cluster `name` (0 for none).
    pub fn newest_backup(&self, name: &str) -> i64 {
        self.ok(&["backups", "list", name])
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<i64>().ok())
            .max()
            .unwrap_or(0)
    }

    pub fn endpoints(&self, name: &str) -> Vec<String> {
        self.ok(&["endpoints", name])
            .trim()
            .split(',')
            .map(String::from)
            .collect()
    }

    /// PID of the process whose command line contains every one of `needles`.
    pub fn find_pid(&self, needles: &[&str]) -> Option<i32> {
        find_process(needles)
    }

    /// [`Self::find_pid`] as a function another thread can own.
    pub fn process_finder() -> fn(&[&str]) -> Option<i32> {
        find_process
    }

    /// PID of member `member`'s etcd.
    pub fn etcd_pid(&self, cluster: &str, member: &str) -> Option<i32> {
        let data = self
            .cluster_dir(cluster)
            .join("members")
            .join(member)
            .join("data");
        self.find_pid(&["etcd", &format!("--data-dir={}", data.display())])
    }

    /// PID of member `member`'s agent.
    pub fn agent_pid(&self, cluster: &str, member: &str) -> Option<i32> {
        let dir = self.cluster_dir(cluster);
        self.find_pid(&[
            " agent ",
            &dir.display().to_string(),
            &format!("--member {member} "),
        ])
    }

    /// Kills one cluster's supervisor process group (supervisor, agents and etcds) at once and
    /// waits until none of its processes is left, as a machine crash would leave it.
    pub fn kill_cluster(&self, name: &str) {
        let dir = self.cluster_dir(name).display().to_string();
        let before = find_processes(&[&dir]);
        let lock = self.cluster_dir(name).join("supervisor.lock");
        if let Some(pid) = std::fs::read_to_string(lock)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            // The supervisor leads its own process group; agents run in sessions of their
            // own (they outlive it), with their etcds: each is killed below.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for pid in &before {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        eventually(
            "the cluster's processes to exit",
            Duration::from_secs(10),
            || self.find_pid(&[&dir]).is_none().then_some(()),
        );
        // A dying process's command line goes with its memory, before its sockets close: wait
        // for the processes themselves, or the next `up` finds their ports in use.
        eventually(
            "the cluster's processes to be gone",
            Duration::from_secs(10),
            || {
                before
                    .iter()
                    .all(|pid| quorate_chaos::cluster::exited(*pid))
                    .then_some(())
            },
        );
    }

    /// Kills every process started under this environment's state directory.
    fn kill_all(&self) {
        let clusters = self.state.path().join("clusters");
        for entry in std::fs::read_dir(clusters).into_iter().flatten().flatten() {
            let lock = entry.path().join("supervisor.lock");
            if let Some(pid) = std::fs::read_to_string(lock)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let root = self.state.path().display().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(pid) = self.find_pid(&[&root]) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// PIDs of every process whose command line contains every one of `needles`.
fn find_processes(needles: &[&str]) -> Vec<i32> {
    quorate_chaos::cluster::find_processes(needles)
}

/// PID of the process whose command line contains every one of `needles`.
fn find_process(needles: &[&str]) -> Option<i32> {
    quorate_proc::pids_naming(needles)
        .first()
        .map(|pid| *pid as i32)
}

/// An `Etcd` manifest for tests: `replicas` members, a 1s lease heartbeat so status follows
/// quickly, plus `extra` spec lines (indented two spaces).
pub fn manifest(name: &str, replicas: u32, extra: &str) -> String {
    format!(
        "apiVersion: druid.gardener.cloud/v1alpha1
kind: Etcd
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  labels:
    app: {name}
  etcd:
    heartbeatDuration: 1s
  backup: {{}}
{extra}"
    )
}

/// Polls `f` until it returns `Some`, panicking with `what` after `timeout`.
pub fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A tokio runtime for the async parts of a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Every key under `prefix` with its value and mod revision, read from the member at `url`
/// only (serializable).
pub async fn dump(url: &str, prefix: &str) -> Vec<(String, String, i64)> {
    let mut client = etcd_client::Client::connect([url], None)
        .await
        .expect("connect");
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_serializable();
    let resp = client
        .get(prefix, Some(options))
        .await
        .expect("serializable get");
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                kv.value_str().unwrap().to_string(),
                kv.mod_revision(),
            )
        })
        .collect()
}

/// Writes `<prefix><i>` = `v` for i in 0..n; returns the revision of the last write.
pub async fn put_keys(endpoints: &[String], prefix: &str, n: usize) -> i64 {
    let mut client = etcd_client::Client::connect(endpoints, None)
        .await
        .expect("connect");
    let mut revision = 0;
    for i in 0..n {
        let put = client
            .put(format!("{prefix}{i:03}"), "v", None)
            .await
            .expect("put");
        revision = put.header().expect("header").revision();
    }
    revision
}

/// Condition `type_` of cluster `name` as its status file has it: (status, message).
pub fn condition(local: &Local, name: &str, type_: &str) -> Option<(String, String)> {
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(local.cluster_dir(name).join("status.json")).ok()?,
    )
    .ok()?;
    let c = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_string(),
        c["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// `cp -a from to`.
pub fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// `GET path` on a loopback port: the status code and the body (de-chunked).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    http_get_as(port, path, None)
}

/// `GET path` with `Authorization: Bearer <token>` when a token is given.
pub fn http_get_as(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let code = response.split(' ').nth(1).unwrap().parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (code, body.to_string());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    (code, out)
}

/// The value of the first metric line of `series`: its name, and those of its labels given
/// (`name{a="x"}` matches `name{etcd="c",member="m",a="x"} 1`), in any order.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    let (name, wanted) = split_series(series);
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (line_name, labels) = split_series(series);
            (line_name == name && wanted.iter().all(|w| labels.contains(w)))
                .then(|| value.parse().ok())
                .flatten()
        })
}

/// `name{a="x",b="y"}` as the name and its `a="x"` pairs.
fn split_series(series: &str) -> (&str, Vec<String>) {
    let Some((name, rest)) = series.split_once('{') else {
        return (series, Vec::new());
    };
    let body = rest.strip_suffix('}').unwrap_or(rest);
    let mut labels = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in body.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                labels.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        labels.push(current);
    }
    (name, labels)
}

/// Asserts that every member at `endpoints` holds the `before` keys under `k/` written before
/// a change (none checked when 0) and at least the `acked` writes the canary had acknowledged
/// under `c/`: a change of the cluster lost nothing.
pub fn every_write_on_every_member(endpoints: &[String], before: usize, acked: u64) {
    runtime().block_on(async {
        for url in endpoints {
            if before > 0 {
                assert_eq!(dump(url, "k/").await.len(), before, "keys before on {url}");
            }
            let keys = dump(url, "c/").await;
            assert!(
                keys.len() as u64 >= acked,
                "every acknowledged write is on {url}: {} of {acked}",
                keys.len()
            );
        }
    });
}

/// A slice of the lane's `QUORATE_LOCAL_PORTS` (or of 20000-32000), the next one for each
/// environment: tests of one binary run side by side, and two clusters that choose a port the
/// other has chosen but not yet bound crash one of them at start ("address already in use").
fn own_port_slice() -> String {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let (low, high) = std::env::var("QUORATE_LOCAL_PORTS")
        .ok()
        .and_then(|r| {
            let (low, high) = r.split_once('-')?;
            Some((
                low.trim().parse::<u16>().ok()?,
                high.trim().parse::<u16>().ok()?,
            ))
        })
        .filter(|(low, high)| high.saturating_sub(*low) >= PORT_SLICES * 50)
        .unwrap_or((20_000, 32_000));
    let width = (high - low) / PORT_SLICES;
    let slice = NEXT.fetch_add(1, Ordering::Relaxed) % PORT_SLICES;
    let start = low + slice * width;
    format!("{start}-{}", start + width)
}
