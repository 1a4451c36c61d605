//! The backup benchmark's markdown report: each comparison with the baseline measured in the
//! same run, the ratio, the verdict against the targets, every round, and the machine.

use std::fmt::Write as _;
use std::time::Duration;

use super::results::{
    BackupResults, DeltaMode, ReplayResult, RestoreKind, Settings, Side, SnapshotRound, Spread,
    TARGET_SNAPSHOT_RATIO, TARGET_WRITE_DROP_PCT, UploadKind, UploadRound, WriteRound, drop_pct,
    mb_per_s, paired_drops, spread,
};
use crate::report::{Align, Markdown, Table, met, pass};

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn s(seconds: f64) -> String {
    format!("{seconds:.2} s")
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The full-snapshot verdict for a throughput ratio quorate / etcdctl.
pub fn snapshot_verdict(ratio: f64) -> String {
    let ok = ratio >= TARGET_SNAPSHOT_RATIO;
    format!(
        "**Verdict: {}** — full snapshot throughput {ratio:.2}x etcdctl's (target ≥ \
         {TARGET_SNAPSHOT_RATIO}x: {}).",
        pass(ok),
        met(ok)
    )
}

/// The write-throughput verdict for writes/s with delta backups `drop` percent lower.
pub fn writes_verdict(drop: f64) -> String {
    let ok = drop <= TARGET_WRITE_DROP_PCT;
    let how = if drop >= 0.0 {
        format!("{drop:.1}% lower")
    } else {
        format!("{:.1}% higher", -drop)
    };
    format!(
        "**Verdict: {}** — writes/s with delta backups {how} than without (target ≤ \
         {TARGET_WRITE_DROP_PCT}% lower: {}).",
        pass(ok),
        met(ok)
    )
}

fn snapshot_spreads(r: &BackupResults, side: Side) -> Option<(Spread, Spread, u64)> {
    let rows: Vec<&SnapshotRound> = r.snapshots.iter().filter(|x| x.side == side).collect();
    let times: Vec<f64> = rows.iter().map(|x| x.elapsed.as_secs_f64()).collect();
    let rates: Vec<f64> = rows.iter().map(|x| mb_per_s(x.bytes, x.elapsed)).collect();
    Some((spread(&times)?, spread(&rates)?, rows.last()?.bytes))
}

fn restore_spread(r: &BackupResults, kind: RestoreKind) -> Option<Spread> {
    let times: Vec<f64> = r
        .restores
        .iter()
        .filter(|x| x.kind == kind)
        .map(|x| x.elapsed.as_secs_f64())
        .collect();
    spread(&times)
}

fn write_rows(r: &BackupResults, mode: DeltaMode) -> Vec<&WriteRound> {
    r.writes.iter().filter(|w| w.mode == mode).collect()
}

/// Which process's CPU time of a write round.
type CpuOf = fn(&WriteRound) -> Option<Duration>;

/// etcd's CPU time in a write round.
const ETCD_CPU: CpuOf = |w| w.etcd_cpu;
/// The benchmark process's CPU time in a write round.
const BENCH_CPU: CpuOf = |w| w.bench_cpu;

/// Milliseconds of CPU per 1000 acknowledged writes in one round.
fn cpu_per_1k(w: &WriteRound, cpu: CpuOf) -> Option<f64> {
    cpu(w).map(|cpu| cpu.as_secs_f64() * 1e6 / w.ok.max(1) as f64)
}

/// [`cpu_per_1k`], median over the rounds.
fn median_cpu_per_1k(rows: &[&WriteRound], cpu: CpuOf) -> Option<f64> {
    let values: Vec<f64> = rows.iter().filter_map(|w| cpu_per_1k(w, cpu)).collect();
    spread(&values).map(|v| v.median)
}

/// A CPU-per-1k-writes cell: `12 ms`, or `–` without a measurement.
fn cpu_cell(per_1k: Option<f64>) -> String {
    per_1k.map_or_else(|| "–".to_string(), |v| format!("{v:.0} ms"))
}

/// The markdown report.
pub fn render(r: &BackupResults) -> String {
    let mut doc = Markdown::new();
    let set = &r.settings;
    let fill = &r.fill;
    doc.heading(
        1,
        &format!(
            "Backups: quorate vs. etcdctl on one {} MB database",
            set.db_mb
        ),
    );
    doc.paragraph(format!(
        "One etcd {} member (etcd's default raft timing, `--quota-backend-bytes` 8 GiB), filled \
         with {} keys ({} of 1–4 KiB pseudo-random alphanumeric values, 32 puts per txn, 8 txns \
         at a time) in {} to a database of **{}** (status `dbSize`) at revision {}. Every step \
         below runs against that same member; each comparison runs both sides in every round, \
         alternating which goes first ({} rounds). Before every measured step the benchmark \
         calls `sync(2)`, so writeback left by an earlier step does not land in it. \
         MB = 10⁶ bytes.",
        r.machine.etcd_version(),
        fill.keys,
        mb(fill.value_bytes),
        s(fill.elapsed.as_secs_f64()),
        mb(fill.status.db_size as u64),
        fill.status.revision,
        set.rounds
    ));
    if !r.snapshots.is_empty() {
        render_snapshots(&mut doc, r);
    }
    if !r.restores.is_empty() {
        render_restores(&mut doc, r);
    }
    if let Some(rp) = &r.replay {
        render_replay(&mut doc, set, rp);
    }
    render_writes(&mut doc, r);
    render_rounds(&mut doc, r);
    let reproduce = if r.machine.command.is_empty() {
        "quorate-bench backup --output docs/benchmarks/backup.md"
    } else {
        &r.machine.command
    };
    doc.machine(
        &r.machine,
        &format!("cargo build --release -p quorate-bench && target/release/{reproduce}"),
    );
    doc.into_string()
}

fn render_snapshots(doc: &mut Markdown, r: &BackupResults) {
    doc.heading(2, "Full snapshot");
    doc.paragraph(
        "Time from the start (quorate: `MemberClient::connect` + `snapshotter::save_to_file`; \
         etcdctl: process start) until the file is complete, synced and renamed into place. \
         Both write the same bytes (etcd's database stream with its SHA-256 trailer); quorate \
         also checks the trailer while writing. No compression, no upload.",
    );
    let mut table = Table::numeric(
        "method",
        ["median", "min", "max", "median MB/s", "file size"],
    );
    let quorate = snapshot_spreads(r, Side::Quorate);
    let etcdctl = snapshot_spreads(r, Side::Etcdctl);
    for (label, row) in [
        ("quorate `save_to_file`", &quorate),
        ("`etcdctl snapshot save`", &etcdctl),
    ] {
        if let Some((t, rate, size)) = row {
            table.row([
                label.to_string(),
                s(t.median),
                s(t.min),
                s(t.max),
                format!("{:.1}", rate.median),
                mb(*size),
            ]);
        }
    }
    doc.table(&table);
    if let (Some((_, q, _)), Some((_, e, _))) = (&quorate, &etcdctl) {
        let ratio = q.median / e.median;
        doc.paragraph(format!(
            "**Throughput ratio quorate / etcdctl (median MB/s): {ratio:.2}x**"
        ));
        doc.paragraph(snapshot_verdict(ratio));
    }

    doc.heading(3, "Upload into a snapshot store, measured apart");
    doc.paragraph(
        "The quorate snapshot file uploaded with `SnapStore::upload` into a `Local` store (a \
         directory on the same disk; 5 MiB multipart parts, object_store's local backend does \
         not fsync), until the object is complete; deleted again after each upload. The last \
         row is what the agent does on schedule: `snapshotter::full_snapshot` streamed from \
         etcd through gzip into the store, no local file. MB/s are snapshot (uncompressed) \
         bytes per second.",
    );
    let mut table = Table::numeric(
        "upload",
        [
            "median",
            "min",
            "max",
            "median MB/s",
            "stored size",
            "stored / snapshot",
        ],
    );
    for kind in [UploadKind::Gzip, UploadKind::Plain, UploadKind::Streamed] {
        let rows: Vec<&UploadRound> = r.uploads.iter().filter(|u| u.kind == kind).collect();
        let times: Vec<f64> = rows.iter().map(|u| u.elapsed.as_secs_f64()).collect();
        let rates: Vec<f64> = rows
            .iter()
            .map(|u| mb_per_s(u.input_bytes, u.elapsed))
            .collect();
        if let (Some(t), Some(rate), Some(last)) = (spread(&times), spread(&rates), rows.last()) {
            table.row([
                kind.label().to_string(),
                s(t.median),
                s(t.min),
                s(t.max),
                format!("{:.1}", rate.median),
                mb(last.stored_bytes),
                format!(
                    "{:.2}",
                    last.stored_bytes as f64 / last.input_bytes.max(1) as f64
                ),
            ]);
        }
    }
    doc.table(&table);
}

fn render_restores(doc: &mut Markdown, r: &BackupResults) {
    doc.heading(2, "Restore");
    doc.paragraph(
        "The quorate snapshot file restored into a new data directory as the same single member, \
         by quorate's `restore::restore` (no deltas: `snapshot status` for the revision, then \
         `snapshot restore` into `<dir>.part`, then an atomic rename) and by `etcdctl snapshot \
         restore`. No target is set for this ratio.",
    );
    let mut table = Table::numeric("method", ["median", "min", "max"]);
    for kind in [
        RestoreKind::Quorate,
        RestoreKind::Etcdctl,
        RestoreKind::Status,
    ] {
        if let Some(t) = restore_spread(r, kind) {
            table.row([kind.label().to_string(), s(t.median), s(t.min), s(t.max)]);
        }
    }
    doc.table(&table);
    if let (Some(q), Some(e)) = (
        restore_spread(r, RestoreKind::Quorate),
        restore_spread(r, RestoreKind::Etcdctl),
    ) {
        let mut text = format!(
            "**Ratio quorate / etcdctl (medians): {:.2}x**",
            q.median / e.median
        );
        if let Some(status) = restore_spread(r, RestoreKind::Status) {
            let _ = write!(
                text,
                "\n— quorate runs `snapshot status` (which reads the whole database to report its \
                 revision; {} when run alone) and then the same `snapshot restore`; measured \
                 difference {}.",
                s(status.median),
                s(q.median - e.median)
            );
        }
        doc.paragraph(text);
    }
}

fn render_replay(doc: &mut Markdown, set: &Settings, rp: &ReplayResult) {
    let rep = &rp.report;
    doc.heading(3, "Replay of delta snapshots");
    doc.paragraph(format!(
        "After the full snapshot, {} clients wrote {} puts of 1 KiB ({:.0} writes/s), one key \
         per revision, while a `DeltaWatcher` (period {:?}, catching up every {:?}) captured \
         them and each batch was uploaded with gzip into a `Local` store: {} delta snapshots, \
         {} encoded, {} stored. quorate's `restore` then restored the full snapshot plus those \
         deltas twice, downloading and decompressing each delta one object ahead of the replay: \
         **into the database file** (the default: the full snapshot's buckets copied into a new \
         file and its `key` bucket continued with one MVCC entry per event, each checked against \
         the key space, then `etcdctl snapshot restore` of that file), and **one txn per \
         revision** through a temporary etcd's API (the method before, and \
         etcd-backup-restore's; etcd 3.4 has no `--unsafe-no-fsync`, so every txn is \
         fsynced). The floor: `etcdctl snapshot restore` of a full snapshot of the same final \
         state ({}).",
        rp.clients,
        rp.writes,
        rp.write_rate,
        set.delta_period,
        set.catch_up_every,
        rp.capture.batches,
        mb(rp.capture.encoded_bytes),
        mb(rp.capture.stored_bytes),
        mb(rp.floor_snapshot_bytes),
    ));
    let mut table = Table::new([
        ("replay", Align::Left),
        ("events applied", Align::Right),
        ("txns (revisions)", Align::Right),
        ("replay time", Align::Right),
        ("**replay rate**", Align::Right),
        ("whole restore", Align::Right),
        ("whole restore / floor", Align::Right),
        ("restored revision", Align::Left),
    ]);
    let floor = rp.floor.as_secs_f64().max(1e-9);
    let mut rows = vec![
        ("into the database file (quorate)", rep),
        (
            "one txn per revision, etcd 3.4 (every txn fsynced)",
            &rp.txn_report,
        ),
    ];
    if let Some(r) = &rp.txn35_report {
        rows.push((
            "one txn per revision, etcd 3.5 `--unsafe-no-fsync` (baseline)",
            r,
        ));
    }
    for (name, r) in rows {
        let exact = if r.restored_revision == rp.source_revision {
            "= source head"
        } else {
            "**≠ source head**"
        };
        table.row([
            name.to_string(),
            r.events_applied.to_string(),
            r.revisions_applied.to_string(),
            s(r.replay_duration.as_secs_f64()),
            format!("**{:.0} events/s**", r.events_per_second),
            s(r.duration.as_secs_f64()),
            format!("{:.1}x", r.duration.as_secs_f64() / floor),
            format!("{} ({exact} {})", r.restored_revision, rp.source_revision),
        ]);
    }
    table.row([
        "floor: `etcdctl snapshot restore` of the final state".to_string(),
        "–".to_string(),
        "–".to_string(),
        "–".to_string(),
        "–".to_string(),
        s(floor),
        "1.0x".to_string(),
        "–".to_string(),
    ]);
    doc.table(&table);
    // The fastest one-txn replay measured is the baseline.
    let baseline = rp
        .txn35_report
        .as_ref()
        .map_or(rp.txn_report.events_per_second, |r| {
            r.events_per_second.max(rp.txn_report.events_per_second)
        });
    let ratio = rep.events_per_second / baseline.max(1e-9);
    let rss = rp.peak_rss_bytes.map_or("not measured".to_string(), |b| {
        format!("{:.0} MiB", b as f64 / 1048576.0)
    });
    doc.paragraph(format!(
        "**Replay rate, database file / the fastest one-txn-per-revision replay: {ratio:.1}x.** \
         Peak resident memory of the benchmark process during the default restore (`VmHWM`, reset before it): {rss}. Of the \
         replay time, downloading, gunzipping and decoding the deltas (JSON with base64 values, \
         SHA-256 checked) takes about {} (measured apart, same objects).",
        s(rp.fetch_decode.as_secs_f64())
    ));
    doc.paragraph(format!(
        "Every restore above was checked against etcd's `HashKV` at the source head, taken \
         before it (as the backup leader records it). The default restore: {}. That check, two \
         passes over the written file, takes about {} of its whole restore (measured apart, \
         same file).",
        rep.verification,
        s(rp.verify.as_secs_f64())
    ));
    if let Some(base) = spread(&rp.baseline_rates) {
        doc.paragraph(format!(
            "Baseline in the same run: one client putting one 1 KiB value at a time into the \
             benchmark's member (one revision per put, as each replayed txn is; {} runs of 5 s, \
             before and after the replays): median **{:.0} writes/s** (min {:.0}, max {:.0}). \
             **Replay rate / one-client writes: {:.2}x (database file), {:.2}x (one txn per revision).**",
            rp.baseline_rates.len(),
            base.median,
            base.min,
            base.max,
            rep.events_per_second / base.median.max(1e-9),
            rp.txn_report.events_per_second / base.median.max(1e-9)
        ));
    }
}

/// Writes with delta backups on and off (and the diagnostic modes), and where the cost goes.
fn render_writes(doc: &mut Markdown, r: &BackupResults) {
    let set = &r.settings;
    doc.heading(2, "Write throughput with delta backups on vs. off");
    doc.paragraph(format!(
        "{} clients, each on its own connection, put 1 KiB values (each cycling over 1000 keys) \
         as fast as etcd acknowledges, for {} s per round. **on**: a `DeltaWatcher` from the \
         round's first revision with a {:?} period, catching up every {:?}: each catch-up opens \
         a watch over every key at the first revision not captured yet, reads it until it has \
         brought the revision etcd was at when it made the watch (etcd serves such a watch from \
         its backend, up to 1000 revisions per response, instead of one response per write), \
         and drops it; each batch is uploaded with gzip into a `Local` store. It runs in the \
         benchmark process on a tokio runtime of its own with its own connection (the agent is \
         a process of its own beside etcd; here it shares the two CPUs with etcd and the \
         clients, as it would). **off**: nothing else. To show where the cost goes: **bare \
         watch only**, a watch over every key that stays open, its events received and dropped \
         (what following every write as it happens costs etcd and the gRPC client; delta \
         capture worked that way before); **catch-up watch only**, the catch-ups alone at the \
         same interval, events dropped (the revision to reach from a status call); and delta \
         backups with uncompressed uploads (**on** without gzip). Every mode runs in every \
         round, in rotating order. After every round the member is compacted to its head \
         revision, so the database does not grow from round to round.",
        set.clients, set.write_seconds, set.delta_period, set.catch_up_every
    ));
    let mut table = Table::numeric(
        "delta backups",
        [
            "median writes/s",
            "min",
            "max",
            "p50 latency",
            "p99 latency",
            "failed writes",
            "delta snapshots",
            "events captured / written",
            "etcd CPU per 1k writes",
            "benchmark process CPU per 1k writes",
        ],
    );
    let mut medians = [None, None];
    for mode in DeltaMode::ALL {
        let rows = write_rows(r, mode);
        let rates: Vec<f64> = rows.iter().map(|w| w.rate()).collect();
        let p50: Vec<f64> = rows.iter().map(|w| w.p50.as_secs_f64()).collect();
        let p99: Vec<f64> = rows.iter().map(|w| w.p99.as_secs_f64()).collect();
        let (Some(rate), Some(p50), Some(p99)) = (spread(&rates), spread(&p50), spread(&p99))
        else {
            continue;
        };
        match mode {
            DeltaMode::Off => medians[0] = Some(rate.median),
            DeltaMode::On => medians[1] = Some(rate.median),
            DeltaMode::WatchOnly | DeltaMode::CatchUpOnly | DeltaMode::OnPlain => {}
        }
        let failed: u64 = rows.iter().map(|w| w.failed).sum();
        let (batches, captured) = captured_cells(mode, &rows);
        table.row([
            mode.label().to_string(),
            format!("{:.0}", rate.median),
            format!("{:.0}", rate.min),
            format!("{:.0}", rate.max),
            ms(Duration::from_secs_f64(p50.median)),
            ms(Duration::from_secs_f64(p99.median)),
            failed.to_string(),
            batches,
            captured,
            cpu_cell(median_cpu_per_1k(&rows, ETCD_CPU)),
            cpu_cell(median_cpu_per_1k(&rows, BENCH_CPU)),
        ]);
    }
    doc.table(&table);
    doc.paragraph(
        "Latencies and CPU are medians over the rounds; failed writes, delta snapshots and \
         events are totals over all rounds. CPU is user + system time from `/proc/<pid>/stat` \
         during the load: etcd's process, and the benchmark's own process, which runs the \
         clients and, when on, the watch, the capture and the uploads.",
    );
    if let [Some(off), Some(on)] = medians {
        let drop = drop_pct(off, on);
        doc.paragraph(format!(
            "**Difference on vs. off (median writes/s): {:+.1}%**",
            -drop
        ));
        let paired = paired_drops(&r.writes);
        if !paired.is_empty() {
            let text: Vec<String> = paired.iter().map(|d| format!("{:+.1}%", -d)).collect();
            doc.paragraph(format!(
                "Round by round (on vs. off within the same round): {}.",
                text.join(", ")
            ));
        }
        doc.paragraph(writes_verdict(drop));
    }
    render_write_costs(doc, r);
}

/// The "delta snapshots" and "events captured / written" cells of a mode.
fn captured_cells(mode: DeltaMode, rows: &[&WriteRound]) -> (String, String) {
    let written: i64 = rows.iter().map(|w| w.revisions).sum();
    match mode {
        DeltaMode::On | DeltaMode::OnPlain => {
            let captures = rows.iter().filter_map(|w| w.capture.as_ref());
            let batches: u64 = captures.clone().map(|c| c.batches).sum();
            let events: u64 = captures.map(|c| c.events).sum();
            (batches.to_string(), format!("{events} / {written}"))
        }
        DeltaMode::WatchOnly => {
            let events: u64 = rows.iter().filter_map(|w| w.watched).sum();
            ("–".to_string(), format!("{events} / {written} (received)"))
        }
        DeltaMode::CatchUpOnly => {
            let caught = rows.iter().filter_map(|w| w.caught_up);
            let catch_ups: u64 = caught.clone().map(|c| c.catch_ups).sum();
            let responses: u64 = caught.clone().map(|c| c.responses).sum();
            let events: u64 = caught.map(|c| c.events).sum();
            (
                "–".to_string(),
                format!(
                    "{events} / {written} (received in {responses} responses, \
                     {catch_ups} catch-ups)"
                ),
            )
        }
        DeltaMode::Off => ("–".to_string(), "–".to_string()),
    }
}

/// Where the cost of each mode goes: CPU beyond **off**, the capture's lag, the latency.
fn render_write_costs(doc: &mut Markdown, r: &BackupResults) {
    let cpu = |mode| {
        let rows = write_rows(r, mode);
        Some((
            median_cpu_per_1k(&rows, ETCD_CPU)?,
            median_cpu_per_1k(&rows, BENCH_CPU)?,
        ))
    };
    if let Some(base) = cpu(DeltaMode::Off) {
        let costs: Vec<String> = DeltaMode::ALL[1..]
            .iter()
            .filter_map(|&mode| {
                let (etcd, bench) = cpu(mode)?;
                let (e, b) = (etcd - base.0, bench - base.1);
                Some(format!(
                    "{} {:+.1} ms (etcd {e:+.1}, benchmark process {b:+.1})",
                    mode.cost_label(),
                    e + b
                ))
            })
            .collect();
        if !costs.is_empty() {
            doc.paragraph(format!(
                "Where the cost goes, in CPU per 1000 writes beyond **off** (steadier than \
                 writes/s on a shared machine): {}. On two CPUs that etcd and its clients \
                 already keep busy, every extra CPU millisecond per write comes out of the \
                 write rate.",
                costs.join("; ")
            ));
        }
    }
    let on = write_rows(r, DeltaMode::On);
    let lags: Vec<f64> = on
        .iter()
        .filter_map(|w| Some(w.lag_at_end? as f64 * 1e3 / w.rate().max(1e-9)))
        .collect();
    if let Some(lag) = spread(&lags) {
        doc.paragraph(format!(
            "Between catch-ups the capture trails etcd: when the load stopped, **on** had \
             captured everything up to about {:.0} ms of writes earlier (median over the rounds; \
             max {:.0} ms), and its next catch-up took in the rest. A cut (period, on-demand \
             delta, stop) catches up first, so batches reach the revision etcd was at when the \
             cut was due.",
            lag.median, lag.max
        ));
    }
    let p99 = |mode| {
        let values: Vec<f64> = write_rows(r, mode)
            .iter()
            .map(|w| w.p99.as_secs_f64())
            .collect();
        spread(&values).map(|v| ms(Duration::from_secs_f64(v.median)))
    };
    if let (Some(off), Some(catch_up), Some(on)) = (
        p99(DeltaMode::Off),
        p99(DeltaMode::CatchUpOnly),
        p99(DeltaMode::On),
    ) {
        doc.paragraph(format!(
            "The catch-ups cost latency rather than CPU: p99 {off} off, {catch_up} with the \
             catch-ups alone, {on} on. While etcd reads a catch-up's backlog from its backend \
             (every 100 ms until it has sent it all), it holds the lock each write needs to \
             notify watchers, so some writes wait; writes bunched that way likely also cost etcd \
             less CPU each, which would explain why the catch-ups alone can come out below \
             **off**."
        ));
    }
}

/// Every round of every comparison.
fn render_rounds(doc: &mut Markdown, r: &BackupResults) {
    doc.heading(2, "Rounds");
    let mut table = Table::new([
        ("round", Align::Right),
        ("step", Align::Left),
        ("method", Align::Left),
        ("time", Align::Right),
        ("rate", Align::Right),
        ("notes", Align::Left),
    ]);
    for x in &r.snapshots {
        table.row([
            x.round.to_string(),
            "full snapshot".to_string(),
            match x.side {
                Side::Quorate => "quorate save_to_file",
                Side::Etcdctl => "etcdctl snapshot save",
            }
            .to_string(),
            s(x.elapsed.as_secs_f64()),
            format!("{:.1} MB/s", mb_per_s(x.bytes, x.elapsed)),
            mb(x.bytes),
        ]);
    }
    for x in &r.uploads {
        table.row([
            x.round.to_string(),
            "upload".to_string(),
            x.kind.short().to_string(),
            s(x.elapsed.as_secs_f64()),
            format!("{:.1} MB/s", mb_per_s(x.input_bytes, x.elapsed)),
            format!("{} → {}", mb(x.input_bytes), mb(x.stored_bytes)),
        ]);
    }
    for x in &r.restores {
        table.row([
            x.round.to_string(),
            "restore".to_string(),
            x.kind.short().to_string(),
            s(x.elapsed.as_secs_f64()),
            String::new(),
            String::new(),
        ]);
    }
    for x in &r.writes {
        table.row([
            x.round.to_string(),
            "writes".to_string(),
            x.mode.short().to_string(),
            s(x.elapsed.as_secs_f64()),
            format!("{:.0} writes/s", x.rate()),
            write_notes(x),
        ]);
    }
    doc.table(&table);
}

/// The notes cell of one write round.
fn write_notes(x: &WriteRound) -> String {
    let mut notes = vec![format!(
        "{} ok, {} failed, p50 {}, p99 {}",
        x.ok,
        x.failed,
        ms(x.p50),
        ms(x.p99)
    )];
    if let Some(c) = &x.capture {
        notes.push(format!(
            "{} delta snapshots, {} events of {} revisions, {} → {} gzip, upload time {}",
            c.batches,
            c.events,
            x.revisions,
            mb(c.encoded_bytes),
            mb(c.stored_bytes),
            s(c.upload_time.as_secs_f64())
        ));
    }
    notes.push(format!(
        "CPU per 1k writes: etcd {}, benchmark process {}",
        cpu_cell(cpu_per_1k(x, ETCD_CPU)),
        cpu_cell(cpu_per_1k(x, BENCH_CPU))
    ));
    if let Some(c) = &x.caught_up {
        notes.push(format!(
            "{} events received in {} responses, {} catch-ups",
            c.events, c.responses, c.catch_ups
        ));
    }
    if let Some(lag) = x.lag_at_end {
        notes.push(format!(
            "capture {lag} revisions behind when the load stopped"
        ));
    }
    notes.extend(x.errors.iter().map(|e| format!("write error: {e}")));
    notes.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::deltas::{CatchUpStats, DeltaStats};
    use crate::backup::load::Filled;
    use crate::backup::results::RestoreRound;
    use crate::report::MachineFacts;
    use quorate_backup::restore::RestoreReport;
    use std::time::Duration;

    /// A restore of 1,000 events from revision 5000 to 6000 over two deltas.
    fn sample_report(
        dir: &str,
        events_per_second: f64,
        replay: Duration,
        total: Duration,
    ) -> RestoreReport {
        RestoreReport {
            data_dir: dir.into(),
            full_revision: 5000,
            restored_revision: 6000,
            revision_bumped_by: 0,
            deltas_read: 2,
            deltas_applied: 2,
            events_applied: 1000,
            revisions_applied: 1000,
            events_skipped: 0,
            leases_granted: 0,
            events_per_second,
            replay_duration: replay,
            duration: total,
            verification: Default::default(),
        }
    }

    #[test]
    fn snapshot_verdict_checks_the_ratio() {
        assert!(snapshot_verdict(0.95).starts_with("**Verdict: PASS**"));
        assert!(snapshot_verdict(0.9).starts_with("**Verdict: PASS**"));
        let fail = snapshot_verdict(0.85);
        assert!(
            fail.starts_with("**Verdict: FAIL**") && fail.contains("0.85x"),
            "{fail}"
        );
    }

    #[test]
    fn write_verdict_checks_the_drop() {
        assert!((drop_pct(1000.0, 960.0) - 4.0).abs() < 1e-9);
        assert!(drop_pct(1000.0, 1010.0) < 0.0);
        let pass = writes_verdict(4.0);
        assert!(
            pass.starts_with("**Verdict: PASS**") && pass.contains("4.0% lower"),
            "{pass}"
        );
        assert!(writes_verdict(-1.5).contains("1.5% higher"));
        assert!(writes_verdict(5.1).starts_with("**Verdict: FAIL**"));
    }

    fn sample() -> BackupResults {
        let status = quorate_etcd::MemberStatus {
            endpoint: "http://127.0.0.1:1".into(),
            member_id: 1,
            cluster_id: 2,
            leader_id: 1,
            raft_term: 2,
            raft_index: 10,
            raft_applied_index: 10,
            revision: 5000,
            db_size: 210_000_000,
            db_size_in_use: 210_000_000,
            is_learner: false,
            version: "3.4.23".into(),
            errors: Vec::new(),
            storage_version: String::new(),
            downgrade_target: None,
        };
        let secs = Duration::from_secs;
        let write = |round, mode, ok| WriteRound {
            round,
            mode,
            ok,
            failed: 0,
            elapsed: secs(10),
            p50: Duration::from_millis(2),
            p99: Duration::from_millis(9),
            revisions: ok as i64,
            capture: (mode == DeltaMode::On).then(|| DeltaStats {
                batches: 10,
                events: ok,
                ..DeltaStats::default()
            }),
            lag_at_end: (mode == DeltaMode::On).then_some(2400),
            watched: None,
            caught_up: (mode == DeltaMode::CatchUpOnly).then_some(CatchUpStats {
                catch_ups: 10,
                events: ok,
                responses: 60,
            }),
            etcd_cpu: Some(secs(5)),
            bench_cpu: Some(secs(4)),
            errors: Vec::new(),
        };
        BackupResults {
            settings: Settings {
                db_mb: 200,
                rounds: 1,
                clients: 8,
                write_seconds: 10,
                replay_events: 1000,
                delta_period: secs(1),
                catch_up_every: secs(1),
                write_modes: DeltaMode::ALL.to_vec(),
            },
            machine: MachineFacts {
                cpus: 2,
                etcd_version: Some("3.4.23".into()),
                ..MachineFacts::default()
            },
            fill: Filled {
                keys: 64_000,
                value_bytes: 160_000_000,
                elapsed: secs(8),
                status,
            },
            snapshots: vec![
                SnapshotRound {
                    round: 1,
                    side: Side::Quorate,
                    elapsed: secs(2),
                    bytes: 200_000_000,
                },
                SnapshotRound {
                    round: 1,
                    side: Side::Etcdctl,
                    elapsed: secs(4),
                    bytes: 200_000_000,
                },
            ],
            uploads: vec![UploadRound {
                round: 1,
                kind: UploadKind::Gzip,
                elapsed: secs(5),
                input_bytes: 200_000_000,
                stored_bytes: 150_000_000,
            }],
            restores: vec![
                RestoreRound {
                    round: 1,
                    kind: RestoreKind::Quorate,
                    elapsed: secs(3),
                },
                RestoreRound {
                    round: 1,
                    kind: RestoreKind::Etcdctl,
                    elapsed: secs(2),
                },
            ],
            replay: Some(ReplayResult {
                clients: 8,
                writes: 1000,
                write_rate: 2000.0,
                capture: DeltaStats::default(),
                source_revision: 6000,
                report: sample_report("/tmp/x", 500.0, secs(2), secs(3)),
                peak_rss_bytes: Some(64 * 1048576),
                txn_report: sample_report("/tmp/y", 100.0, secs(10), secs(11)),
                txn35_report: None,
                floor: secs(1),
                floor_snapshot_bytes: 100_000_000,
                baseline_rates: vec![1000.0],
                verify: secs(1),
                fetch_decode: Duration::from_millis(100),
            }),
            writes: vec![
                write(1, DeltaMode::Off, 50_000),
                write(1, DeltaMode::WatchOnly, 50_000),
                write(1, DeltaMode::CatchUpOnly, 50_000),
                write(1, DeltaMode::OnPlain, 50_000),
                write(1, DeltaMode::On, 48_000),
            ],
        }
    }

    #[test]
    fn report_shows_each_comparison_with_its_ratio_and_verdict() {
        let text = render(&sample());
        assert!(
            text.contains(
                "| quorate `save_to_file` | 2.00 s | 2.00 s | 2.00 s | 100.0 | 200.0 MB |"
            ),
            "{text}"
        );
        assert!(text.contains("(median MB/s): 2.00x**"), "{text}");
        assert!(text.contains("full snapshot throughput 2.00x"), "{text}");
        assert!(
            text.contains("**Ratio quorate / etcdctl (medians): 1.50x**"),
            "{text}"
        );
        assert!(text.contains("**500 events/s**"), "{text}");
        assert!(text.contains("6000 (= source head 6000)"), "{text}");
        assert!(
            text.contains("**Replay rate / one-client writes: 0.50x (database file), 0.10x"),
            "{text}"
        );
        assert!(
            text.contains(
                "**Replay rate, database file / the fastest one-txn-per-revision replay: 5.0x.**"
            ),
            "{text}"
        );
        assert!(text.contains("| 3.00 s | 3.0x |"), "{text}");
        assert!(text.contains("64 MiB"), "{text}");
        assert!(text.contains("| on | 4800 |"), "{text}");
        assert!(text.contains("48000 / 48000"), "{text}");
        assert!(text.contains("(median writes/s): -4.0%**"), "{text}");
        assert!(text.contains("4.0% lower than without"), "{text}");
        assert!(text.contains("within the same round): -4.0%."), "{text}");
        assert!(text.contains("| 100 ms | 80 ms |"), "{text}");
        assert!(
            text.contains("bare watch +0.0 ms (etcd +0.0, benchmark process +0.0)"),
            "{text}"
        );
        assert!(
            text.contains("with gzip +7.5 ms (etcd +4.2, benchmark process +3.3)"),
            "{text}"
        );
        assert!(
            text.contains("50000 / 50000 (received in 60 responses, 10 catch-ups)"),
            "{text}"
        );
        assert!(
            text.contains("catch-up watch +0.0 ms (etcd +0.0, benchmark process +0.0)"),
            "{text}"
        );
        assert!(text.contains("about 500 ms of writes earlier"), "{text}");
        assert!(
            text.contains("p99 9.0 ms off, 9.0 ms with the catch-ups alone, 9.0 ms on."),
            "{text}"
        );
        assert!(text.contains("- CPUs (nproc): 2"), "{text}");
        assert!(
            text.contains(
                "target/release/quorate-bench backup --output docs/benchmarks/backup.md`"
            ),
            "{text}"
        );
    }
}
