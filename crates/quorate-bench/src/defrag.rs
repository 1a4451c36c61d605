//! `quorate-bench defrag`: defragmenting a 3-member cluster with a database of at least 1 GB
//! under 8 writing clients, in quorate's order (followers one at a time, then the leader after
//! handing leadership to a defragmented follower: `quorate defrag`) against druid's order
//! (etcd-backup-restore: every follower, then the leader in place, with etcd's defragment call
//! per member), on the same cluster in the same run. Before each method the database is grown
//! again (the same keys rewritten, then compacted) so both reclaim the same amount.
//!
//! Each client writes small values without pause, as a client that fails over would: it
//! holds a connection to every member, sends each write to its current member, and when an
//! attempt has no answer within 1 s moves to the next member and retries there (a member being
//! defragmented answers nothing until it is done, and etcd-client's own balancing keeps sending
//! to it). A write fails when it is not acknowledged within 5 s. Both orders are measured with
//! the same clients. The table shows, per method, the writes during the operation, failed
//! writes, p99 and longest write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use etcd_client::{Client, CompactionOptions, ConnectOptions};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use tokio::task::JoinHandle;

use crate::error::{BenchError, Result};
use crate::observe::{ATTEMPT_TIMEOUT, PUT_TIMEOUT};
use crate::quorate_run::{LocalCluster, NAME};
use crate::report::{MachineFacts, Markdown, Table, met};

/// The target: no write waits longer than this with quorate.
const TARGET_LONGEST: Duration = Duration::from_secs(2);
/// Writing clients.
const CLIENTS: usize = 8;
/// Value size of the data that grows the database.
const GROW_VALUE: usize = 256 * 1024;
/// Distinct keys the growth rewrites (about 500 MiB of live data).
const GROW_KEYS: usize = 2000;

/// `quorate-bench defrag` arguments.
#[derive(Debug, Args)]
pub struct DefragArgs {
    /// Database size to grow to before each method, in MiB.
    #[arg(long, default_value_t = 1100)]
    size_mib: u64,
    /// The quorate binary [default: `quorate` next to this executable].
    #[arg(long)]
    quorate: Option<std::path::PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Quorate,
    Druid,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::Quorate => "quorate (`quorate defrag`: followers, handover, former leader)",
            Method::Druid => "druid's order (followers, then the leader in place)",
        }
    }
}

/// One measured defragmentation of every member.
struct Measured {
    method: Method,
    elapsed: Duration,
    size_before: Vec<u64>,
    size_after: Vec<u64>,
    writes: Latencies,
    term_increase: u64,
}

/// Every write's wait in milliseconds, and the writes that failed.
#[derive(Default)]
struct Latencies {
    waits_ms: Vec<u64>,
    failed: u64,
}

impl Latencies {
    fn quantile(&self, q: f64) -> u64 {
        let mut sorted = self.waits_ms.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return 0;
        }
        let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
        sorted[at.min(sorted.len() - 1)]
    }

    fn longest(&self) -> u64 {
        self.waits_ms.iter().copied().max().unwrap_or(0)
    }
}

/// The writing clients.
struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Latencies>>,
}

