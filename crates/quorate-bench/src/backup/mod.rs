//! `quorate-bench backup`: on one etcd member filled to a large database, quorate's backup
//! code against etcd's own tools, measured in the same run:
//!
//! 1. full snapshot: `snapshotter::save_to_file` vs. `etcdctl snapshot save` (MB/s), then the
//!    upload of the saved file into a `Local` store (gzip and uncompressed) and the agent's
//!    streamed snapshot → gzip → store path, apart;
//! 2. restore: `restore::restore` of that snapshot vs. `etcdctl snapshot restore`, then a
//!    restore with delta snapshots captured after it, for the replay rate in events/s, against
//!    one client writing one revision at a time;
//! 3. write throughput of several clients with delta backups (`DeltaWatcher` + uploads) on
//!    vs. off, with diagnostic modes for where the cost goes.
//!
//! Rounds alternate which side goes first, so load from other processes hits both alike.

mod deltas;
pub(crate) mod load;
mod report;
mod restore;
mod results;
pub(crate) mod snapshot;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use etcd_client::CompactionOptions;
use quorate_api::CompressionPolicy;
use quorate_backup::restore::ReplayMethod;
use quorate_backup::snapshotter::DEFAULT_CATCH_UP_EVERY;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{EtcdMemberConfig, EtcdProcess};
use tokio::runtime::Handle;

use crate::error::{BenchError, Result};
use crate::hand::ETCD_DEFAULT_TIMING;
use crate::report::MachineFacts;
use deltas::{CatchUpWatch, DeltaBackup, RawWatch, SideRuntime};
use load::Stop;
use results::{
    BackupResults, DeltaMode, ReplayResult, RestoreKind, RestoreRound, Settings, Side,
    SnapshotRound, UploadKind, UploadRound, WriteRound,
};

/// The member's `--quota-backend-bytes`: etcd's recommended maximum, far above the test data.
const QUOTA_BACKEND_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// Value size of the write loads.
const VALUE_LEN: usize = 1024;
/// Length of one one-client baseline run.
const BASELINE_RUN: Duration = Duration::from_secs(5);
/// Bound on the delta capture catching up after a load.
const CATCH_UP: Duration = Duration::from_secs(120);

/// Options of `quorate-bench backup`.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Fill the database to at least this many MB (10^6 bytes, etcd's `dbSize`).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    db_mb: u64,
    /// Rounds per comparison.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Concurrent clients of the write loads.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    clients: u64,
    /// Seconds per write-throughput round.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    write_seconds: u64,
    /// Events captured as delta snapshots for the replay.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..))]
    replay_events: u64,
    /// How often delta capture catches up with etcd (milliseconds).
    #[arg(long, default_value_t = DEFAULT_CATCH_UP_EVERY.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    catch_up_ms: u64,
    /// What runs beside the write load, one write round each per round (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = DeltaMode::ALL)]
    write_modes: Vec<DeltaMode>,
    /// Measure only the write throughput (no full snapshots, uploads, restores or replay).
    #[arg(long)]
    writes_only: bool,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

