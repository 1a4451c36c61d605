//! The history checker: proves a run's history consistent with etcd's guarantees, or lists,
//! as typed [`Anomaly`]s, every way it is not.
//!
//! The watch (one watch over the workload's prefix from revision 1, complete through the run's
//! final revision) is the ground truth. In order:
//!
//! 1. the recorder's own rules hold ([`Anomaly::MalformedEvent`]);
//! 2. the watch stream is sane: revisions strictly increase, each value once, no phantom
//!    writes;
//! 3. unknown writes are patched from the watch: applied at the revision it shows, or not at
//!    all (no phantom deletes either);
//! 4. nothing acknowledged is lost ([`Anomaly::LostWrite`]);
//! 5. each key's linearizable operations are linearizable (Wing–Gong–Lowe, bounded; a failure
//!    carries a minimal failing history);
//! 6. real time agrees with revisions across keys, and
//! 7. within each client;
//! 8. every read agrees with the watch at its own revision (serializable gets may be stale,
//!    not wrong).

mod anomaly;
mod client_order;
mod linearizable;
mod lost;
mod model;
mod placement;
mod reads;
mod realtime;
mod render;
mod shrink;
mod unknowns;
mod watch;
mod wellformed;
mod wgl;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use anomaly::{Anomaly, OpRef};

use crate::history::History;

/// How hard the checker may work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// The linearizability search's step bound per key (and as much again to shrink a failing
    /// key's history). A key that hits it is reported as [`Anomaly::CheckIncomplete`], never
    /// passed; the search's memory grows with the steps, so this also bounds memory.
    pub max_steps_per_key: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_steps_per_key: 3_000_000,
        }
    }
}

/// What the checker found: the anomalies, and counts that show what was actually checked (a
/// run that checked nothing must not look like a run that passed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Everything wrong, in the order of the checks.
    pub anomalies: Vec<Anomaly>,
    /// Operations in the history.
    pub operations_checked: usize,
    /// Writes (puts, deletes, compare-and-puts) etcd answered.
    pub acknowledged_writes: usize,
    /// Unknown writes the watch shows applied.
    pub unknown_writes_applied: usize,
    /// Unknown writes that did not apply (or, for a delete, left no trace).
    pub unknown_writes_not_applied: usize,
    /// Distinct keys the operations touched.
    pub keys_checked: usize,
    /// Acknowledged writes missing from the watch ([`Anomaly::LostWrite`]s).
    pub lost_acknowledged_writes: usize,
    /// Linearizability search steps over all keys, to see how close keys came to the bound.
    pub search_steps: u64,
}

impl CheckReport {
    /// Whether the history passed every check.
    pub fn passed(&self) -> bool {
        self.anomalies.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations on {} keys: {} acknowledged writes ({} lost), unknown writes {} \
             applied and {} not applied, {} search steps; {}",
            self.operations_checked,
            self.keys_checked,
            self.acknowledged_writes,
            self.lost_acknowledged_writes,
            self.unknown_writes_applied,
            self.unknown_writes_not_applied,
            self.search_steps,
            if self.passed() {
                "passed".to_owned()
            } else {
                format!("{} anomalies:", self.anomalies.len())
            }
        )?;
        for anomaly in &self.anomalies {
            write!(f, "\n  - {anomaly}")?;
        }
        Ok(())
    }
}

/// Checks `history` with the default [`CheckOptions`].
pub fn check(history: &History) -> CheckReport {
    check_with(history, &CheckOptions::default())
}

/// Checks `history`: every check runs, so the report lists every anomaly, not only the first.
pub fn check_with(history: &History, options: &CheckOptions) -> CheckReport {
    let wellformed = wellformed::check(history);
    let watch = watch::WatchIndex::new(&history.watched);
    let resolution = unknowns::resolve(history, &wellformed.usable, &watch);
    let effects = &resolution.effects;
    let linearizability = linearizable::check(history, effects, options.max_steps_per_key);

    let mut anomalies = wellformed.anomalies;
    anomalies.extend(watch::check_stream(history));
    anomalies.extend(resolution.anomalies);
    anomalies.extend(lost::check(history, effects, &watch));
    anomalies.extend(linearizability.anomalies);
    anomalies.extend(realtime::check(history, effects));
    anomalies.extend(client_order::check(history, effects));
    anomalies.extend(reads::check(history, effects, &watch));

    let events = &history.events;
    let resolved = || effects.iter().filter_map(|e| e.resolved_unknown());
    CheckReport {
        operations_checked: events.len(),
        acknowledged_writes: events
            .iter()
            .filter(|e| e.op.writes() && e.outcome.acknowledged())
            .count(),
        unknown_writes_applied: resolved().filter(|&applied| applied).count(),
        unknown_writes_not_applied: resolved().filter(|&applied| !applied).count(),
        keys_checked: events
            .iter()
            .map(|e| e.op.key())
            .collect::<HashSet<_>>()
            .len(),
        lost_acknowledged_writes: anomalies.iter().filter(|a| a.is_lost_write()).count(),
        search_steps: linearizability.steps,
        anomalies,
    }
}
