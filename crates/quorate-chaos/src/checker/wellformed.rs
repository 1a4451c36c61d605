//! The recorder's own rules, checked first so that the other checks can rely on them: each
//! outcome answers its operation's kind, returns follow calls, a delete deletes 0 or 1 keys,
//! header revisions are positive, each value is written once, and a client runs one operation
//! at a time.

use std::collections::HashMap;

use super::anomaly::{Anomaly, OpRef};
use crate::history::{Event, History, Op, Outcome};

/// Which events the other checks may use, and what was wrong with the rest.
pub(crate) struct WellFormed {
    /// `usable[i]`: `history.events[i]` has a judgeable shape.
    pub(crate) usable: Vec<bool>,
    /// One [`Anomaly::MalformedEvent`] per broken rule.
    pub(crate) anomalies: Vec<Anomaly>,
}

/// Checks every event's shape, the uniqueness of written values and that each client is
/// sequential. Only a client's overlap leaves the event usable (its answer is still judgeable).
pub(crate) fn check(history: &History) -> WellFormed {
    let events = &history.events;
    let mut usable = vec![true; events.len()];
    let mut anomalies = Vec::new();
    let malformed = |i: usize, reason: String, anomalies: &mut Vec<Anomaly>| {
        anomalies.push(Anomaly::MalformedEvent {
            event: OpRef::new(history, i),
            reason,
        });
    };

    let mut writers: HashMap<&str, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(reason) = shape_problem(e) {
            malformed(i, reason, &mut anomalies);
            usable[i] = false;
            continue;
        }
        if let Some(value) = e.op.written_value() {
            if let Some(&first) = writers.get(value) {
                malformed(
                    i,
                    format!("writes {value:?}, which event #{first} writes too; values are unique"),
                    &mut anomalies,
                );
                usable[i] = false;
            } else {
                writers.insert(value, i);
            }
        }
    }

    let mut by_client: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        by_client.entry(e.client).or_default().push(i);
    }
    let mut clients: Vec<_> = by_client.into_iter().collect();
    clients.sort_unstable_by_key(|(c, _)| *c);
    for (_, mut ops) in clients {
        ops.sort_by_key(|&i| (events[i].call_ns, i));
        for pair in ops.windows(2) {
            let (a, b) = (&events[pair[0]], &events[pair[1]]);
            if b.call_ns < a.return_ns {
                malformed(
                    pair[1],
                    format!(
                        "called at {} ns, before the client's previous operation (event #{}) \
                         returned at {} ns; a client runs one operation at a time",
                        b.call_ns, pair[0], a.return_ns
                    ),
                    &mut anomalies,
                );
            }
        }
    }

    WellFormed { usable, anomalies }
}

/// What makes one event unjudgeable, if anything.
fn shape_problem(e: &Event) -> Option<String> {
    if e.return_ns < e.call_ns {
        return Some(format!(
            "returned at {} ns, before its call at {} ns",
            e.return_ns, e.call_ns
        ));
    }
    let answers = matches!(
        (&e.op, &e.outcome),
        (_, Outcome::Unknown { .. })
            | (Op::Put { .. }, Outcome::Put { .. })
            | (Op::Delete { .. }, Outcome::Delete { .. })
            | (Op::Get { .. }, Outcome::Get { .. })
            | (Op::CompareAndPut { .. }, Outcome::CompareAndPut { .. })
    );
    if !answers {
        return Some("the outcome is not an answer to this kind of operation".into());
    }
    if let Some(revision) = e.outcome.revision()
        && revision < 1
    {
        return Some(format!("header revision {revision} is not positive"));
    }
    if let Outcome::Delete { deleted, .. } = e.outcome
        && !(0..=1).contains(&deleted)
    {
        return Some(format!(
            "a single-key delete reports {deleted} keys deleted"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(client: u32, call_ns: u64, return_ns: u64, op: Op, outcome: Outcome) -> Event {
        Event {
            client,
            op,
            call_ns,
            return_ns,
            outcome,
        }
    }

    fn put(value: &str) -> Op {
        Op::Put {
            key: "k".into(),
            value: value.into(),
        }
    }

    #[test]
    fn wrong_kind_reused_value_and_overlap_are_malformed() {
        let history = History {
            leases: Vec::new(),
            events: vec![
                event(1, 0, 10, put("a"), Outcome::Put { revision: 2 }),
                event(2, 0, 10, put("a"), Outcome::Put { revision: 3 }),
                event(
                    3,
                    0,
                    10,
                    put("b"),
                    Outcome::Delete {
                        revision: 4,
                        deleted: 1,
                    },
                ),
                event(1, 5, 20, put("c"), Outcome::Put { revision: 5 }),
            ],
            watched: vec![],
        };
        let checked = check(&history);
        assert_eq!(checked.usable, vec![true, false, false, true]);
        assert_eq!(checked.anomalies.len(), 3, "{:?}", checked.anomalies);
    }
}
