//! What each step does to the cluster (`inject`), and the evidence that it healed: every
//! member answering linearizable reads, the bucket holding the cluster's revision.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::cluster::LocalCluster;
use crate::faults::disk::SmallDisks;
use crate::faults::network::{MemberPorts, Partitioner};
use crate::faults::store_proxy::{StoreFault, StoreProxy};
use crate::faults::{Step, Target};
use crate::run::{Bucket, CLUSTER, HEAL_DEADLINE, RunError, manifest};

/// What a step needs to act on.
pub(crate) struct StepContext<'a> {
    pub(crate) cluster: &'a LocalCluster,
    pub(crate) clock_dir: &'a std::path::Path,
    pub(crate) anomalies: &'a mut Vec<String>,
    pub(crate) members: &'a [String],
    pub(crate) partitioner: Option<&'a Partitioner>,
    pub(crate) ports: &'a BTreeMap<String, MemberPorts>,
    pub(crate) paused: &'a AtomicBool,
    pub(crate) bucket: &'a Bucket,
    pub(crate) proxy: Option<&'a StoreProxy>,
}

impl StepContext<'_> {
    fn pid(&self, member: usize, target: Target) -> Option<i32> {
        let name = &self.members[member];
        match target {
            Target::Etcd => self.cluster.etcd_pid(name),
            Target::Agent => self.cluster.agent_pid(name),
        }
    }

    /// Stops a member (agent and etcd), removes its data and kills it, so its agent restarts
    /// on an empty directory.
    fn wipe(&self, member: usize) {
        let pids = self.member_pids(member);
        for pid in &pids {
            LocalCluster::signal(*pid, Signal::SIGSTOP);
        }
        let data = self.cluster.member_dir(&self.members[member]).join("data");
        let _ = std::fs::remove_dir_all(&data);
        for pid in pids {
            LocalCluster::signal(pid, Signal::SIGKILL);
        }
    }

    fn member_pids(&self, member: usize) -> Vec<i32> {
        [
            self.pid(member, Target::Agent),
            self.pid(member, Target::Etcd),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Every member's etcd PID.
fn etcd_pids(ctx: &StepContext<'_>) -> Vec<Option<i32>> {
    (0..ctx.members.len())
        .map(|m| ctx.pid(m, Target::Etcd))
        .collect()
}

/// Records an anomaly unless every member's etcd is the same process as `before`: quorate's
/// own crash must never restart etcd.
fn etcd_kept(ctx: &mut StepContext<'_>, before: &[Option<i32>], what: &str) {
    let after = etcd_pids(ctx);
    if after != before {
        ctx.anomalies.push(format!(
            "etcd restarted after {what}: PIDs {before:?} before, {after:?} after (each running \
             etcd must be adopted)"
        ));
    }
}

/// Carries out `step`, returning once its fault is healed (or its operation done), with the
/// instant the fault itself ended (before any catching up it waited for).
pub(crate) async fn inject(
    mut ctx: StepContext<'_>,
    step: &Step,
    quota_flip: bool,
) -> Result<Instant, RunError> {
    let mut ended = None;
    match step {
        Step::ScaleOut { kill_after } => {
            let data = ctx.cluster.member_dir(&ctx.members[1]).join("data");
            let killer = tokio::spawn(kill_etcd_after(data, *kill_after));
            let applied = ctx.cluster.apply(&manifest(3, "8Gi", ctx.bucket));
            killer.abort();
            applied?;
        }
        Step::ClockSkew {
            member,
            skew_s,
            hold,
        } => {
            let file = ctx.clock_dir.join(&ctx.members[*member]);
            std::fs::write(&file, skew_s.to_string())
                .map_err(|e| RunError::Harness(format!("{}: {e}", file.display())))?;
            tokio::time::sleep(*hold).await;
            let _ = std::fs::remove_file(&file);
            ended = Some(Instant::now());
            // Backups go on, whoever's clock is wrong: the bucket's evidence.
            let head = current_revision(&ctx.cluster.endpoints()?)
                .await
                .ok_or_else(|| RunError::Harness("no revision after the clock skew".into()))?;
            bucket_reaches(&ctx, head, Duration::from_secs(120)).await?;
        }
        Step::CorruptBackup => corrupt_backup(ctx).await?,
        Step::Kill { member, target } => {
            if let Some(pid) = ctx.pid(*member, *target) {
                LocalCluster::signal(pid, Signal::SIGKILL);
            }
        }
        Step::Pause {
            member,
            target,
            hold,
        } => {
            if let Some(pid) = ctx.pid(*member, *target) {
                LocalCluster::signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(*hold).await;
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::CrashAll => {
            ctx.cluster.crash();
            ctx.cluster
                .quorate(&["up", "-d", "-f", &manifest_path(&ctx), "--timeout", "120s"])?;
        }
        Step::SupervisorKill => {
            let before = etcd_pids(&ctx);
            if let Some(pid) = ctx.cluster.supervisor_pid() {
                LocalCluster::signal(pid, Signal::SIGKILL);
                let deadline = Instant::now() + HEAL_DEADLINE;
                while !crate::cluster::exited(pid) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            ended = Some(Instant::now());
            ctx.cluster
                .quorate(&["up", "-d", "-f", &manifest_path(&ctx), "--timeout", "120s"])?;
            etcd_kept(&mut ctx, &before, "the supervisor's kill");
        }
        Step::AllAgentsKill => {
            let before = etcd_pids(&ctx);
            let agents: Vec<i32> = (0..ctx.members.len())
                .filter_map(|m| ctx.pid(m, Target::Agent))
                .collect();
            for pid in &agents {
                LocalCluster::signal(*pid, Signal::SIGKILL);
            }
            ended = Some(Instant::now());
            // The supervisor restarts each agent; the new ones adopt the running etcds.
            let deadline = Instant::now() + HEAL_DEADLINE;
            while Instant::now() < deadline
                && !(0..ctx.members.len()).all(|m| {
                    ctx.pid(m, Target::Agent)
                        .is_some_and(|pid| !agents.contains(&pid))
                })
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            etcd_kept(&mut ctx, &before, "every agent's kill");
        }
        Step::PauseSupervisor { hold } => {
            if let Some(pid) = ctx.cluster.supervisor_pid() {
                LocalCluster::signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(*hold).await;
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::Partition { member, hold } => {
            let partitioner = ctx
                .partitioner
                .ok_or_else(|| RunError::Harness("partitions are not available".into()))?;
            partitioner
                .cut(&ctx.members[*member], ctx.ports)
                .map_err(RunError::Harness)?;
            let cut_off = Instant::now();
            // The fault must be real: the cut member stops serving linearizable reads.
            let endpoint = ctx.cluster.endpoints()?[*member].clone();
            let isolated = async {
                while answers_linearizable(&endpoint).await {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            };
            let proved = tokio::time::timeout(Duration::from_secs(15), isolated).await;
            tokio::time::sleep(hold.saturating_sub(cut_off.elapsed())).await;
            partitioner.heal().map_err(RunError::Harness)?;
            if proved.is_err() {
                return Err(RunError::Harness(format!(
                    "member {member} still served linearizable reads 15 s after it was cut off: \
                     the partition did not take effect"
                )));
            }
        }
        Step::Store { fault, hold } => {
            let proxy = ctx
                .proxy
                .ok_or_else(|| RunError::Harness("the store proxy is not running".into()))?;
            let lost_before = proxy.lost().len();
            proxy.set(*fault);
            tokio::time::sleep(*hold).await;
            proxy.set(StoreFault::None);
            ended = Some(Instant::now());
            if *fault == StoreFault::LoseWrites && proxy.lost().len() == lost_before {
                return Err(RunError::Harness(format!(
                    "no snapshot upload was lost in {hold:?}: the fault did not take effect"
                )));
            }
            // Healed means backups caught up again, on the bucket's own evidence.
            let head = current_revision(&ctx.cluster.endpoints()?)
                .await
                .ok_or_else(|| RunError::Harness("no revision after the store fault".into()))?;
            bucket_reaches(&ctx, head, Duration::from_secs(120)).await?;
        }
        Step::DiskFull { member, hold } => {
            let dir = ctx.cluster.member_dir(&ctx.members[*member]);
            SmallDisks::fill(&dir).map_err(|e| RunError::Harness(format!("fill: {e}")))?;
            tokio::time::sleep(*hold).await;
            SmallDisks::free(&dir);
        }
        Step::SlowRestart {
            stopped,
            wiped,
            hold,
        } => {
            let held = ctx.member_pids(*stopped);
            for pid in &held {
                LocalCluster::signal(*pid, Signal::SIGSTOP);
            }
            ctx.wipe(*wiped);
            tokio::time::sleep(*hold).await;
            for pid in held {
                LocalCluster::signal(pid, Signal::SIGCONT);
            }
        }
        Step::QuorumLoss { survivor } => {
            // Losing a majority's data loses what only that majority held, by design (etcd
            // commits on a majority): the survivor first holds the cluster's revision, with the
            // clients paused, so what is tested is the recovery, not the arithmetic.
            ctx.paused.store(true, Ordering::Relaxed);
            let caught_up = survivor_caught_up(&ctx, *survivor).await;
            if caught_up.is_ok() {
                for member in 0..3 {
                    if member != *survivor {
                        ctx.wipe(member);
                    }
                }
            }
            ctx.paused.store(false, Ordering::Relaxed);
            caught_up?;
        }
        Step::TotalLoss => {
            // Evidence first: the bucket must hold every acknowledged write, so the clients
            // pause until it does (a total loss loses what was never backed up, by design).
            ctx.paused.store(true, Ordering::Relaxed);
            let result = total_loss(&ctx, true).await;
            ctx.paused.store(false, Ordering::Relaxed);
            result?;
        }
        Step::TotalLossUnbacked => total_loss(&ctx, false).await?,
        Step::BackupLeaderChange => {
            if let Some(leader) = leader_index(&ctx).await
                && let Some(pid) = ctx.pid(leader, Target::Etcd)
            {
                LocalCluster::signal(pid, Signal::SIGKILL);
            }
        }
        Step::RollingUpdate => ctx
            .cluster
            .apply(&manifest(3, quota(quota_flip), ctx.bucket))?,
        Step::ScaleIn => {
            ctx.cluster
                .apply(&manifest(2, quota(quota_flip), ctx.bucket))?;
            ctx.cluster
                .apply(&manifest(3, quota(quota_flip), ctx.bucket))?;
        }
        Step::Defragment => ctx.cluster.defragment()?,
        Step::Hibernate => {
            // No etcd runs while hibernated: what is tested is that nothing acknowledged before
            // is lost across it, not how many writes time out meanwhile.
            ctx.paused.store(true, Ordering::Relaxed);
            let slept = ctx
                .cluster
                .apply(&manifest(0, quota(quota_flip), ctx.bucket));
            let woke = slept.and_then(|()| {
                ctx.cluster
                    .apply(&manifest(3, quota(quota_flip), ctx.bucket))
            });
            ctx.paused.store(false, Ordering::Relaxed);
            woke?;
        }
    }
    Ok(ended.unwrap_or_else(Instant::now))
}

/// The quota in effect: a rolling update flips it.
fn quota(flipped: bool) -> &'static str {
    if flipped { "9Gi" } else { "8Gi" }
}

/// The cluster's revision once the paused clients' last writes have returned (their timeout
/// and a second), before `what`.
async fn settled_head(ctx: &StepContext<'_>, what: &str) -> Result<i64, RunError> {
    tokio::time::sleep(Duration::from_secs(6)).await;
    current_revision(&ctx.cluster.endpoints()?)
        .await
        .ok_or_else(|| RunError::Harness(format!("no revision before {what}")))
}

/// Waits until member `survivor` has applied the cluster's newest revision (its own answer).
async fn survivor_caught_up(ctx: &StepContext<'_>, survivor: usize) -> Result<(), RunError> {
    let head = settled_head(ctx, "the quorum loss").await?;
    let endpoints = ctx.cluster.endpoints()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let own = async {
            let mut client =
                etcd_client::Client::connect([endpoints[survivor].as_str()], None).await?;
            client.status().await
        };
        if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(2), own).await
            && status.header().is_some_and(|h| h.revision() >= head)
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RunError::Harness(format!(
                "member {survivor} did not reach revision {head} within 30 s"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills the etcd whose data directory is `data` once `after` has passed and it runs.
async fn kill_etcd_after(data: PathBuf, after: Duration) {
    tokio::time::sleep(after).await;
    let needle = format!("--data-dir={}", data.display());
    loop {
        if let Some(pid) = crate::cluster::find_process(&["etcd", &needle]) {
            LocalCluster::signal(pid, Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Corrupts the newest object a restore reads; a restore while it is corrupt must refuse and
/// name it. A restore that succeeded from a full snapshot reaching past the corrupted object
/// (taken after the corruption) never read it: the step corrupts the new newest one and tries
/// again, up to [`CORRUPT_ATTEMPTS`] times.
async fn corrupt_backup(ctx: StepContext<'_>) -> Result<(), RunError> {
    let manifest = std::fs::read_to_string(manifest_path(&ctx))
        .map_err(|e| RunError::Harness(format!("read the manifest: {e}")))?;
    let secret_dir = ctx.cluster.dir().join("secrets/s3-creds");
    let options = quorate_backup::store::StoreOptions {
        local_root: ctx.cluster.dir().join("backups"),
        secret_dir: secret_dir.is_dir().then_some(secret_dir),
        encryption_keys: None,
    };
    for _ in 0..CORRUPT_ATTEMPTS {
        let corrupted = crate::faults::bucket::corrupt_newest_restored(&manifest, &options)
            .await
            .map_err(RunError::Harness)?;
        let scratch = tempfile::tempdir().map_err(|e| RunError::Harness(e.to_string()))?;
        let target = scratch.path().join("data");
        let restore = ctx.cluster.quorate(&[
            "restore",
            "-f",
            &manifest_path(&ctx),
            "--data-dir",
            &target.display().to_string(),
        ]);
        let name = corrupted
            .snapshot
            .path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let superseded = restore
            .as_ref()
            .ok()
            .and_then(|out| restored_full_revision(out))
            .is_some_and(|full| corrupted.superseded_by(full));
        match restore {
            Ok(_) if superseded => {
                eprintln!(
                    "[chaos]          a full snapshot taken after {name} was corrupted made the \
                     restore pass it by; corrupting the newest object again"
                );
                corrupted.heal().await.map_err(RunError::Harness)?;
                continue;
            }
            Ok(_) => ctx.anomalies.push(format!(
                "a restore through the corrupted {name} succeeded instead of refusing it"
            )),
            Err(e) if !e.to_string().contains(&name) => ctx.anomalies.push(format!(
                "a restore through the corrupted {name} failed without naming it: {e}"
            )),
            Err(_) => {}
        }
        return corrupted.heal().await.map_err(RunError::Harness);
    }
    Err(RunError::Harness(format!(
        "a new full snapshot passed the corrupted object by {CORRUPT_ATTEMPTS} times in a row"
    )))
}

/// How often the corrupted-backup step corrupts again when a new full snapshot passed the
/// corrupted object by.
const CORRUPT_ATTEMPTS: usize = 3;

/// The full snapshot's revision `quorate restore` reports ("... (full snapshot at N, ...").
fn restored_full_revision(output: &str) -> Option<i64> {
    let rest = output.split("full snapshot at ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn manifest_path(ctx: &StepContext<'_>) -> String {
    ctx.cluster.dir().join("etcd.yaml").display().to_string()
}

/// Crashes every member, wipes their data and starts the cluster again (which restores from
/// the bucket); first waits until the bucket holds the cluster's revision when `backed_up`.
async fn total_loss(ctx: &StepContext<'_>, backed_up: bool) -> Result<(), RunError> {
    if backed_up {
        let head = settled_head(ctx, "the total loss").await?;
        bucket_reaches(ctx, head, Duration::from_secs(60)).await?;
    }
    ctx.cluster.crash();
    for member in ctx.members {
        let _ = std::fs::remove_dir_all(ctx.cluster.member_dir(member).join("data"));
    }
    let up = ctx
        .cluster
        .quorate(&["up", "-d", "-f", &manifest_path(ctx), "--timeout", "180s"]);
    if let Err(e) = &up {
        let ss = std::process::Command::new("ss").arg("-tanp").output();
        eprintln!(
            "[chaos] up failed: {e}\n{}",
            ss.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        );
    }
    up?;
    Ok(())
}

/// Waits until the bucket holds revision `head` in one chain: from its newest full snapshot
/// through deltas without a missing revision, as a restore reads it (a lost object in the
/// middle leaves the newest delta beyond `head` and the chain short of it).
async fn bucket_reaches(
    ctx: &StepContext<'_>,
    head: i64,
    within: Duration,
) -> Result<(), RunError> {
    let deadline = Instant::now() + within;
    loop {
        let listed = ctx.cluster.quorate(&["backups", "list", CLUSTER])?;
        if chain_reaches(&listed) >= head {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RunError::Harness(format!(
                "the bucket did not reach revision {head} within {within:?}:\n{listed}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The S3 server's credentials where the local cluster reads its store Secret.
pub(crate) fn write_s3_secret(cluster: &LocalCluster) -> Result<(), RunError> {
    let dir = cluster.dir().join("secrets/s3-creds");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for (k, v) in [
            ("accessKeyID", "testing"),
            ("secretAccessKey", "testing"),
            ("region", "us-east-1"),
        ] {
            std::fs::write(dir.join(k), v)?;
        }
        Ok(())
    };
    write().map_err(|e| RunError::Harness(format!("{}: {e}", dir.display())))
}

/// The revision a restore of the listed bucket reaches (`backups list`'s table: kind, start,
/// last, …; a final snapshot's kind reads `Full (final)`).
fn chain_reaches(listing: &str) -> i64 {
    use quorate_core::gc::{SnapshotInfo, SnapshotKind};
    let snapshots: Vec<SnapshotInfo> = listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let kind = match words.next()? {
                "Full" => SnapshotKind::Full,
                "Incr" => SnapshotKind::Incr,
                _ => return None,
            };
            let mut numbers = words.filter(|w| !w.starts_with('('));
            Some(SnapshotInfo {
                kind,
                start_revision: numbers.next()?.parse().ok()?,
                last_revision: numbers.next()?.parse().ok()?,
                created: jiff::Timestamp::UNIX_EPOCH,
            })
        })
        .collect();
    quorate_core::backup_continuity::chain_reach(&snapshots).through
}

async fn current_revision(endpoints: &[String]) -> Option<i64> {
    let mut client = etcd_client::Client::connect(endpoints, None).await.ok()?;
    let r = client.get("chaos-revision-probe", None).await.ok()?;
    r.header().map(|h| h.revision())
}

/// Index of the member whose etcd leads.
async fn leader_index(ctx: &StepContext<'_>) -> Option<usize> {
    let endpoints = ctx.cluster.endpoints().ok()?;
    for (i, url) in endpoints.iter().enumerate() {
        let Ok(mut client) = etcd_client::Client::connect([url.as_str()], None).await else {
            continue;
        };
        if let Ok(status) = client.status().await
            && status.leader() == status.header().map_or(0, |h| h.member_id())
        {
            return Some(i);
        }
    }
    None
}

/// Waits until every member answers a linearizable read on its own.
pub(crate) async fn wait_healthy(endpoints: &[String]) -> Result<(), ()> {
    let deadline = Instant::now() + HEAL_DEADLINE;
    'poll: loop {
        if Instant::now() > deadline {
            return Err(());
        }
        for url in endpoints {
            if !answers_linearizable(url).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue 'poll;
            }
        }
        return Ok(());
    }
}

/// Whether the member at `url` answers a linearizable read within 2 s.
async fn answers_linearizable(url: &str) -> bool {
    tokio::time::timeout(Duration::from_secs(2), async {
        let mut client = etcd_client::Client::connect([url], None).await?;
        client.get("chaos-health", None).await
    })
    .await
    .is_ok_and(|r| r.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_a_restore_reaches_is_read_from_the_listing() {
        let listing = "s3://chaos-backups/chaos at http://127.0.0.1:4000
KIND  START  LAST  SIZE  CREATED               OBJECT
Full  0      1     120   2026-11-25T12:00:00Z  chaos/v2/Full-00000000-00000001-1795000000
Incr  2      57    900   2026-11-25T12:00:01Z  chaos/v2/Incr-00000002-00000057-1795000001
Incr  58     63    90    2026-11-25T12:00:02Z  chaos/v2/Incr-00000058-00000063-1795000002
";
        assert_eq!(chain_reaches(listing), 63);
        assert_eq!(chain_reaches("(no snapshots)"), 0);
        // A lost delta: the newest one lies beyond a gap a restore cannot cross.
        let gap = listing.replace("Incr  2      57", "Incr  3      57");
        assert_eq!(chain_reaches(&gap), 1);
        let final_full = "Full (final)  0  70  120  2026-11-25T12:00:03Z  chaos/v2/Full-final";
        assert_eq!(chain_reaches(&format!("{listing}{final_full}\n")), 70);
    }

    #[test]
    fn the_full_snapshot_a_restore_started_from_is_read_from_its_report() {
        let out = "restored revision 9853 (full snapshot at 9860, 0 deltas, 0 events at 0 \
                   events/s) in 0.4s\nverified: hash matches\n";
        assert_eq!(restored_full_revision(out), Some(9860));
        assert_eq!(restored_full_revision("restored nothing"), None);
    }
}
