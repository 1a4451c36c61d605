//! `quorate canary`: a write-availability probe for maintenance windows. It writes numbered keys
//! one after another, retrying each until etcd acknowledges it, and prints running totals as
//! JSON lines — so "did any client write fail while we enabled TLS / scaled / replaced a
//! member?" has a measured answer instead of a guess.
//!
//! Keys are `<prefix><seq>` (seq zero-padded to 10 digits) with the value `<seq>`; a retried
//! write of the same key is harmless, so an attempt that timed out after etcd applied it cannot
//! produce a wrong value. Writes are sequential: every key up to `acknowledged_through` was
//! acknowledged, which makes "no acknowledged write was lost" checkable afterwards with one
//! prefix count.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quorate_core::history_line::{HistoryLine, HistoryOp, HistoryOutcome, OpLine};
use quorate_etcd::{ClusterClient, EtcdError, EtcdTimeouts, EtcdTls};
use serde::Serialize;
use tokio::time::MissedTickBehavior;

/// Pause between failed attempts of one write.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long one attempt may wait before it is given up and retried. etcd drops a proposal that
/// reaches a leader while it hands leadership over, without telling the member that forwarded
/// it, so that request would wait for etcd's own request timeout (7 s); a client that would
/// notice retries it instead. The longest wait still shows such a retry.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// What the canary was asked to do.
#[derive(Debug)]
pub struct CanaryPlan {
    /// Client URLs.
    pub endpoints: Vec<String>,
    /// TLS for https endpoints.
    pub tls: Option<EtcdTls>,
    /// Key prefix.
    pub prefix: String,
    /// Time between the starts of consecutive writes.
    pub interval: Duration,
    /// How long one write may take, retries included, before it counts as failed.
    pub write_timeout: Duration,
    /// Stop after this many writes (acknowledged or failed); run until a signal otherwise.
    pub count: Option<u64>,
    /// How often a progress line is printed.
    pub report_every: Duration,
    /// Where to write every attempt as a history file (JSON lines,
    /// `docs/reference/history-format.md`), for `tools/history-check`.
    pub history: Option<PathBuf>,
}

/// Why the canary could not run.
#[derive(Debug, thiserror::Error)]
pub enum CanaryError {
    /// The cluster could not be reached at all.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// The history file could not be written.
    #[error(
        "cannot write the history file {path}: {source} (choose a writable path for --history)"
    )]
    History {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Every attempt, as history lines: client 0, one put per attempt; an attempt without an
/// answer is an unknown outcome (it may have applied).
struct HistoryWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    origin: Instant,
}

impl HistoryWriter {
    fn create(path: &Path, origin: Instant) -> Result<Self, CanaryError> {
        let file = std::fs::File::create(path).map_err(|source| CanaryError::History {
            path: path.to_owned(),
            source,
        })?;
        Ok(HistoryWriter {
            path: path.to_owned(),
            out: BufWriter::new(file),
            origin,
        })
    }

    fn attempt(
        &mut self,
        key: &str,
        value: &str,
        call: Instant,
        answer: &Result<i64, String>,
    ) -> Result<(), CanaryError> {
        let ns = |t: Instant| t.duration_since(self.origin).as_nanos() as u64;
        let mut line = OpLine {
            client: 0,
            call_ns: ns(call),
            return_ns: ns(Instant::now()),
            op: HistoryOp::Put,
            key: key.to_owned(),
            value: Some(value.to_owned()),
            ..OpLine::default()
        };
        match answer {
            Ok(revision) => line.revision = Some(*revision),
            Err(e) => {
                line.outcome = HistoryOutcome::Unknown;
                line.error = Some(e.clone());
            }
        }
        writeln!(self.out, "{}", HistoryLine::Op(line).to_json()).map_err(|e| self.failed(e))
    }

    fn finish(mut self) -> Result<(), CanaryError> {
        self.out.flush().map_err(|e| self.failed(e))
    }

    fn failed(&self, source: std::io::Error) -> CanaryError {
        CanaryError::History {
            path: self.path.clone(),
            source,
        }
    }
}

/// Running totals; each progress line is one of these as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CanaryTotals {
    /// Writes etcd acknowledged.
    pub acknowledged: u64,
    /// The highest sequence number acknowledged.
    pub acknowledged_through: u64,
    /// Writes given up after `write_timeout` (the client saw a failure).
    pub failed: u64,
    /// Attempts that failed and were retried (outages the client rode out).
    pub retried_attempts: u64,
    /// The longest time one write took from its first attempt to its acknowledgement.
    pub longest_wait_ms: u64,
    /// The store revision of the last acknowledged write.
    pub last_revision: i64,
    /// The last error seen, if any.
    pub last_error: Option<String>,
    /// Set on the last line, once the canary stops.
    pub done: bool,
}

