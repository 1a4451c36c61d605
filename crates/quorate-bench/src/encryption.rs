//! `quorate-bench encryption`: what encrypting backups costs. On one etcd member filled to a
//! database of `--db-mb`, the agent's paths into a `Local` store with gzip, each once into a
//! store without keys and once into a store that encrypts (AES-256-GCM), rounds alternating
//! which goes first:
//!
//! 1. a full snapshot streamed from etcd through gzip into the store (what the backup leader
//!    does);
//! 2. the upload of a saved snapshot file (the store's part alone: compression, encryption,
//!    writing);
//! 3. delta snapshots: batches of events shaped like Kubernetes objects, encoded and uploaded
//!    one object per batch.
//!
//! The target is at most 10 % slower with encryption (issue 17).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use quorate_api::CompressionPolicy;
use quorate_backup::delta::{DeltaEvent, EtcdEvent, KeyValue};
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::SnapStore;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{EtcdMemberConfig, EtcdProcess};

use crate::backup::{load, snapshot};
use crate::error::{BenchError, Result};
use crate::hand::ETCD_DEFAULT_TIMING;
use crate::report::{MachineFacts, Markdown, Table, met};

/// The most encryption may add to a path's time.
const TARGET_RATIO: f64 = 1.10;

/// Options of `quorate-bench encryption`.
#[derive(Debug, Args)]
pub struct EncryptionArgs {
    /// Fill the database to at least this many MB (10^6 bytes, etcd's `dbSize`).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    db_mb: u64,
    /// Rounds per path and side.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Delta snapshots per round.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..))]
    deltas: u32,
    /// Events per delta snapshot.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(1..))]
    events_per_delta: u32,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<PathBuf>,
}

/// One path's times, without and with encryption (medians over the rounds).
struct PathResult {
    what: &'static str,
    bytes: u64,
    clear: Vec<Duration>,
    encrypted: Vec<Duration>,
}

impl PathResult {
    fn ratio(&self) -> f64 {
        median(&self.encrypted).as_secs_f64() / median(&self.clear).as_secs_f64().max(1e-9)
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

/// Runs the benchmark and prints (and optionally writes) the report.
pub async fn run(args: EncryptionArgs) -> Result<()> {
    let mut machine = MachineFacts {
        etcd_version: Some(crate::etcd_version().await),
        ..MachineFacts::at_start()
    };
    let dir = tempfile::Builder::new()
        .prefix("quorate-bench-encryption-")
        .tempdir()
        .map_err(BenchError::io(
            "create a temporary directory in",
            &std::env::temp_dir(),
        ))?;
    let work = dir.path();
    let keys = work.join("keys");
    std::fs::create_dir_all(&keys).map_err(BenchError::io("create", &keys))?;
    let key: String = (0..64)
        .map(|i| char::from(b"0123456789abcdef"[(i * 7) % 16]))
        .collect();
    for (file, text) in [("k1", key.as_str()), ("active", "k1")] {
        std::fs::write(keys.join(file), text).map_err(BenchError::io("write", &keys.join(file)))?;
    }
    let clear = snapshot::local_store(work, "clear")?;
    let sealed = snapshot::local_store(work, "sealed")?.with_encryption_keys(keys);

    let mut config = EtcdMemberConfig::new("bench-0", work);
    config.timing = Some(ETCD_DEFAULT_TIMING);
    config.initial_cluster_token = "quorate-bench-encryption".to_string();
    config
        .extra_args
        .push("--quota-backend-bytes=8589934592".to_string());
    let etcd = EtcdProcess::start_ready(config, Duration::from_secs(30)).await?;
    let url = etcd.client_url();
    let member = MemberClient::connect(&url, None, EtcdTimeouts::default()).await?;
    eprintln!("filling the database to {} MB ...", args.db_mb);
    let fill = load::fill(&url, &member, args.db_mb * 1_000_000).await?;
    let saved_path = snapshot::fresh_file(work, "saved.db")?;
    let (_, saved) = snapshot::save_quorate(&url, &saved_path).await?;

    let mut streamed = PathResult {
        what: "full snapshot streamed from etcd → gzip → store",
        bytes: saved.size,
        clear: vec![],
        encrypted: vec![],
    };
    let mut file = PathResult {
        what: "saved snapshot file → gzip → store",
        bytes: saved.size,
        clear: vec![],
        encrypted: vec![],
    };
    let batches = delta_batches(args.deltas, args.events_per_delta);
    let delta_bytes = batches.iter().map(|b| b.len() as u64).sum();
    let mut deltas = PathResult {
        what: "delta snapshots → gzip → store",
        bytes: delta_bytes,
        clear: vec![],
        encrypted: vec![],
    };
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for encrypt in order {
            let store = if encrypt { &sealed } else { &clear };
            settle().await;
            let (t, _, _) = snapshot::stream_to_store(&url, store).await?;
            push(&mut streamed, encrypt, t);
            settle().await;
            let (t, _) = snapshot::upload_file(
                store,
                &saved_path,
                saved.revision,
                Some(CompressionPolicy::Gzip),
            )
            .await?;
            push(&mut file, encrypt, t);
            settle().await;
            push(&mut deltas, encrypt, upload_deltas(store, &batches).await?);
            eprintln!(
                "round {round}, {}: done",
                if encrypt { "encrypted" } else { "clear" }
            );
        }
    }
    drop(etcd);
    machine.finish();

    let results = [streamed, file, deltas];
    let mut doc = Markdown::new();
    doc.heading(
        1,
        "Backup encryption: the agent's upload paths with and without it",
    );
    doc.paragraph(format!(
        "One etcd {} member filled to a {:.0} MB database ({} keys of 1–4 KiB). Each path runs {} rounds into a `Local` store with gzip, once without keys and once with AES-256-GCM encryption (`quorate.io/backup-encryption-secret`), alternating which goes first; the page cache is flushed before each run. Deltas: {} objects of {} events each, values shaped like Kubernetes objects. Times are medians.",
        machine.etcd_version(),
        fill.status.db_size as f64 / 1e6,
        fill.keys,
        args.rounds,
        args.deltas,
        args.events_per_delta,
    ));
    let mut table = Table::numeric(
        "path",
        [
            "data",
            "clear",
            "encrypted",
            "clear MB/s",
            "encrypted MB/s",
            "encrypted / clear",
        ],
    );
    for r in &results {
        let (c, e) = (median(&r.clear), median(&r.encrypted));
        let rate = |d: Duration| format!("{:.0}", r.bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9));
        table.row([
            r.what.to_string(),
            format!("{:.0} MB", r.bytes as f64 / 1e6),
            format!("{:.2} s", c.as_secs_f64()),
            format!("{:.2} s", e.as_secs_f64()),
            rate(c),
            rate(e),
            format!("{:.2}x", r.ratio()),
        ]);
    }
    doc.table(&table);
    doc.bullets(results.iter().map(|r| {
        format!(
            "{}: at most {:.0} % slower with encryption: {}",
            r.what,
            (TARGET_RATIO - 1.0) * 100.0,
            met(r.ratio() <= TARGET_RATIO)
        )
    }));
    doc.machine(
        &machine,
        "cargo build --release -p quorate-bench && target/release/quorate-bench encryption --output docs/benchmarks/encryption.md",
    );
    crate::publish_report(&doc.into_string(), args.output.as_deref())
}

