//! What the backup benchmark measures, round by round, and the arithmetic on it (spreads,
//! throughput, paired drops); [`super::report`] turns it into the markdown report.

use std::time::Duration;

use quorate_backup::restore::RestoreReport;

use super::deltas::{CatchUpStats, DeltaStats};
use super::load::Filled;
use crate::report::MachineFacts;

/// Target: quorate's full snapshot at least this fraction of `etcdctl snapshot save`'s MB/s.
pub const TARGET_SNAPSHOT_RATIO: f64 = 0.9;
/// Target: writes/s with delta backups at most this many percent lower than without.
pub const TARGET_WRITE_DROP_PCT: f64 = 5.0;

/// Who did it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// quorate's code.
    Quorate,
    /// etcd's own tool.
    Etcdctl,
}

/// One full snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotRound {
    /// Round, from 1.
    pub round: u32,
    /// Who took it.
    pub side: Side,
    /// Call until the file is in place.
    pub elapsed: Duration,
    /// File size.
    pub bytes: u64,
}

/// How a snapshot went into the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadKind {
    /// The saved file, gzip.
    Gzip,
    /// The saved file, uncompressed.
    Plain,
    /// Straight from etcd through gzip into the store (the agent's path).
    Streamed,
}

impl UploadKind {
    pub(super) fn label(self) -> &'static str {
        match self {
            UploadKind::Gzip => "saved file, gzip (`.gz`)",
            UploadKind::Plain => "saved file, uncompressed",
            UploadKind::Streamed => "snapshot streamed from etcd through gzip (agent path)",
        }
    }

    pub(super) fn short(self) -> &'static str {
        match self {
            UploadKind::Gzip => "upload gzip",
            UploadKind::Plain => "upload uncompressed",
            UploadKind::Streamed => "snapshot → gzip → store",
        }
    }
}

/// One upload.
#[derive(Clone, Debug)]
pub struct UploadRound {
    /// Round, from 1.
    pub round: u32,
    /// What was uploaded how.
    pub kind: UploadKind,
    /// Until the object was complete.
    pub elapsed: Duration,
    /// Snapshot bytes read.
    pub input_bytes: u64,
    /// Bytes stored.
    pub stored_bytes: u64,
}

/// What a restore measurement ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreKind {
    /// quorate's `restore`, no deltas.
    Quorate,
    /// `etcdctl snapshot restore`.
    Etcdctl,
    /// `etcdctl snapshot status` alone.
    Status,
}

impl RestoreKind {
    pub(super) fn label(self) -> &'static str {
        match self {
            RestoreKind::Quorate => "quorate `restore` (full snapshot, no deltas)",
            RestoreKind::Etcdctl => "`etcdctl snapshot restore`",
            RestoreKind::Status => {
                "`etcdctl snapshot status` alone (one step of quorate's restore)"
            }
        }
    }

    pub(super) fn short(self) -> &'static str {
        match self {
            RestoreKind::Quorate => "quorate restore",
            RestoreKind::Etcdctl => "etcdctl snapshot restore",
            RestoreKind::Status => "etcdctl snapshot status",
        }
    }
}

/// One restore measurement.
#[derive(Clone, Debug)]
pub struct RestoreRound {
    /// Round, from 1.
    pub round: u32,
    /// What ran.
    pub kind: RestoreKind,
    /// How long.
    pub elapsed: Duration,
}

/// The delta replay.
#[derive(Clone, Debug)]
pub struct ReplayResult {
    /// Clients that wrote the captured events.
    pub clients: usize,
    /// Writes they made.
    pub writes: u64,
    /// Their writes/s.
    pub write_rate: f64,
    /// What the delta backup stored.
    pub capture: DeltaStats,
    /// The source's head revision after the writes.
    pub source_revision: i64,
    /// quorate's report of the restore with deltas (the default replay, writing the database file directly).
    pub report: RestoreReport,
    /// Peak resident memory of the benchmark process during that restore.
    pub peak_rss_bytes: Option<u64>,
    /// The same restore replaying one txn per revision through etcd's API (the baseline).
    pub txn_report: RestoreReport,
    /// The same again on etcd 3.5 with `--unsafe-no-fsync`, when etcd 3.5 is installed.
    pub txn35_report: Option<RestoreReport>,
    /// The floor: `etcdctl snapshot restore` of a full snapshot of the same final state.
    pub floor: Duration,
    /// That snapshot's size.
    pub floor_snapshot_bytes: u64,
    /// One client, one put at a time: writes/s of each baseline run.
    pub baseline_rates: Vec<f64>,
    /// Downloading, decompressing and decoding every delta once more, without applying them.
    pub fetch_decode: Duration,
    /// Computing etcd's `HashKV` over the restored database once more (the restore's
    /// verification, measured apart).
    pub verify: Duration,
}

/// What ran beside the write load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeltaMode {
    /// Nothing.
    Off,
    /// A watch over every key that stays open, events dropped (for where the cost goes).
    #[value(name = "watch")]
    WatchOnly,
    /// Every period a watch from the last revision received up to the current one, events
    /// dropped (for where the cost goes).
    #[value(name = "catch-up")]
    CatchUpOnly,
    /// Delta backups with uncompressed uploads (for where the cost goes).
    #[value(name = "on-plain")]
    OnPlain,
    /// Delta backups: `DeltaWatcher` (periodic catch-ups) plus gzip uploads.
    On,
}

