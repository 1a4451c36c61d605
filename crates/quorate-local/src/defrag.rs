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
use quorate_core::maintenance::defrag::{DefragOutcome, DefragRecord, current_round};

/// Asks the agents of cluster `name` for one defragmentation of every member; returns the
/// request's ID.
pub fn request(ctx: &LocalContext, name: &str) -> Result<String, LocalError> {
    object::request(
        &ctx.existing(name)?,
        quorate_api::defrag::DEFRAGMENT,
        "defrag",
    )
}

/// Where the round for `request` stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// No round has taken the request up yet.
    NotStarted,
    /// The round runs: the members through with it, with how it went, and those still to go.
    Running {
        /// Members through with the round.
        through: Vec<(String, DefragOutcome)>,
        /// Members still to go.
        waiting: Vec<String>,
    },
    /// Every member is through.
    Done(Vec<(String, DefragOutcome)>),
}

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
    let Some(round) = current_round(records.iter().map(|(_, r)| r))
        .filter(|r| r.request.as_deref() == Some(request))
    else {
        return Ok(Progress::NotStarted);
    };
    let mut through = Vec::new();
    let mut waiting = Vec::new();
    for (member, record) in records {
        match record.last.filter(|l| l.round >= round.id) {
            Some(outcome) => through.push((member, outcome)),
            None => waiting.push(member),
        }
    }
    Ok(if waiting.is_empty() {
        Progress::Done(through)
    } else {
        Progress::Running { through, waiting }
    })
}
