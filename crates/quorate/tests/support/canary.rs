//! A writing client for tests that change a running cluster (`quorate canary` with a 5 s write
//! timeout), and the evidence of elections: raft terms and etcd's own transfer log lines.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use quorate_testkit::ChildGuard;

/// `quorate canary` against `endpoints` with a 5 s write timeout; stopped by [`Canary::finish`].
pub struct Canary {
    child: ChildGuard,
    reader: std::thread::JoinHandle<Lines>,
    /// The canary's stderr (its failed attempts, at debug level), for a failure's message.
    stderr: tempfile::NamedTempFile,
}

/// What the reader saw on the canary's stdout.
#[derive(Default)]
struct Lines {
    /// The last line that parsed as JSON.
    last: Option<serde_json::Value>,
    /// Lines read, and how many of them did not parse.
    read: usize,
    unparsed: usize,
    /// Why reading stopped, when not at the end of the output.
    error: Option<String>,
}

impl Canary {
    pub fn start(endpoints: &[String]) -> Self {
        Self::start_with(endpoints, &[])
    }

    /// As [`Canary::start`], with further arguments (e.g. `--cacert`, `--cert`, `--key`).
    pub fn start_with(endpoints: &[String], args: &[String]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quorate"));
        command
            .args([
                "canary",
                "--endpoints",
                &endpoints.join(","),
                "--prefix",
                "c/",
            ])
            .args(["--interval", "20ms", "--report-every", "500ms"])
            .args(["--write-timeout", "5s"])
            .args(args)
            .env("QUORATE_LOG", "warn,quorate::canary_cmd=debug")
            .stdout(Stdio::piped());
        let stderr = tempfile::NamedTempFile::new().expect("a file for the canary's stderr");
        command.stderr(stderr.reopen().expect("reopen the stderr file"));
        let mut child = ChildGuard::spawn(&mut command).expect("start quorate canary");
        let stdout = child
            .std_child()
            .and_then(|c| c.stdout.take())
            .expect("piped stdout");
        let reader = std::thread::spawn(move || {
            let mut seen = Lines::default();
            let mut stdout = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match stdout.read_until(b'\n', &mut line) {
                    Ok(0) => return seen,
                    Ok(_) => {
                        seen.read += 1;
                        match serde_json::from_slice(&line) {
                            Ok(value) => seen.last = Some(value),
                            Err(_) => seen.unparsed += 1,
                        }
                    }
                    Err(e) => {
                        seen.error = Some(e.to_string());
                        return seen;
                    }
                }
            }
        });
        Self {
            child,
            reader,
            stderr,
        }
    }

    /// Stops the canary and asserts that the change it watched hurt no write: none failed,
    /// none waited 5 s, and it kept writing (over 100 acknowledged). Returns how far its
    /// writes were acknowledged.
    pub fn finish_unhurt(self) -> u64 {
        let (last, said) = self.finish_saying();
        assert_eq!(last["failed"], 0, "no write failed: {last}\n{said}");
        assert!(
            last["longest_wait_ms"].as_u64().unwrap() < 5000,
            "no write waited 5 s: {last}\n{said}"
        );
        assert_eq!(
            last["done"], true,
            "the canary's final line: {last}\n{said}"
        );
        let acked = last["acknowledged_through"].as_u64().unwrap();
        assert!(acked > 100, "the canary kept writing: {last}\n{said}");
        acked
    }

    /// Stops the canary; its last line.
    pub fn finish(self) -> serde_json::Value {
        self.finish_saying().0
    }

    /// Stops the canary; its last line, and what else it said (exit status, lines read, the
    /// tail of its stderr) for a failure's message.
    fn finish_saying(mut self) -> (serde_json::Value, String) {
        self.child
            .signal(nix::sys::signal::Signal::SIGTERM)
            .expect("signal the canary");
        let status = self
            .child
            .wait_timeout(Duration::from_secs(30))
            .expect("waiting for the canary")
            .expect("the canary stops on SIGTERM");
        let lines = self.reader.join().expect("reader thread");
        let stderr = std::fs::read_to_string(self.stderr.path()).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let said = format!(
            "canary: {status}; {} lines read, {} not JSON{}; stderr's last lines:\n{}",
            lines.read,
            lines.unparsed,
            lines
                .error
                .map(|e| format!(", reading stopped: {e}"))
                .unwrap_or_default(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        (lines.last.expect("a final line"), said)
    }
}

/// The raft term as the member at `url` reports it: it grows by one per election, planned
/// (a leadership transfer) or not.
pub async fn raft_term(url: &str) -> u64 {
    let mut client = etcd_client::Client::connect([url], None)
        .await
        .expect("connect");
    client.status().await.expect("status").raft_term()
}

/// How many leadership transfers etcd started, by its own logs (`starts to transfer
/// leadership`), over every member's etcd log (removed members' logs are in the trash).
pub fn leadership_transfers(cluster_dir: &Path) -> usize {
    let mut logs = Vec::new();
    for sub in ["members", "trash"] {
        for entry in std::fs::read_dir(cluster_dir.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            logs.push(entry.path().join("etcd.log"));
        }
    }
    logs.iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .matches("starts to transfer leadership")
                .count()
        })
        .sum()
}

/// Backups to the Local provider, a delta every second.
pub fn with_backups(name: &str, replicas: u32) -> String {
    super::manifest(name, replicas, "").replace(
        "  backup: {}\n",
        "  backup:\n    store:\n      provider: Local\n      container: bucket\n      prefix: main\n    \
         deltaSnapshotPeriod: 1s\n",
    )
}

/// `(lastRevision, isFinal)` of the newest full snapshot in the cluster's Local bucket, from
/// the snapshot names (`Full-<start>-<last>-<unix>[.gz][.final]`).
pub fn newest_full_snapshot(local: &super::Local, name: &str) -> Option<(i64, bool)> {
    let dir = local.cluster_dir(name).join("backups/bucket/main/v2");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let last = file
                .strip_prefix("Full-")?
                .split('-')
                .nth(1)?
                .parse()
                .ok()?;
            Some((last, file.ends_with(".final")))
        })
        .max()
}
