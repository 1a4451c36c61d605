//! `quorate defrag NAME`: the on-demand trigger of a defragmentation round. It puts the
//! `quorate.io/defragment` annotation on the stored `Etcd`, which reaches the agents through
//! the cluster configuration; the leader's agent starts a round for it (core
//! `maintenance::defrag`) and every member takes its turn, the leader last. [`progress`] reads
//! the members' records from their leases.

use crate::LocalError;
use crate::commands::LocalContext;
use crate::object;
use crate::render::read_config;
use quorate_coord::{Coordination, FileCoordination};
use quorate_core::maintenance::defrag::{DefragOutcome, DefragRecord, request_progress};

/// Asks the agents of cluster `name` for one defragmentation of every member; returns the
/// request's ID.
pub fn request(ctx: &LocalContext, name: &str) -> Result<String, LocalError> {
    object::request(
        &ctx.existing(name)?,
        quorate_api::defrag::DEFRAGMENT,
        "defrag",
    )
}

/// Where the round for `request` stands (core's, shared with the kubectl plugin).
pub use quorate_core::maintenance::defrag::RequestProgress as Progress;

/// How far the round for `request` has come, from the members' leases.
pub async fn progress(
    ctx: &LocalContext,
    name: &str,
    request: &str,
) -> Result<Progress, LocalError> {
    let dir = ctx.existing(name)?;
    let config = read_config(&dir)?;
    let leases = FileCoordination::new(dir.root()).member_leases().await?;
    let records: Vec<(String, DefragRecord)> = config
        .members
        .iter()
        .map(|m| {
            let record = leases
                .iter()
                .find(|l| l.name == m.lease_name)
                .and_then(DefragRecord::of_lease)
                .unwrap_or_default();
            (m.name.clone(), record)
        })
        .collect();
    Ok(request_progress(records, request))
}

/// How often [`wait`] reads the members' leases.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits for the round for `request` to finish, telling `changed` each new [`Progress`];
/// returns the members' outcomes, or `None` when `timeout` passed first (the agents go on with
/// the round).
pub async fn wait(
    ctx: &LocalContext,
    name: &str,
    request: &str,
    timeout: std::time::Duration,
    changed: &mut dyn FnMut(&Progress),
) -> Result<Option<Vec<(String, DefragOutcome)>>, LocalError> {
    let started = std::time::Instant::now();
    let mut last_seen = None;
    loop {
        let now = progress(ctx, name, request).await?;
        if last_seen.as_ref() != Some(&now) {
            changed(&now);
        }
        if let Progress::Done(through) = now {
            return Ok(Some(through));
        }
        if started.elapsed() >= timeout {
            return Ok(None);
        }
        last_seen = Some(now);
        tokio::time::sleep(POLL).await;
    }
}

/// The members' outcomes of a round as a table: database size before and after, time taken,
/// result.
pub fn outcome_table(through: &[(String, DefragOutcome)]) -> String {
    let mut out = format!(
        "{:<24} {:>12} {:>12} {:>10}  RESULT\n",
        "MEMBER", "BEFORE", "AFTER", "TOOK"
    );
    for (member, o) in through {
        let result = match (&o.error, o.skipped) {
            (Some(e), _) => format!("failed: {e}"),
            (None, true) => "skipped".to_string(),
            (None, false) => "defragmented".to_string(),
        };
        out.push_str(&format!(
            "{member:<24} {:>12} {:>12} {:>9.1}s  {result}\n",
            mib(o.size_before),
            mib(o.size_after),
            o.millis as f64 / 1000.0
        ));
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
