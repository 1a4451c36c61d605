//! `quorate-bench scale-in`: a 5-member cluster shrinks to 3, with `quorate apply` and by hand
//! with `etcdctl` as an etcd operator would do it (move the leadership off a leaving leader,
//! `member remove`, stop the process; highest member first), in the same run. The leader is
//! placed on the highest member first, so both must move it once. One client writes to member
//! 0 throughout; every member's leader ID and raft term are watched: each election raises the
//! term, so any rise beyond the one planned transfer is an election by timeout.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{EtcdTestCluster, etcdctl_binary};

use crate::error::{BenchError, Result};
use crate::hand::{CONVERGE_TIMEOUT, ETCD_DEFAULT_TIMING};
use crate::observe::{LeaderMonitor, LeaderReport, WriteCounts, Writer, wait_for_voters};
use crate::quorate_run::{LocalCluster, NAME, manifest};
use crate::report::{MachineFacts, Markdown, Table, met};

/// Target from the issue: quorate within this factor of the hand procedure.
pub const TARGET_RATIO: f64 = 1.3;
/// Leadership transfers both methods must make (the leader starts on a leaving member).
const PLANNED_TRANSFERS: u64 = 1;

/// `quorate-bench scale-in` arguments.
#[derive(Debug, Args)]
pub struct ScaleInArgs {
    /// Rounds per method.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// The quorate binary [default: `quorate` next to this executable].
    #[arg(long)]
    quorate: Option<std::path::PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
}

/// How a round was done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Quorate,
    Hand,
}

impl Method {
    fn label(self) -> &'static str {
        match self {
            Method::Quorate => "quorate (`apply`, replicas 5 → 3)",
            Method::Hand => "by hand (`etcdctl move-leader`, `member remove`, stop; twice)",
        }
    }
}

/// One measured scale-in.
struct Round {
    method: Method,
    elapsed: Duration,
    writes: WriteCounts,
    write_errors: Vec<String>,
    leader: LeaderReport,
}

/// Runs the benchmark and prints (and writes) the report.
pub async fn run(args: ScaleInArgs) -> Result<()> {
    let quorate = match args.quorate {
        Some(path) => path,
        None => crate::default_quorate()?,
    };
    let mut machine = MachineFacts {
        etcd_version: Some(crate::etcd_version().await),
        quorate: Some(crate::quorate_binary(&quorate).await),
        ..MachineFacts::at_start()
    };
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 {
            [Method::Quorate, Method::Hand]
        } else {
            [Method::Hand, Method::Quorate]
        };
        for method in order {
            eprintln!("round {round}/{}: {method:?} ...", args.rounds);
            let result = match method {
                Method::Quorate => quorate_round(&quorate).await,
                Method::Hand => hand_round().await,
            }
            .map_err(|e| BenchError::failed(format!("round {round}, {method:?}: {e}")))?;
            eprintln!(
                "  {:.2} s, {} writes, {} failed, term +{}",
                result.elapsed.as_secs_f64(),
                result.writes.ok,
                result.writes.failed,
                result.leader.term_increases
            );
            rounds.push(result);
        }
    }
    machine.finish();
    crate::publish_report(&render(&rounds, &machine), args.output.as_deref())
}

/// The member IDs by name, from `url`.
async fn ids_by_name(url: &str) -> Result<Vec<(String, u64)>> {
    let client = MemberClient::connect(url, None, EtcdTimeouts::fast()).await?;
    Ok(client
        .member_list()
        .await?
        .into_iter()
        .map(|m| (m.name, m.id))
        .collect())
}

