//! Events for defragmentations: each member's newest outcome on its lease
//! (`quorate.io/defragmentation`) becomes one event on the `Etcd` — `Defragmented` with the
//! sizes and the time etcd took, or `DefragmentationFailed` with etcd's error — once per member
//! and round. The member's lease is the event's related object, so the events of one round do
//! not fold into one.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use quorate_api::Etcd;
use quorate_api::names::member_lease_names;
use quorate_core::maintenance::defrag::{DEFRAG_ANNOTATION, DefragOutcome, DefragRecord};

use crate::context::Context;

/// Outcomes older than this when first seen (after an operator restart) are not announced.
const FRESH_SECONDS: i64 = 600;

/// The newest round announced per (`Etcd` uid, lease).
#[derive(Debug, Default)]
pub struct AnnouncedDefrags(Mutex<HashMap<(String, String), u64>>);

impl AnnouncedDefrags {
    /// Whether `round` of `lease` is new (and remembers it).
    fn first_time(&self, uid: &str, lease: &str, round: u64) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let key = (uid.to_string(), lease.to_string());
        if map.get(&key).is_some_and(|&seen| seen >= round) {
            return false;
        }
        map.insert(key, round);
        true
    }
}

/// The event for one member's outcome; `None` for a member a threshold round left alone.
pub fn defrag_event(
    member: &str,
    outcome: &DefragOutcome,
) -> Option<(EventType, &'static str, String)> {
    if outcome.skipped {
        return None;
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    Some(match &outcome.error {
        Some(error) => (
            EventType::Warning,
            "DefragmentationFailed",
            format!(
                "{member}: defragmentation in round {} failed: {error}",
                outcome.round
            ),
        ),
        None => (
            EventType::Normal,
            "Defragmented",
            format!(
                "{member} defragmented in round {}: {:.1} MiB -> {:.1} MiB in {} ms",
                outcome.round,
                mib(outcome.size_before),
                mib(outcome.size_after),
                outcome.millis
            ),
        ),
    })
}

/// Publishes the events for outcomes not announced yet.
pub async fn announce(etcd: &Etcd, ctx: &Context, now: Timestamp) {
    let (Some(uid), Some(namespace)) = (
        etcd.metadata.uid.as_deref(),
        etcd.metadata.namespace.as_deref(),
    ) else {
        return;
    };
    for lease_name in member_lease_names(etcd) {
        let Some(lease) = ctx.caches.lease(namespace, &lease_name) else {
            continue;
        };
        let Some(outcome) = outcome_of(&lease) else {
            continue;
        };
        if now.duration_since(outcome.at).as_secs() > FRESH_SECONDS
            || !ctx
                .announced_defrags
                .first_time(uid, &lease_name, outcome.round)
        {
            continue;
        }
        let Some((type_, reason, note)) = defrag_event(&lease_name, &outcome) else {
            continue;
        };
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: "Defragment".to_string(),
            secondary: Some(lease.object_ref(&())),
        };
        if let Err(e) = ctx.recorder.publish(&event, &etcd.object_ref(&())).await {
            tracing::debug!("could not publish event {reason}: {e}");
        }
    }
}

fn outcome_of(lease: &Lease) -> Option<DefragOutcome> {
    let text = lease
        .metadata
        .annotations
        .as_ref()?
        .get(DEFRAG_ANNOTATION)?;
    serde_json::from_str::<DefragRecord>(text).ok()?.last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(round: u64, error: Option<&str>, skipped: bool) -> DefragOutcome {
        DefragOutcome {
            round,
            at: Timestamp::from_second(1_800_000_000).unwrap(),
            size_before: 120 * 1024 * 1024,
            size_after: 20 * 1024 * 1024,
            millis: 850,
            skipped,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn each_outcome_is_one_event_with_sizes_or_the_error() {
        let (type_, reason, note) = defrag_event("main-1", &outcome(3, None, false)).unwrap();
        assert_eq!((type_, reason), (EventType::Normal, "Defragmented"));
        assert_eq!(
            note,
            "main-1 defragmented in round 3: 120.0 MiB -> 20.0 MiB in 850 ms"
        );
        let (type_, reason, note) = defrag_event(
            "main-2",
            &outcome(3, Some("context deadline exceeded"), false),
        )
        .unwrap();
        assert_eq!(
            (type_, reason),
            (EventType::Warning, "DefragmentationFailed")
        );
        assert!(note.contains("context deadline exceeded"));
        assert_eq!(defrag_event("main-0", &outcome(3, None, true)), None);
    }

    #[test]
    fn a_round_is_announced_once_per_member() {
        let seen = AnnouncedDefrags::default();
        assert!(seen.first_time("u", "main-0", 1));
        assert!(!seen.first_time("u", "main-0", 1));
        assert!(seen.first_time("u", "main-1", 1));
        assert!(seen.first_time("u", "main-0", 2));
    }
}
