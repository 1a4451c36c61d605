//! Replays delta snapshot events into an etcd so that its revisions line up one-to-one with
//! the source cluster's.
//!
//! - All events of one source revision go into **one txn**: etcd gives a txn one revision, so
//!   the restored key's `mod_revision`, `create_revision` and `version` equal the source's.
//!   A revision whose events were split across two delta objects is buffered until the next
//!   object shows whether it continues.
//! - Events at or below the current head are skipped: they are already in the full snapshot or
//!   an overlapping delta (etcd-backup-restore issues #844 and #1043).
//! - After every txn the head must equal the source revision; anything else (an unexpected
//!   write, a revoked lease, a diverged base) is an error naming the object and revision, never
//!   a silent skip.
//! - A PUT keeps its lease: a lease missing in the target is granted with the same ID and the
//!   TTL recorded in the delta (or [`DEFAULT_LEASE_TTL`] when the delta does not say).
//! - The replay stops at the target revision or time.
//!
//! The revisions reach the restored data one of two ways ([`ReplayMethod`]): written into a
//! copy of the full snapshot's database file, every event checked against the key space
//! ([`super::direct`], the default and fast), or one txn at a time through a temporary etcd's
//! API with every lease kept alive meanwhile (see [`super::leases`]; the method
//! etcd-backup-restore uses, kept as a fallback and as the benchmark's baseline).

use jiff::Timestamp;

pub use super::apply::ReplayError;
use super::apply::{Applier, Pending};
use super::plan::RestoreTarget;
use crate::delta::{DeltaEvent, EVENT_DELETE, EVENT_PUT};

/// TTL (seconds) for a lease whose granted TTL the delta does not record (deltas written by
/// etcd-backup-restore). One hour: Kubernetes grants event leases for an hour, and shorter-lived
/// holders renew their leases by ID after the restore anyway.
pub const DEFAULT_LEASE_TTL: i64 = 3600;

/// What applying one delta snapshot did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaOutcome {
    /// Events taken from this object (applied, or buffered for its last revision).
    pub events_taken: u64,
    /// Events skipped because their revision was already applied.
    pub events_skipped: u64,
    /// Events left out because they lie beyond the target.
    pub events_beyond_target: u64,
}

/// Totals of a replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Revision the replay started from (the full snapshot's).
    pub start_revision: i64,
    /// The head revision at the end.
    pub head_revision: i64,
    /// Txns applied (source revisions).
    pub revisions_applied: u64,
    /// Events applied.
    pub events_applied: u64,
    /// Events skipped as already applied.
    pub events_skipped: u64,
    /// Leases granted because a PUT needed them.
    pub leases_granted: u64,
}

/// Where the replay stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Never,
    AfterRevision(i64),
    AfterTime(Timestamp),
}

/// How replayed revisions reach etcd.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplayMethod {
    /// Written into a copy of the full snapshot's database file, checked event by event.
    #[default]
    Direct,
    /// One txn per revision through etcd's API, waiting for each.
    Txn,
}

/// Applies delta snapshots, one after another, through an [`Applier`].
pub struct Replayer<A> {
    applier: A,
    head: i64,
    head_object: String,
    stop: Stop,
    done: bool,
    pending: Option<Pending>,
    stats: ReplayStats,
}