fn push(result: &mut PathResult, encrypted: bool, t: Duration) {
    if encrypted {
        result.encrypted.push(t)
    } else {
        result.clear.push(t)
    }
}

/// Flushes what earlier runs left in the page cache, so its writeback lands in neither side.
async fn settle() {
    let _ = tokio::task::spawn_blocking(nix::unistd::sync).await;
}

/// `count` encoded delta snapshots of `events` put events each: keys and values like
/// Kubernetes objects (JSON with some unique fields), about 1 KiB per value.
fn delta_batches(count: u32, events: u32) -> Vec<Vec<u8>> {
    let mut revision = 1_000_000i64;
    (0..count)
        .map(|b| {
            let batch: Vec<DeltaEvent> = (0..events)
                .map(|e| {
                    revision += 1;
                    let n = u64::from(b) * u64::from(events) + u64::from(e);
                    let value = format!(
                        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{n}","namespace":"bench","uid":"{:016x}-{:016x}","resourceVersion":"{revision}","labels":{{"app":"bench","shard":"{}"}}}},"data":{{"payload":"{}"}}}}"#,
                        n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                        n.rotate_left(17) ^ 0xdead_beef,
                        n % 16,
                        "x".repeat(700 + (n % 200) as usize),
                    );
                    DeltaEvent {
                        etcd_event: EtcdEvent {
                            kv: Some(KeyValue {
                                key: format!("/registry/configmaps/bench/cm-{n}").into_bytes(),
                                create_revision: revision,
                                mod_revision: revision,
                                version: 1,
                                value: value.into_bytes(),
                                ..KeyValue::default()
                            }),
                            ..EtcdEvent::default()
                        },
                        time: "2026-11-26T00:00:00Z".to_string(),
                        lease_ttl: None,
                    }
                })
                .collect();
            quorate_backup::delta::encode(&batch)
        })
        .collect()
}

/// Uploads every batch as one delta snapshot (gzip), as the backup leader does; the time of
/// all uploads. The objects are deleted afterwards, outside the time.
async fn upload_deltas(store: &SnapStore, batches: &[Vec<u8>]) -> Result<Duration> {
    let mut stored = Vec::new();
    let started = Instant::now();
    for (i, batch) in batches.iter().enumerate() {
        let first = 1_000_000 + i as i64 * 10_000;
        let name = SnapshotName::incr(
            first,
            first + 9_999,
            1_700_000_000,
            Some(CompressionPolicy::Gzip),
        );
        let body = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(batch.clone()))]);
        stored.push(
            store
                .upload(&name, body)
                .await
                .map_err(|e| BenchError::failed(format!("uploading {}: {e}", name.file_name())))?,
        );
    }
    let elapsed = started.elapsed();
    for s in &stored {
        store
            .delete(s)
            .await
            .map_err(|e| BenchError::failed(format!("deleting {}: {e}", s.path)))?;
    }
    Ok(elapsed)
}