impl Writers {
    async fn start(endpoints: &[String]) -> Result<Writers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let mut members = Vec::new();
            for url in endpoints {
                let options = ConnectOptions::new()
                    .with_connect_timeout(Duration::from_secs(2))
                    .with_timeout(ATTEMPT_TIMEOUT);
                members.push(Client::connect([url], Some(options)).await?);
            }
            // Spread the clients over the members, as a Service spreads connections.
            members.rotate_left(c % endpoints.len().max(1));
            tasks.push(tokio::spawn(write_loop(members, c, stop.clone())));
        }
        Ok(Writers { stop, tasks })
    }

    async fn stop(mut self) -> Latencies {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Latencies::default();
        for task in std::mem::take(&mut self.tasks) {
            if let Ok(l) = task.await {
                all.waits_ms.extend(l.waits_ms);
                all.failed += l.failed;
            }
        }
        all
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Writes through `members[current]`, moving to the next member after a failed attempt.
async fn write_loop(mut members: Vec<Client>, id: usize, stop: Arc<AtomicBool>) -> Latencies {
    let mut out = Latencies::default();
    let mut i = 0u64;
    let mut current = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let key = format!("writer/{id}/{}", i % 100);
        let started = Instant::now();
        loop {
            let client = &mut members[current];
            let attempt =
                tokio::time::timeout(ATTEMPT_TIMEOUT, client.put(key.clone(), "v", None)).await;
            if let Ok(Ok(_)) = attempt {
                out.waits_ms
                    .push(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
                break;
            }
            current = (current + 1) % members.len();
            tokio::time::sleep(Duration::from_millis(10)).await;
            if started.elapsed() >= PUT_TIMEOUT {
                out.failed += 1;
                break;
            }
        }
    }
    out
}

/// Runs the benchmark and prints (and writes) the report.
pub async fn run(args: DefragArgs) -> Result<()> {
    let quorate = match args.quorate {
        Some(path) => path,
        None => crate::default_quorate()?,
    };
    let mut machine = MachineFacts {
        quorate: Some(crate::quorate_binary(&quorate).await),
        ..MachineFacts::at_start()
    };
    let cluster = LocalCluster::up(&quorate, manifest()).await?;
    let endpoints = cluster.endpoints().await?;
    let version = member(&endpoints[0]).await?.status().await?.version;
    machine.etcd_version = Some(version);
    let mut results = Vec::new();
    for method in [Method::Druid, Method::Quorate] {
        eprintln!("growing the database to {} MiB ...", args.size_mib);
        grow(&endpoints, args.size_mib * 1024 * 1024).await?;
        eprintln!("{method:?}: defragmenting under {CLIENTS} writing clients ...");
        let result = measure(method, &cluster, &endpoints).await?;
        eprintln!(
            "  {:.1} s, {} writes, {} failed, p99 {} ms, longest {} ms",
            result.elapsed.as_secs_f64(),
            result.writes.waits_ms.len(),
            result.writes.failed,
            result.writes.quantile(0.99),
            result.writes.longest()
        );
        results.push(result);
    }
    let note = cluster.down().await;
    machine.finish();
    crate::publish_report(
        &render(&results, &machine, args.size_mib, note),
        args.output.as_deref(),
    )
}

fn manifest() -> String {
    crate::quorate_run::manifest(NAME, 3)
        // Thresholds off: only the measured method defragments (quorate's agents would start a
        // threshold round of their own on the grown database).
        .replace(
            "metadata:\n",
            "metadata:\n  annotations:\n    quorate.io/etcd-version: \"3.5\"\n    \
             quorate.io/defrag-free-bytes: 1Pi\n    quorate.io/defrag-near-quota-percent: \"0\"\n",
        )
        .replace(
            "    heartbeatDuration: 1s\n",
            "    heartbeatDuration: 1s\n    quota: 8Gi\n    defragmentationSchedule: \"0 0 31 2 *\"\n",
        )
}

async fn member(url: &str) -> Result<MemberClient> {
    // A member busy with a large defragmentation or compaction answers slowly.
    let timeouts = EtcdTimeouts {
        connect: Duration::from_secs(2),
        request: Duration::from_secs(30),
        long_request: Duration::from_secs(900),
    };
    Ok(MemberClient::connect(url, None, timeouts).await?)
}

/// Rewrites [`GROW_KEYS`] keys with [`GROW_VALUE`]-byte values until the leader's database
/// file holds `bytes`, then compacts: about half of it is live data a defragmentation copies,
/// the rest free pages it reclaims.
async fn grow(endpoints: &[String], bytes: u64) -> Result<()> {
    let mut client = Client::connect(endpoints, None).await?;
    let value = vec![b'g'; GROW_VALUE];
    let mut revision = 0;
    let mut i = 0usize;
    loop {
        for _ in 0..200 {
            let resp = client
                .put(format!("grow/{}", i % GROW_KEYS), value.clone(), None)
                .await?;
            revision = resp.header().map_or(revision, |h| h.revision());
            i += 1;
        }
        let status = client.status().await?;
        if u64::try_from(status.db_size()).unwrap_or(0) >= bytes {
            break;
        }
    }
    client
        .compact(revision, Some(CompactionOptions::new().with_physical()))
        .await?;
    Ok(())
}

async fn sizes(endpoints: &[String]) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for url in endpoints {
        let s = member(url).await?.status().await?;
        out.push(u64::try_from(s.db_size).unwrap_or(0));
    }
    Ok(out)
}

async fn max_term(endpoints: &[String]) -> Result<u64> {
    let mut term = 0;
    for url in endpoints {
        term = term.max(member(url).await?.status().await?.raft_term);
    }
    Ok(term)
}

