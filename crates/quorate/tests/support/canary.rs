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
    reader: std::thread::JoinHandle<Option<serde_json::Value>>,
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
            .env("QUORATE_LOG", "warn")
            .stdout(Stdio::piped());
        let mut child = ChildGuard::spawn(&mut command).expect("start quorate canary");
        let stdout = child
            .std_child()
            .and_then(|c| c.stdout.take())
            .expect("piped stdout");
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| serde_json::from_str(&l).ok())
                .last()
        });
        Self { child, reader }
    }

    /// Stops the canary and asserts that the change it watched hurt no write: none failed,
    /// none waited 5 s, and it kept writing (over 100 acknowledged). Returns how far its
    /// writes were acknowledged.
    pub fn finish_unhurt(self) -> u64 {
        let last = self.finish();
        assert_eq!(last["failed"], 0, "no write failed: {last}");
        assert!(
            last["longest_wait_ms"].as_u64().unwrap() < 5000,
            "no write waited 5 s: {last}"
        );
        let acked = last["acknowledged_through"].as_u64().unwrap();
        assert!(acked > 100, "the canary kept writing: {last}");
        acked
    }

    /// Stops the canary; its last line.
    pub fn finish(mut self) -> serde_json::Value {
        self.child
            .signal(nix::sys::signal::Signal::SIGTERM)
            .expect("signal the canary");
        self.child
            .wait_timeout(Duration::from_secs(30))
            .expect("waiting for the canary")
            .expect("the canary stops on SIGTERM");
        self.reader
            .join()
            .expect("reader thread")
            .expect("a final line")
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