impl<A> std::fmt::Debug for Replayer<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("head", &self.head)
            .field("done", &self.done)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<A: Applier> Replayer<A> {
    /// Prepares to replay up to `target` through `applier`, from the revision its data is at.
    /// `base_object` names what the data came from (the full snapshot), for error messages.
    pub fn new(applier: A, base_object: &str, target: RestoreTarget) -> Replayer<A> {
        let head = applier.head();
        let stop = match target {
            RestoreTarget::Latest => Stop::Never,
            RestoreTarget::ToRevision(rev) => Stop::AfterRevision(rev),
            RestoreTarget::ToTime(t) => Stop::AfterTime(t),
        };
        Replayer {
            applier,
            head,
            head_object: base_object.to_string(),
            stop,
            done: matches!(stop, Stop::AfterRevision(rev) if head >= rev),
            pending: None,
            stats: ReplayStats {
                start_revision: head,
                head_revision: head,
                ..ReplayStats::default()
            },
        }
    }

    /// The last applied revision.
    pub fn head(&self) -> i64 {
        self.head
    }

    /// True once an event beyond the target was seen: no further delta is needed.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Totals so far.
    pub fn stats(&self) -> ReplayStats {
        self.stats
    }

    /// Applies the events of delta snapshot `object` (in their order in the object). The last
    /// revision of the object stays buffered until the next object or [`Replayer::finish`].
    pub async fn apply_delta(
        &mut self,
        object: &str,
        events: Vec<DeltaEvent>,
    ) -> Result<DeltaOutcome, ReplayError> {
        let mut outcome = DeltaOutcome::default();
        let mut last_seen = 0;
        for (index, event) in events.into_iter().enumerate() {
            let revision = validate(object, index, &event, last_seen)?;
            last_seen = revision;
            if self.done {
                outcome.events_beyond_target += 1;
                continue;
            }
            if revision <= self.head {
                outcome.events_skipped += 1;
                self.stats.events_skipped += 1;
                continue;
            }
            if let Some(pending) = &mut self.pending {
                if revision == pending.revision {
                    // Same revision again: the rest of a txn split across objects, or the same
                    // events once more from an overlapping object. Keys are unique within a
                    // revision, so a key already held is a duplicate.
                    let key = event_key(&event);
                    if !pending.events.iter().any(|e| event_key(e) == key) {
                        pending.events.push(event);
                        outcome.events_taken += 1;
                    } else {
                        outcome.events_skipped += 1;
                        self.stats.events_skipped += 1;
                    }
                    continue;
                }
                self.flush().await?;
            }
            if matches!(self.stop, Stop::AfterRevision(rev) if revision > rev) {
                // Checked before the gap: missing revisions beyond the target do not matter.
                self.done = true;
                outcome.events_beyond_target += 1;
                continue;
            }
            if revision != self.head + 1 {
                return Err(ReplayError::Gap {
                    previous: self.head_object.clone(),
                    previous_revision: self.head,
                    object: object.to_string(),
                    next: revision,
                    missing_from: self.head + 1,
                    missing_to: revision - 1,
                });
            }
            if self.beyond_target(object, index, &event, revision)? {
                self.done = true;
                outcome.events_beyond_target += 1;
                continue;
            }
            self.pending = Some(Pending {
                revision,
                object: object.to_string(),
                events: vec![event],
            });
            outcome.events_taken += 1;
        }
        if matches!(self.stop, Stop::AfterRevision(rev) if self.pending.as_ref().is_some_and(|p| p.revision >= rev))
        {
            // The target revision is buffered; nothing after it is wanted.
            self.flush().await?;
            self.done = true;
        }
        Ok(outcome)
    }

    /// Applies the buffered last revision; returns the totals and the applier, whose
    /// [`Applier::finish`] turns the replayed data into the member's data directory.
    pub async fn finish(mut self) -> Result<(ReplayStats, A), ReplayError> {
        self.flush().await?;
        Ok((self.stats, self.applier))
    }

    fn beyond_target(
        &self,
        object: &str,
        index: usize,
        event: &DeltaEvent,
        revision: i64,
    ) -> Result<bool, ReplayError> {
        Ok(match self.stop {
            Stop::Never => false,
            Stop::AfterRevision(rev) => revision > rev,
            Stop::AfterTime(t) => {
                let time: Timestamp = event.time.parse().map_err(|e| ReplayError::BadEvent {
                    object: object.to_string(),
                    index,
                    reason: format!(
                        "its time {:?} is not an RFC 3339 timestamp: {e}",
                        event.time
                    ),
                })?;
                time > t
            }
        })
    }

    /// Applies the buffered revision through the applier, which checks it was reproduced.
    async fn flush(&mut self) -> Result<(), ReplayError> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        self.stats.leases_granted += self.applier.apply(&pending).await?;
        self.head = pending.revision;
        self.head_object = pending.object;
        self.stats.head_revision = pending.revision;
        self.stats.revisions_applied += 1;
        self.stats.events_applied += pending.events.len() as u64;
        Ok(())
    }
}

/// Checks an event can be applied; returns its revision.
fn validate(
    object: &str,
    index: usize,
    event: &DeltaEvent,
    previous: i64,
) -> Result<i64, ReplayError> {
    let bad = |reason: String| ReplayError::BadEvent {
        object: object.to_string(),
        index,
        reason,
    };
    if event.etcd_event.kind != EVENT_PUT && event.etcd_event.kind != EVENT_DELETE {
        return Err(bad(format!(
            "unknown event type {} (0 = PUT, 1 = DELETE)",
            event.etcd_event.kind
        )));
    }
    let Some(kv) = &event.etcd_event.kv else {
        return Err(bad("it has no key-value".to_string()));
    };
    if kv.key.is_empty() {
        return Err(bad("its key is empty".to_string()));
    }
    if kv.mod_revision < 1 {
        return Err(bad(format!(
            "its revision {} is not positive",
            kv.mod_revision
        )));
    }
    if kv.mod_revision < previous {
        return Err(bad(format!(
            "its revision {} comes after revision {previous}; events must be in revision order",
            kv.mod_revision
        )));
    }
    Ok(kv.mod_revision)
}

fn event_key(event: &DeltaEvent) -> &[u8] {
    event.etcd_event.kv.as_ref().map_or(&[], |kv| &kv.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{EtcdEvent, KeyValue};

    fn event(kind: i32, key: &[u8], rev: i64) -> DeltaEvent {
        DeltaEvent {
            etcd_event: EtcdEvent {
                kind,
                kv: Some(KeyValue {
                    key: key.to_vec(),
                    mod_revision: rev,
                    ..KeyValue::default()
                }),
                prev_kv: None,
            },
            time: "2026-01-01T00:00:00Z".into(),
            lease_ttl: None,
        }
    }

    #[test]
    fn validation_names_what_is_wrong() {
        assert_eq!(validate("d", 0, &event(EVENT_PUT, b"k", 5), 4).unwrap(), 5);
        let err = |e: DeltaEvent, prev| validate("Incr-1", 3, &e, prev).unwrap_err().to_string();
        assert!(err(event(7, b"k", 5), 0).contains("unknown event type 7"));
        assert!(err(event(EVENT_PUT, b"", 5), 0).contains("key is empty"));
        assert!(err(event(EVENT_PUT, b"k", 0), 0).contains("not positive"));
        let text = err(event(EVENT_DELETE, b"k", 5), 6);
        assert!(text.contains("Incr-1 event #3"), "{text}");
        assert!(text.contains("revision order"), "{text}");
        let mut no_kv = event(EVENT_PUT, b"k", 5);
        no_kv.etcd_event.kv = None;
        assert!(err(no_kv, 0).contains("no key-value"));
    }
}