/// Runs `etcdctl <args>` against `endpoints` until etcd accepts it (etcd refuses membership
/// changes for a few seconds after a member connects: "unhealthy cluster").
async fn etcdctl(endpoints: &str, args: &[&str]) -> Result<()> {
    let started = Instant::now();
    loop {
        let output = tokio::process::Command::new(etcdctl_binary())
            .arg(format!("--endpoints={endpoints}"))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(args)
            .env("ETCDCTL_API", "3")
            .kill_on_drop(true)
            .output()
            .await
            .map_err(BenchError::io("run", &etcdctl_binary()))?;
        if output.status.success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&output.stderr).into_owned();
        if started.elapsed() > Duration::from_secs(60) || !text.contains("unhealthy cluster") {
            return Err(BenchError::failed(format!(
                "etcdctl {}: {text}",
                args.join(" ")
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Moves the leadership to member `to` (hex ID) from wherever it is.
async fn move_leader(endpoints: &str, to: u64) -> Result<()> {
    etcdctl(endpoints, &["move-leader", &format!("{to:x}")]).await
}

/// Measures `procedure` (which must end with 3 voters) under a writer on `url` and the
/// leader monitor.
async fn measure<F>(method: Method, url: &str, procedure: F) -> Result<Round>
where
    F: std::future::Future<Output = Result<()>>,
{
    let writer = Writer::start(url).await?;
    let monitor = LeaderMonitor::start(url).await?;
    let t0 = Instant::now();
    let before = writer.counts();
    let converge = wait_for_voters(url, t0, 3, CONVERGE_TIMEOUT);
    let ((), converged) = tokio::try_join!(procedure, converge)?;
    let (writes, write_errors) = writer.stop().await;
    Ok(Round {
        method,
        elapsed: converged.elapsed,
        writes: writes - before,
        write_errors,
        leader: monitor.stop().await,
    })
}

/// The hand procedure on a 5-member cluster started with etcd's default raft timing.
async fn hand_round() -> Result<Round> {
    let mut cluster =
        EtcdTestCluster::start_with(5, |c| c.timing = Some(ETCD_DEFAULT_TIMING)).await;
    let urls = cluster.client_urls();
    let all = urls.join(",");
    let ids = ids_by_name(&urls[0]).await?;
    let id = |name: &str| ids.iter().find(|(n, _)| n == name).map(|(_, id)| *id);
    let (m0, m3, m4) = (id("m0"), id("m3"), id("m4"));
    let (Some(m0), Some(m3), Some(m4)) = (m0, m3, m4) else {
        return Err(BenchError::failed(format!(
            "unexpected member names: {ids:?}"
        )));
    };
    move_leader(&all, m4).await?;
    let round = measure(Method::Hand, &urls[0], async {
        for (i, leaving) in [(4, m4), (3, m3)] {
            let status = MemberClient::connect(&urls[0], None, EtcdTimeouts::fast())
                .await?
                .status()
                .await?;
            if status.leader_id == leaving {
                move_leader(&all, m0).await?;
            }
            etcdctl(&urls[0], &["member", "remove", &format!("{leaving:x}")]).await?;
            cluster.member_mut(i).kill();
        }
        Ok(())
    })
    .await?;
    drop(cluster);
    Ok(round)
}

/// quorate: `up -d` with 5 members, the leader moved to member 4, then `apply` with 3.
async fn quorate_round(bin: &Path) -> Result<Round> {
    let cluster = LocalCluster::up(bin, manifest(NAME, 5)).await?;
    let urls = cluster.endpoints().await?;
    let ids = ids_by_name(&urls[0]).await?;
    let leader = ids
        .iter()
        .find(|(n, _)| *n == format!("{NAME}-4"))
        .map(|(_, id)| *id)
        .ok_or_else(|| BenchError::failed(format!("no member {NAME}-4 in {ids:?}")))?;
    move_leader(&urls.join(","), leader).await?;
    let round = measure(Method::Quorate, &urls[0], async {
        cluster.apply(manifest(NAME, 3)).await
    })
    .await?;
    if let Some(note) = cluster.down().await {
        eprintln!("  {note}");
    }
    Ok(round)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

fn render(rounds: &[Round], machine: &MachineFacts) -> String {
    let mut doc = Markdown::new();
    doc.heading(1, "Scale-in 5 → 3: quorate vs. the same steps by hand");
    let per_method = rounds
        .iter()
        .filter(|r| r.method == Method::Quorate)
        .count();
    doc.paragraph(format!(
        "{per_method} round(s) per method, alternating which goes first; etcd {} with its \
         default raft timing for both. Before the start the leader is moved to the highest \
         member, so each method must hand leadership over once. Time runs from `quorate apply` \
         (or the first `etcdctl` call) until etcd's member list (read every 50 ms) shows 3 \
         voting members. One client writes to member 0 without pause; a put is retried when \
         an attempt has no answer within 1 s and counts as failed when it is not acknowledged \
         within 5 s (etcd drops a proposal that reaches a leader while it hands leadership \
         over, and the member that forwarded it waits out its request timeout); \
         every member's leader ID and raft term are read every 100 ms: each election raises \
         the term, so a rise beyond the planned transfer is an election by timeout.",
        machine.etcd_version()
    ));
    let mut table = Table::numeric(
        "method",
        [
            "median",
            "writes ok",
            "failed writes",
            "retried attempts",
            "longest write",
            "leader changes",
            "elections by timeout",
        ],
    );
    let mut medians = Vec::new();
    for method in [Method::Quorate, Method::Hand] {
        let of: Vec<&Round> = rounds.iter().filter(|r| r.method == method).collect();
        let m = median(of.iter().map(|r| r.elapsed).collect());
        medians.push(m);
        let sum = |f: fn(&Round) -> u64| of.iter().map(|r| f(r)).sum::<u64>();
        table.row([
            method.label().to_string(),
            format!("{:.2} s", m.as_secs_f64()),
            sum(|r| r.writes.ok).to_string(),
            sum(|r| r.writes.failed).to_string(),
            sum(|r| r.writes.retried).to_string(),
            format!(
                "{} ms",
                of.iter()
                    .map(|r| r.writes.longest_wait_ms)
                    .max()
                    .unwrap_or(0)
            ),
            sum(|r| u64::from(r.leader.leader_changes)).to_string(),
            sum(|r| r.leader.term_increases.saturating_sub(PLANNED_TRANSFERS)).to_string(),
        ]);
    }
    doc.table(&table);
    let ratio = medians[0].as_secs_f64() / medians[1].as_secs_f64().max(f64::EPSILON);
    let quorate: Vec<&Round> = rounds
        .iter()
        .filter(|r| r.method == Method::Quorate)
        .collect();
    let failed: u64 = quorate.iter().map(|r| r.writes.failed).sum();
    let timeouts: u64 = quorate
        .iter()
        .map(|r| r.leader.term_increases.saturating_sub(PLANNED_TRANSFERS))
        .sum();
    doc.paragraph(format!(
        "**Ratio quorate / by hand (medians): {ratio:.2}x**"
    ));
    doc.bullets([
        format!(
            "time ≤ {TARGET_RATIO}x the hand procedure: {}",
            met(ratio <= TARGET_RATIO)
        ),
        format!("0 failed writes with quorate: {}", met(failed == 0)),
        format!(
            "0 elections by timeout with quorate: {}",
            met(timeouts == 0)
        ),
    ]);
    let errors: Vec<String> = rounds
        .iter()
        .flat_map(|r| {
            r.write_errors
                .iter()
                .map(move |e| format!("{:?}: {e}", r.method))
        })
        .collect();
    if !errors.is_empty() {
        doc.heading(2, "Errors of write attempts (retried or failed)");
        doc.bullets(errors);
    }
    doc.heading(2, "Per round");
    let mut table = Table::numeric(
        "method",
        [
            "seconds",
            "failed writes",
            "retried attempts",
            "longest write",
            "raft term increases",
        ],
    );
    for r in rounds {
        table.row([
            format!("{:?}", r.method),
            format!("{:.2}", r.elapsed.as_secs_f64()),
            r.writes.failed.to_string(),
            r.writes.retried.to_string(),
            format!("{} ms", r.writes.longest_wait_ms),
            r.leader.term_increases.to_string(),
        ]);
    }
    doc.table(&table);
    doc.machine(
        machine,
        "cargo build --release -p quorate -p quorate-bench && target/release/quorate-bench \
         scale-in --output docs/benchmarks/scale-in.md",
    );
    doc.into_string()
}