impl DeltaMode {
    /// Every mode, in report order.
    pub const ALL: [DeltaMode; 5] = [
        DeltaMode::Off,
        DeltaMode::WatchOnly,
        DeltaMode::CatchUpOnly,
        DeltaMode::OnPlain,
        DeltaMode::On,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            DeltaMode::Off => "off",
            DeltaMode::WatchOnly => "bare watch only (diagnostic)",
            DeltaMode::CatchUpOnly => "catch-up watch only (diagnostic)",
            DeltaMode::On => "on",
            DeltaMode::OnPlain => "on, uncompressed uploads (diagnostic)",
        }
    }

    pub(super) fn cost_label(self) -> &'static str {
        match self {
            DeltaMode::Off => "nothing",
            DeltaMode::WatchOnly => "bare watch",
            DeltaMode::CatchUpOnly => "catch-up watch",
            DeltaMode::On => "delta backups with gzip",
            DeltaMode::OnPlain => "delta backups with uncompressed uploads",
        }
    }

    pub(super) fn short(self) -> &'static str {
        match self {
            DeltaMode::Off => "deltas off",
            DeltaMode::WatchOnly => "bare watch",
            DeltaMode::CatchUpOnly => "catch-up watch",
            DeltaMode::On => "deltas on",
            DeltaMode::OnPlain => "deltas on, uncompressed",
        }
    }
}

/// One write-throughput round.
#[derive(Clone, Debug)]
pub struct WriteRound {
    /// Round, from 1.
    pub round: u32,
    /// What ran beside the load.
    pub mode: DeltaMode,
    /// Acknowledged puts.
    pub ok: u64,
    /// Failed puts.
    pub failed: u64,
    /// Load duration.
    pub elapsed: Duration,
    /// Median put latency.
    pub p50: Duration,
    /// 99th percentile put latency.
    pub p99: Duration,
    /// Revisions the member advanced by during the round.
    pub revisions: i64,
    /// What the delta backup stored, when on.
    pub capture: Option<DeltaStats>,
    /// Revisions not yet captured when the load stopped, when on.
    pub lag_at_end: Option<i64>,
    /// Events the bare watch received.
    pub watched: Option<u64>,
    /// What the catch-up watch received.
    pub caught_up: Option<CatchUpStats>,
    /// CPU time etcd used during the load.
    pub etcd_cpu: Option<Duration>,
    /// CPU time the benchmark process (clients, watch, capture, uploads) used during the load.
    pub bench_cpu: Option<Duration>,
    /// The first distinct write errors.
    pub errors: Vec<String>,
}

impl WriteRound {
    /// Acknowledged puts per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What the run was asked to do.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Wanted database size, MB.
    pub db_mb: u64,
    /// Rounds per comparison.
    pub rounds: u32,
    /// Concurrent clients of the write loads.
    pub clients: usize,
    /// Seconds per write round.
    pub write_seconds: u64,
    /// Events written for the replay.
    pub replay_events: u64,
    /// Delta period.
    pub delta_period: Duration,
    /// How often delta capture catches up with etcd.
    pub catch_up_every: Duration,
    /// What ran beside the write loads.
    pub write_modes: Vec<DeltaMode>,
}

/// Everything measured.
#[derive(Clone, Debug)]
pub struct BackupResults {
    /// What was asked.
    pub settings: Settings,
    /// Where.
    pub machine: MachineFacts,
    /// The database.
    pub fill: Filled,
    /// Full snapshots.
    pub snapshots: Vec<SnapshotRound>,
    /// Uploads.
    pub uploads: Vec<UploadRound>,
    /// Restores without deltas.
    pub restores: Vec<RestoreRound>,
    /// The delta replay (not run with `--writes-only`).
    pub replay: Option<ReplayResult>,
    /// Write throughput rounds.
    pub writes: Vec<WriteRound>,
}

/// Median, minimum and maximum of some values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

/// The spread of `values`; `None` when empty.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = match n {
        0 => return None,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    Some(Spread {
        median,
        min: sorted[0],
        max: sorted[n - 1],
    })
}

/// MB/s (10^6 bytes).
pub fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9)
}

/// How much lower (in percent, positive = lower) `on` is than `off`.
pub fn drop_pct(off: f64, on: f64) -> f64 {
    (off - on) / off.max(1e-9) * 100.0
}

/// Per round with both, how much lower (percent) writes/s with delta backups were than without.
pub fn paired_drops(writes: &[WriteRound]) -> Vec<f64> {
    let mut rounds: Vec<u32> = writes.iter().map(|w| w.round).collect();
    rounds.dedup();
    rounds
        .into_iter()
        .filter_map(|round| {
            let rate = |mode| {
                writes
                    .iter()
                    .find(|w| w.round == round && w.mode == mode)
                    .map(WriteRound::rate)
            };
            Some(drop_pct(rate(DeltaMode::Off)?, rate(DeltaMode::On)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_odd_even_and_empty() {
        assert_eq!(
            spread(&[3.0, 1.0, 2.0]),
            Some(Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            })
        );
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn throughput_in_megabytes_per_second() {
        assert_eq!(mb_per_s(200_000_000, Duration::from_secs(2)), 100.0);
    }
}