/// Runs the benchmark and prints (and optionally writes) the report.
pub async fn run(args: BackupArgs) -> Result<()> {
    let mut machine = probe_machine().await;
    let settings = Settings {
        db_mb: args.db_mb,
        rounds: args.rounds,
        clients: args.clients as usize,
        write_seconds: args.write_seconds,
        replay_events: args.replay_events,
        delta_period: Duration::from_secs(1),
        catch_up_every: Duration::from_millis(args.catch_up_ms),
        write_modes: args.write_modes.clone(),
    };
    let dir = tempfile::Builder::new()
        .prefix("quorate-bench-backup-")
        .tempdir()
        .map_err(BenchError::io(
            "create a temporary directory in",
            &std::env::temp_dir(),
        ))?;
    let work = dir.path();

    let mut config = EtcdMemberConfig::new("bench-0", work);
    config.timing = Some(ETCD_DEFAULT_TIMING);
    config.initial_cluster_token = "quorate-bench-backup".to_string();
    config
        .extra_args
        .push(format!("--quota-backend-bytes={QUOTA_BACKEND_BYTES}"));
    let etcd = EtcdProcess::start_ready(config, Duration::from_secs(30)).await?;
    let url = etcd.client_url();
    let member = MemberClient::connect(&url, None, EtcdTimeouts::default()).await?;

    eprintln!("filling the database to {} MB ...", args.db_mb);
    let fill = load::fill(&url, &member, args.db_mb * 1_000_000).await?;
    eprintln!(
        "  {} keys, database {:.1} MB, revision {}, in {:.1} s",
        fill.keys,
        fill.status.db_size as f64 / 1e6,
        fill.status.revision,
        fill.elapsed.as_secs_f64()
    );

    // The backup side (delta capture and uploads) runs on a runtime of its own, as the agent
    // is a process of its own beside etcd, so it does not hold up the load clients' tasks.
    let side = SideRuntime::new("delta-backup", machine.cpus.max(1))?;
    let (snapshots, uploads, restores, replay) = if args.writes_only {
        (Vec::new(), Vec::new(), Vec::new(), None)
    } else {
        let (snapshots, saved) = full_snapshots(&url, work, args.rounds).await?;
        let uploads = uploads(&url, work, &saved, args.rounds).await?;
        let restores = restores(work, &saved.path, args.rounds).await?;
        let replay = replay(&url, &member, side.handle(), work, &saved, &settings).await?;
        (snapshots, uploads, restores, Some(replay))
    };
    let etcd_pid = etcd.child().pid();
    let writes = write_rounds(&url, &member, side.handle(), etcd_pid, work, &settings).await?;
    drop(etcd);

    machine.finish();
    let results = BackupResults {
        settings,
        machine,
        fill,
        snapshots,
        uploads,
        restores,
        replay,
        writes,
    };
    crate::publish_report(&report::render(&results), args.output.as_deref())
}

