//! Real time against revisions, across keys: if acknowledged operation A returned before
//! operation B was called, B's revision is at least A's, and above it if B created its revision
//! (B may be an applied unknown write: it applied after its call). One sweep: B in call order,
//! against the highest revision among the operations that had returned by B's call.
//!
//! Each earlier operation is blamed once (one wrong revision would otherwise be reported
//! against every later operation), and a pair from the same client is left to the per-client
//! check, which then reports a violation in that client's own order.

use std::collections::HashSet;

use super::anomaly::{Anomaly, OpRef};
use super::placement::{Placement, placement};
use super::unknowns::Effect;
use crate::history::History;

/// Checks every placed operation against those that returned before it was called.
pub(crate) fn check(history: &History, effects: &[Effect]) -> Vec<Anomaly> {
    let events = &history.events;
    let placed: Vec<(usize, Placement)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, placement(e, effects[i])?)))
        .collect();
    let mut returned: Vec<(usize, Placement)> = placed
        .iter()
        .copied()
        .filter(|&(i, _)| effects[i] == Effect::Acknowledged)
        .collect();
    returned.sort_by_key(|&(i, _)| (events[i].return_ns, i));
    let mut called = placed;
    called.sort_by_key(|&(i, _)| (events[i].call_ns, i));

    let mut anomalies = Vec::new();
    let mut blamed = HashSet::new();
    let mut highest: Option<(usize, Placement)> = None;
    let mut next = returned.iter().peekable();
    for (b, later) in called {
        while let Some(&&(a, p)) = next.peek() {
            if events[a].return_ns >= events[b].call_ns {
                break;
            }
            if highest.is_none_or(|(_, h)| p.revision > h.revision) {
                highest = Some((a, p));
            }
            next.next();
        }
        let Some((a, earlier)) = highest else {
            continue;
        };
        let same_client = events[a].client == events[b].client;
        if later.may_follow(earlier)
            || (same_client && effects[b] == Effect::Acknowledged)
            || !blamed.insert(a)
        {
            continue;
        }
        let later = match effects[b] {
            Effect::Applied(revision) => OpRef::applied(history, b, revision),
            _ => OpRef::new(history, b),
        };
        anomalies.push(Anomaly::RealTimeOrder {
            earlier: OpRef::new(history, a),
            later,
        });
    }
    anomalies
}
