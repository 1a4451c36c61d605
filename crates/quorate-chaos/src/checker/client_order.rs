//! Each client's own order: a client runs one operation at a time, so the revisions of its
//! acknowledged operations (serializable gets aside) never go down, and go up at each write that
//! created a revision. Unknown writes are left out: one may apply after the client moved on.

use std::collections::BTreeMap;

use super::anomaly::{Anomaly, OpRef};
use super::placement::{Placement, placement};
use super::unknowns::Effect;
use crate::history::History;

/// Checks every client's consecutive acknowledged operations.
pub(crate) fn check(history: &History, effects: &[Effect]) -> Vec<Anomaly> {
    let events = &history.events;
    let mut by_client: BTreeMap<u32, Vec<(usize, Placement)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if effects[i] == Effect::Acknowledged
            && let Some(p) = placement(e, effects[i])
        {
            by_client.entry(e.client).or_default().push((i, p));
        }
    }
    let mut anomalies = Vec::new();
    for (client, mut ops) in by_client {
        ops.sort_by_key(|&(i, _)| (events[i].call_ns, i));
        for pair in ops.windows(2) {
            let ((a, earlier), (b, later)) = (pair[0], pair[1]);
            if !later.may_follow(earlier) {
                anomalies.push(Anomaly::ClientOrder {
                    client,
                    earlier: OpRef::new(history, a),
                    later: OpRef::new(history, b),
                });
            }
        }
    }
    anomalies
}