/// Flushes what earlier steps left in the page cache (uploads are not synced), so its
/// writeback does not land in the next measurement, then lets the disk settle briefly.
async fn settle() {
    let _ = tokio::task::spawn_blocking(nix::unistd::sync).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// `[first, second]` in odd rounds, the other way round in even ones.
fn alternate<T: Copy>(round: u32, first: T, second: T) -> [T; 2] {
    if round % 2 == 1 {
        [first, second]
    } else {
        [second, first]
    }
}

async fn full_snapshots(
    url: &str,
    work: &Path,
    rounds: u32,
) -> Result<(
    Vec<SnapshotRound>,
    quorate_backup::snapshotter::SavedSnapshot,
)> {
    let mut results = Vec::new();
    let mut last = None;
    for round in 1..=rounds {
        for side in alternate(round, Side::Quorate, Side::Etcdctl) {
            settle().await;
            let (elapsed, bytes) = match side {
                Side::Quorate => {
                    let path = snapshot::fresh_file(work, "quorate.db")?;
                    let (elapsed, saved) = snapshot::save_quorate(url, &path).await?;
                    let bytes = saved.size;
                    last = Some(saved);
                    (elapsed, bytes)
                }
                Side::Etcdctl => {
                    let path = snapshot::fresh_file(work, "etcdctl.db")?;
                    let measured = snapshot::save_etcdctl(url, &path).await?;
                    std::fs::remove_file(&path).map_err(BenchError::io("remove", &path))?;
                    measured
                }
            };
            eprintln!(
                "round {round}/{rounds}: full snapshot, {}: {:.2} s, {:.1} MB/s",
                match side {
                    Side::Quorate => "quorate",
                    Side::Etcdctl => "etcdctl",
                },
                elapsed.as_secs_f64(),
                results::mb_per_s(bytes, elapsed)
            );
            results.push(SnapshotRound {
                round,
                side,
                elapsed,
                bytes,
            });
        }
    }
    let saved = last.ok_or_else(|| BenchError::failed("no full snapshot was taken"))?;
    Ok((results, saved))
}

async fn uploads(
    url: &str,
    work: &Path,
    saved: &quorate_backup::snapshotter::SavedSnapshot,
    rounds: u32,
) -> Result<Vec<UploadRound>> {
    let store = snapshot::local_store(work, "full-store")?;
    let kinds = [UploadKind::Gzip, UploadKind::Plain, UploadKind::Streamed];
    let mut results = Vec::new();
    for round in 1..=rounds {
        for i in 0..kinds.len() {
            let kind = kinds[(i + round as usize - 1) % kinds.len()];
            settle().await;
            let (elapsed, input_bytes, stored) = match kind {
                UploadKind::Gzip | UploadKind::Plain => {
                    let compression = (kind == UploadKind::Gzip).then_some(CompressionPolicy::Gzip);
                    let (elapsed, stored) =
                        snapshot::upload_file(&store, &saved.path, saved.revision, compression)
                            .await?;
                    (elapsed, saved.size, stored)
                }
                UploadKind::Streamed => snapshot::stream_to_store(url, &store).await?,
            };
            eprintln!(
                "round {round}/{rounds}: {kind:?}: {:.2} s, {:.1} MB/s, stored {:.1} MB",
                elapsed.as_secs_f64(),
                results::mb_per_s(input_bytes, elapsed),
                stored.size as f64 / 1e6
            );
            results.push(UploadRound {
                round,
                kind,
                elapsed,
                input_bytes,
                stored_bytes: stored.size,
            });
        }
    }
    Ok(results)
}

async fn restores(work: &Path, snapshot_file: &Path, rounds: u32) -> Result<Vec<RestoreRound>> {
    let mut results = Vec::new();
    for round in 1..=rounds {
        for kind in alternate(round, RestoreKind::Quorate, RestoreKind::Etcdctl) {
            let data_dir = restore::fresh_dir(work, "restored")?;
            settle().await;
            let elapsed = match kind {
                RestoreKind::Quorate => restore::restore_quorate(snapshot_file, &data_dir).await?,
                _ => restore::restore_etcdctl(snapshot_file, &data_dir).await?,
            };
            restore::remove_dir(&data_dir)?;
            eprintln!(
                "round {round}/{rounds}: restore, {kind:?}: {:.2} s",
                elapsed.as_secs_f64()
            );
            results.push(RestoreRound {
                round,
                kind,
                elapsed,
            });
        }
        settle().await;
        let elapsed = restore::status_etcdctl(snapshot_file).await?;
        results.push(RestoreRound {
            round,
            kind: RestoreKind::Status,
            elapsed,
        });
    }
    Ok(results)
}

async fn baseline_rate(url: &str, tag: &str) -> Result<f64> {
    settle().await;
    let result = load::put_load(url, 1, VALUE_LEN, tag, Stop::After(BASELINE_RUN)).await?;
    eprintln!("one-client baseline: {:.0} writes/s", result.rate());
    Ok(result.rate())
}

async fn replay(
    url: &str,
    member: &MemberClient,
    side: &Handle,
    work: &Path,
    saved: &quorate_backup::snapshotter::SavedSnapshot,
    settings: &Settings,
) -> Result<ReplayResult> {
    // Nothing has written since the snapshot, so its revision is the head: deltas follow it.
    let head = member.status().await?.revision;
    if head != saved.revision {
        return Err(BenchError::failed(format!(
            "the member moved from revision {} to {head} after the full snapshot",
            saved.revision
        )));
    }
    let store = snapshot::local_store(work, "replay-store")?;
    let backup = DeltaBackup::start(
        side,
        url,
        saved.revision + 1,
        store.clone(),
        settings.delta_period,
        settings.catch_up_every,
        Some(CompressionPolicy::Gzip),
    )
    .await?;
    eprintln!(
        "writing {} events for the replay ...",
        settings.replay_events
    );
    let written = load::put_load(
        url,
        settings.clients,
        VALUE_LEN,
        "replay",
        Stop::Writes(settings.replay_events),
    )
    .await?;
    if written.failed > 0 {
        return Err(BenchError::failed(format!(
            "{} writes for the replay failed: {:?}",
            written.failed, written.errors
        )));
    }
    let source_revision = member.status().await?.revision;
    // etcd's hash at the head, as the backup leader records it: the restores check against it.
    let hash_record = quorate_backup::store::HashRecord::new(
        member.hash_kv(source_revision).await?,
        "bench",
        String::new(),
    );
    backup.wait_captured(source_revision, CATCH_UP).await?;
    let capture = backup.stop().await?;
    eprintln!(
        "  {} events in {} delta snapshots; restoring with deltas ...",
        capture.events, capture.batches
    );
    // The floor: a full snapshot of the final state, restored by etcd's own tool.
    let final_snapshot = snapshot::fresh_file(work, "final.db")?;
    let (_, final_saved) = snapshot::save_quorate(url, &final_snapshot).await?;
    let floor_dir = restore::fresh_dir(work, "floor")?;
    settle().await;
    let floor = restore::restore_etcdctl(&final_snapshot, &floor_dir).await?;
    restore::remove_dir(&floor_dir)?;
    std::fs::remove_file(&final_snapshot).ok();
    // Written after the capture stopped, so not part of the deltas being replayed.
    let mut baseline_rates = vec![baseline_rate(url, "baseline-1").await?];
    let data_dir = restore::fresh_dir(work, "replayed")?;
    settle().await;
    restore::reset_peak_rss();
    let report = restore::restore_with_deltas(
        &saved.path,
        &store,
        &data_dir,
        ReplayMethod::Direct,
        restore::default_tools(),
        Some(hash_record.clone()),
    )
    .await?;
    let peak_rss_bytes = restore::peak_rss_bytes();
    if !matches!(
        report.verification,
        quorate_backup::restore::verify::Verification::Verified { .. }
    ) {
        return Err(BenchError::failed(format!(
            "the restore was not verified: {}",
            report.verification
        )));
    }
    let verify = restore::time_verification(&data_dir, &hash_record)?;
    restore::remove_dir(&data_dir)?;
    eprintln!(
        "  direct replay: {} events in {:.2} s: {:.0} events/s (restore {:.2} s, floor {:.2} s)",
        report.events_applied,
        report.replay_duration.as_secs_f64(),
        report.events_per_second,
        report.duration.as_secs_f64(),
        floor.as_secs_f64()
    );
    settle().await;
    let txn_report = restore::restore_with_deltas(
        &saved.path,
        &store,
        &data_dir,
        ReplayMethod::Txn,
        restore::default_tools(),
        Some(hash_record.clone()),
    )
    .await?;
    restore::remove_dir(&data_dir)?;
    let txn35_report = match restore::etcd35_tools() {
        Some(tools) => {
            settle().await;
            let report = restore::restore_with_deltas(
                &saved.path,
                &store,
                &data_dir,
                ReplayMethod::Txn,
                tools,
                Some(hash_record.clone()),
            )
            .await?;
            restore::remove_dir(&data_dir)?;
            eprintln!(
                "  txn replay on etcd 3.5 without fsync: {:.0} events/s",
                report.events_per_second
            );
            Some(report)
        }
        None => None,
    };
    let fetch_decode = restore::fetch_and_decode(&store).await?;
    eprintln!(
        "  txn replay: {} events in {:.2} s: {:.0} events/s (restore {:.2} s)",
        txn_report.events_applied,
        txn_report.replay_duration.as_secs_f64(),
        txn_report.events_per_second,
        txn_report.duration.as_secs_f64()
    );
    baseline_rates.push(baseline_rate(url, "baseline-2").await?);
    Ok(ReplayResult {
        clients: settings.clients,
        writes: written.ok,
        write_rate: written.rate(),
        capture,
        source_revision,
        report,
        peak_rss_bytes,
        txn_report,
        txn35_report,
        floor,
        floor_snapshot_bytes: final_saved.size,
        baseline_rates,
        fetch_decode,
        verify,
    })
}

async fn write_rounds(
    url: &str,
    member: &MemberClient,
    side: &Handle,
    etcd_pid: u32,
    work: &Path,
    settings: &Settings,
) -> Result<Vec<WriteRound>> {
    let duration = Duration::from_secs(settings.write_seconds);
    let mut compactor = load::connect(url).await?;
    let modes = &settings.write_modes;
    let mut results = Vec::new();
    for round in 1..=settings.rounds {
        for i in 0..modes.len() {
            let mode = modes[(i + round as usize - 1) % modes.len()];
            let store = snapshot::local_store(work, "delta-store")?;
            settle().await;
            let before = member.status().await?.revision;
            let (backup, watch, catch_up) = match mode {
                DeltaMode::Off => (None, None, None),
                DeltaMode::WatchOnly => (
                    None,
                    Some(RawWatch::start(side, url, before + 1).await?),
                    None,
                ),
                DeltaMode::CatchUpOnly => (
                    None,
                    None,
                    Some(
                        CatchUpWatch::start(side, url, before + 1, settings.catch_up_every).await?,
                    ),
                ),
                DeltaMode::On | DeltaMode::OnPlain => (
                    Some(
                        DeltaBackup::start(
                            side,
                            url,
                            before + 1,
                            store.clone(),
                            settings.delta_period,
                            settings.catch_up_every,
                            (mode == DeltaMode::On).then_some(CompressionPolicy::Gzip),
                        )
                        .await?,
                    ),
                    None,
                    None,
                ),
            };
            let tag = format!("writes-{round}");
            let cpu_before = (cpu_time(Some(etcd_pid)), cpu_time(None));
            let load = load::put_load(
                url,
                settings.clients,
                VALUE_LEN,
                &tag,
                Stop::After(duration),
            )
            .await?;
            let cpu_after = (cpu_time(Some(etcd_pid)), cpu_time(None));
            let after = member.status().await?.revision;
            let (capture, lag_at_end) = match backup {
                Some(backup) => {
                    let lag = after - backup.captured_through();
                    backup.wait_captured(after, CATCH_UP).await?;
                    (Some(backup.stop().await?), Some(lag))
                }
                None => (None, None),
            };
            let watched = match watch {
                Some(watch) => Some(watch.stop().await?),
                None => None,
            };
            let caught_up = match catch_up {
                Some(catch_up) => Some(catch_up.stop().await?),
                None => None,
            };
            compactor
                .compact(after, Some(CompactionOptions::new().with_physical()))
                .await?;
            restore::remove_dir(&work.join("delta-store"))?;
            let used = |before: Option<Duration>, after: Option<Duration>| {
                Some(after?.saturating_sub(before?))
            };
            let result = WriteRound {
                round,
                mode,
                ok: load.ok,
                failed: load.failed,
                elapsed: load.elapsed,
                p50: load.percentile(50.0),
                p99: load.percentile(99.0),
                revisions: after - before,
                capture,
                lag_at_end,
                watched,
                caught_up,
                etcd_cpu: used(cpu_before.0, cpu_after.0),
                bench_cpu: used(cpu_before.1, cpu_after.1),
                errors: load.errors.clone(),
            };
            eprintln!(
                "round {round}/{}: writes, {mode:?}: {:.0} writes/s (p99 {:.1} ms)",
                settings.rounds,
                result.rate(),
                result.p99.as_secs_f64() * 1e3
            );
            results.push(result);
        }
    }
    Ok(results)
}

/// User + system CPU time of process `pid` (this process for `None`) from `/proc/<pid>/stat`,
/// whose times are in USER_HZ ticks (100 per second on Linux).
pub(crate) fn cpu_time(pid: Option<u32>) -> Option<Duration> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    parse_cpu_ticks(&std::fs::read_to_string(path).ok()?)
        .map(|ticks| Duration::from_millis(ticks * 10))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces, so fields are counted after its closing one.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// What the backup report says of the machine: etcd's version beside the facts of every run.
async fn probe_machine() -> MachineFacts {
    MachineFacts {
        etcd_version: Some(crate::etcd_version().await),
        ..MachineFacts::at_start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_command_name() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 \
                    4 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert!(cpu_time(None).is_some());
    }

    #[test]
    fn rounds_alternate_the_order() {
        assert_eq!(alternate(1, 'a', 'b'), ['a', 'b']);
        assert_eq!(alternate(2, 'a', 'b'), ['b', 'a']);
    }
}