impl CanaryTotals {
    /// Adds the outcome of write `seq`, which took `waited` over `attempts` attempts.
    pub fn record(
        &mut self,
        seq: u64,
        attempts: u64,
        waited: Duration,
        outcome: Result<i64, String>,
    ) {
        match outcome {
            Ok(revision) => {
                self.acknowledged += 1;
                self.acknowledged_through = self.acknowledged_through.max(seq);
                self.last_revision = revision;
                self.retried_attempts += attempts.saturating_sub(1);
                self.longest_wait_ms = self.longest_wait_ms.max(waited.as_millis() as u64);
            }
            Err(error) => {
                self.failed += 1;
                self.retried_attempts += attempts.saturating_sub(1);
                self.last_error = Some(error);
            }
        }
    }
}

/// The key of write `seq`.
pub fn canary_key(prefix: &str, seq: u64) -> String {
    format!("{prefix}{seq:010}")
}

/// `quorate canary`: runs `plan`; fails the command when a write failed.
pub async fn run_command(
    plan: CanaryPlan,
) -> Result<std::process::ExitCode, Box<dyn std::error::Error>> {
    let totals = run(plan).await?;
    Ok(if totals.failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

/// Runs the canary until `count` writes are done or SIGINT/SIGTERM arrives; returns the totals
/// (also printed as the last line, with `done: true`).
pub async fn run(plan: CanaryPlan) -> Result<CanaryTotals, CanaryError> {
    let origin = Instant::now();
    let mut history = match &plan.history {
        Some(path) => Some(HistoryWriter::create(path, origin)?),
        None => None,
    };
    let timeouts = EtcdTimeouts {
        connect: Duration::from_secs(2),
        request: ATTEMPT_TIMEOUT.min(plan.write_timeout),
        ..EtcdTimeouts::default()
    };
    let client = ClusterClient::new(&plan.endpoints, plan.tls.as_ref(), timeouts).await?;
    client.connect_all().await;
    let mut totals = CanaryTotals::default();
    let mut ticker = tokio::time::interval(plan.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_report = Instant::now();
    let mut stop = crate::signals::shutdown_on_signals();
    let mut seq = 0u64;
    loop {
        if plan.count.is_some_and(|n| seq >= n) {
            break;
        }
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => break,
            _ = ticker.tick() => {}
        }
        seq += 1;
        let key = canary_key(&plan.prefix, seq);
        let write = write_until_acknowledged(&client, &key, seq, plan.write_timeout, &mut history);
        let (attempts, waited, outcome) = tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => break,
            done = write => done,
        };
        let outcome = outcome?;
        totals.record(seq, attempts, waited, outcome);
        if last_report.elapsed() >= plan.report_every {
            print_line(&totals);
            last_report = Instant::now();
        }
    }
    totals.done = true;
    print_line(&totals);
    if let Some(history) = history {
        history.finish()?;
    }
    Ok(totals)
}

/// Writes `key` = `seq` until acknowledged or `timeout` has passed since the first attempt,
/// recording each attempt in `history`. The outcome is `Err` only when the history cannot be
/// written.
async fn write_until_acknowledged(
    client: &ClusterClient,
    key: &str,
    seq: u64,
    timeout: Duration,
    history: &mut Option<HistoryWriter>,
) -> (u64, Duration, Result<Result<i64, String>, CanaryError>) {
    let started = Instant::now();
    let value = seq.to_string();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = timeout.saturating_sub(started.elapsed());
        let call = Instant::now();
        let attempt = client.put(key.as_bytes(), value.as_bytes());
        let answer = match tokio::time::timeout(left, attempt).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        };
        if let Some(h) = history.as_mut()
            && let Err(e) = h.attempt(key, &value, call, &answer)
        {
            return (attempts, started.elapsed(), Err(e));
        }
        match answer {
            Ok(revision) => return (attempts, started.elapsed(), Ok(Ok(revision))),
            Err(e) if started.elapsed() + RETRY_PAUSE < timeout => {
                tracing::debug!(key, attempts, "write failed, retrying: {e}");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(e) => return (attempts, started.elapsed(), Ok(Err(e))),
        }
    }
}

fn print_line(totals: &CanaryTotals) {
    let line = serde_json::to_string(totals).expect("totals serialize");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_acknowledged_failed_and_retried_writes() {
        let mut t = CanaryTotals::default();
        t.record(1, 1, Duration::from_millis(3), Ok(10));
        t.record(2, 4, Duration::from_millis(900), Ok(11));
        t.record(3, 7, Duration::from_secs(60), Err("unavailable".into()));
        assert_eq!(t.acknowledged, 2);
        assert_eq!(t.acknowledged_through, 2);
        assert_eq!(t.failed, 1);
        assert_eq!(t.retried_attempts, 3 + 6);
        assert_eq!(
            t.longest_wait_ms, 900,
            "failed writes do not count as waits"
        );
        assert_eq!(t.last_revision, 11);
        assert_eq!(t.last_error.as_deref(), Some("unavailable"));
    }

    #[test]
    fn keys_sort_in_write_order() {
        assert_eq!(canary_key("c/", 7), "c/0000000007");
        assert!(canary_key("c/", 9) < canary_key("c/", 10));
    }
}