async fn measure(method: Method, cluster: &LocalCluster, endpoints: &[String]) -> Result<Measured> {
    let size_before = sizes(endpoints).await?;
    let term_before = max_term(endpoints).await?;
    let writers = Writers::start(endpoints).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    match method {
        Method::Quorate => {
            cluster
                .command(
                    &["defrag", NAME, "--timeout", "15m"],
                    Duration::from_secs(16 * 60),
                )
                .await?;
        }
        Method::Druid => druid_order(endpoints).await?,
    }
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = writers.stop().await;
    Ok(Measured {
        method,
        elapsed,
        size_before,
        size_after: sizes(endpoints).await?,
        writes,
        term_increase: max_term(endpoints).await? - term_before,
    })
}

/// etcd-backup-restore's order: every follower, then the leader, each with etcd's defragment
/// call, leadership left where it is.
async fn druid_order(endpoints: &[String]) -> Result<()> {
    let mut leader = None;
    let mut order = Vec::new();
    for url in endpoints {
        let s = member(url).await?.status().await?;
        if s.leader_id == s.member_id {
            leader = Some(url.clone());
        } else {
            order.push(url.clone());
        }
    }
    order.push(leader.ok_or_else(|| BenchError::failed("no member leads"))?);
    for url in order {
        member(&url).await?.defragment().await?;
    }
    Ok(())
}

fn mib(bytes: &[u64]) -> String {
    bytes
        .iter()
        .map(|b| format!("{:.0}", *b as f64 / (1024.0 * 1024.0)))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn render(
    results: &[Measured],
    machine: &MachineFacts,
    size_mib: u64,
    note: Option<String>,
) -> String {
    let mut doc = Markdown::new();
    doc.heading(1, "Defragmentation under load: quorate's order vs druid's");
    doc.paragraph(format!(
        "A local 3-member cluster on etcd {} (quota 8Gi). Before each method the database is \
         grown to at least {size_mib} MiB by rewriting {GROW_KEYS} keys of {} KiB and compacted, \
         so about half of each member's file is live data and half free pages. {CLIENTS} clients write small values \
         without pause, each holding a connection to every member: a write goes to the client's \
         current member, and when an attempt has no answer within 1 s the client moves to the \
         next member and retries there (as a client that fails over does; the same clients for \
         both orders); a write fails when it is not acknowledged within 5 s. Time runs from the \
         start of the operation until every member is defragmented. druid's order is \
         etcd-backup-restore's: each follower, then the leader in place.",
        machine.etcd_version(),
        GROW_VALUE / 1024
    ));
    let mut table = Table::numeric(
        "method",
        [
            "time",
            "sizes before (MiB)",
            "sizes after (MiB)",
            "writes",
            "failed writes",
            "p99 write",
            "longest write",
            "raft term increases",
        ],
    );
    for r in results {
        table.row([
            r.method.label().to_string(),
            format!("{:.1} s", r.elapsed.as_secs_f64()),
            mib(&r.size_before),
            mib(&r.size_after),
            r.writes.waits_ms.len().to_string(),
            r.writes.failed.to_string(),
            format!("{} ms", r.writes.quantile(0.99)),
            format!("{} ms", r.writes.longest()),
            r.term_increase.to_string(),
        ]);
    }
    doc.table(&table);
    let quorate = results.iter().find(|r| r.method == Method::Quorate);
    let druid = results.iter().find(|r| r.method == Method::Druid);
    if let (Some(q), Some(d)) = (quorate, druid) {
        let ratio = d.writes.longest() as f64 / q.writes.longest().max(1) as f64;
        doc.paragraph(format!(
            "**Longest write, druid's order / quorate's: {ratio:.1}x**"
        ));
        doc.bullets([
            format!(
                "no write waits longer than {} s with quorate: {}",
                TARGET_LONGEST.as_secs(),
                met(u128::from(q.writes.longest()) <= TARGET_LONGEST.as_millis())
            ),
            format!(
                "0 failed writes with quorate: {}",
                met(q.writes.failed == 0)
            ),
            format!(
                "planned leadership transfers only (one raft term) with quorate: {}",
                met(q.term_increase <= 1)
            ),
        ]);
    }
    if let Some(note) = note {
        doc.paragraph(note);
    }
    doc.machine(
        machine,
        "cargo build --release -p quorate -p quorate-bench && target/release/quorate-bench \
         defrag --output docs/benchmarks/defrag.md",
    );
    doc.into_string()
}
