//! Hand-written histories, each exercising one check end to end through [`check`].

use super::*;
use crate::history::{Event, Op, Outcome, Versioned, WatchChange};

fn event(client: u32, call_ns: u64, return_ns: u64, op: Op, outcome: Outcome) -> Event {
    Event {
        client,
        op,
        call_ns,
        return_ns,
        outcome,
    }
}

fn version(value: &str, mod_revision: i64) -> Option<Versioned> {
    Some(Versioned {
        value: value.into(),
        mod_revision,
    })
}

fn put(client: u32, call: u64, ret: u64, key: &str, value: &str, revision: i64) -> Event {
    event(
        client,
        call,
        ret,
        Op::Put {
            key: key.into(),
            value: value.into(),
        },
        Outcome::Put { revision },
    )
}

fn unknown(client: u32, call: u64, ret: u64, op: Op) -> Event {
    event(
        client,
        call,
        ret,
        op,
        Outcome::Unknown {
            error: "deadline exceeded".into(),
        },
    )
}

fn put_op(key: &str, value: &str) -> Op {
    Op::Put {
        key: key.into(),
        value: value.into(),
    }
}

fn del(client: u32, call: u64, ret: u64, key: &str, revision: i64, deleted: i64) -> Event {
    event(
        client,
        call,
        ret,
        Op::Delete { key: key.into() },
        Outcome::Delete { revision, deleted },
    )
}

fn get_with(
    serializable: bool,
    (client, call, ret): (u32, u64, u64),
    key: &str,
    revision: i64,
    found: Option<Versioned>,
) -> Event {
    event(
        client,
        call,
        ret,
        Op::Get {
            key: key.into(),
            serializable,
        },
        Outcome::Get { revision, found },
    )
}

fn get(
    client: u32,
    call: u64,
    ret: u64,
    key: &str,
    revision: i64,
    found: Option<Versioned>,
) -> Event {
    get_with(false, (client, call, ret), key, revision, found)
}

#[allow(clippy::too_many_arguments)]
fn cas(
    client: u32,
    call: u64,
    ret: u64,
    key: &str,
    expected: i64,
    value: &str,
    revision: i64,
    current: Option<Option<Versioned>>,
) -> Event {
    event(
        client,
        call,
        ret,
        Op::CompareAndPut {
            key: key.into(),
            expected_mod_revision: expected,
            value: value.into(),
        },
        Outcome::CompareAndPut {
            revision,
            succeeded: current.is_none(),
            current: current.flatten(),
        },
    )
}

fn change(key: &str, mod_revision: i64, value: Option<&str>) -> WatchChange {
    WatchChange {
        key: key.into(),
        mod_revision,
        value: value.map(Into::into),
    }
}

fn history(events: Vec<Event>, watched: Vec<WatchChange>) -> History {
    History {
        events,
        watched,
        leases: Vec::new(),
    }
}

fn assert_passes(history: &History) -> CheckReport {
    let report = check(history);
    assert!(report.passed(), "{report}");
    report
}

fn assert_only(history: &History, matches: impl Fn(&Anomaly) -> bool) -> Anomaly {
    let report = check(history);
    assert_eq!(report.anomalies.len(), 1, "{report}");
    assert!(matches(&report.anomalies[0]), "{report}");
    report.anomalies[0].clone()
}

#[test]
fn a_linearizable_concurrent_history_passes() {
    let h = history(
        vec![
            // Two concurrent puts of a; the reads overlapping them see either order's states.
            put(1, 0, 100, "a", "a1", 2),
            put(2, 10, 90, "a", "a2", 3),
            get(3, 20, 30, "a", 2, version("a1", 2)),
            get(4, 25, 95, "a", 3, version("a2", 3)),
            // Compare-and-put on b: create, replace, a failed compare that reads the key.
            cas(1, 110, 150, "b", 0, "b1", 4, None),
            cas(2, 120, 200, "b", 4, "b2", 5, None),
            cas(3, 130, 210, "b", 0, "b3", 5, Some(version("b2", 5))),
            // Deletes: one that deletes, one that finds nothing, and a read of the absence.
            del(4, 220, 300, "a", 6, 1),
            del(1, 230, 310, "a", 6, 0),
            get(2, 305, 320, "a", 7, None),
            // Concurrent with all of it: a write that created a revision and a later read.
            put(3, 250, 260, "c", "c1", 7),
            get(4, 305, 330, "c", 7, version("c1", 7)),
            get(3, 270, 280, "a", 7, None),
        ],
        vec![
            change("a", 2, Some("a1")),
            change("a", 3, Some("a2")),
            change("b", 4, Some("b1")),
            change("b", 5, Some("b2")),
            change("a", 6, None),
            change("c", 7, Some("c1")),
        ],
    );
    let report = assert_passes(&h);
    assert_eq!(report.operations_checked, 13);
    assert_eq!(report.acknowledged_writes, 8);
    assert_eq!(report.keys_checked, 3);
    assert_eq!(report.lost_acknowledged_writes, 0);
}

#[test]
fn a_stale_linearizable_read_fails_with_a_minimal_history() {
    let mut events = vec![put(1, 0, 10, "k", "x", 2)];
    // Reads of x that are fine, and traffic on another key.
    for i in 0..10 {
        let t = 20 + 10 * i;
        events.push(get(2, t, t + 5, "k", 2, version("x", 2)));
    }
    events.push(put(3, 5, 15, "other", "o", 3));
    events.push(put(1, 200, 210, "k", "y", 4));
    // Returned from a member that missed y, although y had been acknowledged before the call.
    events.push(get(2, 220, 230, "k", 3, version("x", 2)));
    let h = history(
        events,
        vec![
            change("k", 2, Some("x")),
            change("other", 3, Some("o")),
            change("k", 4, Some("y")),
        ],
    );
    let report = check(&h);
    let Some(Anomaly::NotLinearizable {
        key,
        operations,
        minimal,
    }) = report
        .anomalies
        .iter()
        .find(|a| matches!(a, Anomaly::NotLinearizable { .. }))
    else {
        panic!("no linearizability anomaly: {report}");
    };
    assert_eq!(key, "k");
    assert_eq!(*operations, 13);
    let indices: Vec<_> = minimal.iter().map(|op| op.index).collect();
    assert_eq!(indices, vec![0, 12, 13], "{report}");
    let text = report.anomalies[0].to_string();
    assert!(
        text.contains("client 2 [220..230 ns] get k -> \"x\" (mod_revision 2) at revision 3"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 4, "{text}");
    // Real time says the same across the board: y (revision 4) returned before the read.
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| matches!(a, Anomaly::RealTimeOrder { earlier, later } if earlier.index == 12 && later.index == 13)),
        "{report}"
    );
}

#[test]
fn a_lost_acknowledged_write_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "k", "x", 2), put(2, 20, 30, "k", "y", 3)],
        vec![change("k", 2, Some("x"))],
    );
    let anomaly = assert_only(
        &h,
        |a| matches!(a, Anomaly::LostWrite { revision: 3, watched_instead: None, value_watched_at: None, write } if write.index == 1),
    );
    assert_eq!(
        anomaly.to_string(),
        "lost write: client 2 [20..30 ns] put k = \"y\" -> ok at revision 3 was acknowledged, \
         but the watch has nothing at revision 3"
    );
    assert_eq!(check(&h).lost_acknowledged_writes, 1);
}

#[test]
fn a_lost_acknowledged_delete_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "k", "x", 2), del(2, 20, 30, "k", 3, 1)],
        vec![change("k", 2, Some("x")), change("j", 3, None)],
    );
    let report = check(&h);
    assert!(
        report.anomalies.iter().any(|a| a.is_lost_write()),
        "{report}"
    );
    assert!(
        report
            .anomalies
            .iter()
            .any(|a| matches!(a, Anomaly::PhantomDelete { revision: 3, .. })),
        "{report}"
    );
}

#[test]
fn a_phantom_write_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "k", "x", 2)],
        vec![change("k", 2, Some("x")), change("k", 3, Some("z"))],
    );
    let anomaly = assert_only(
        &h,
        |a| matches!(a, Anomaly::PhantomWrite { key, revision: 3, value } if key == "k" && value == "z"),
    );
    assert!(anomaly.to_string().contains("k = \"z\" at revision 3"));
}

#[test]
fn a_duplicate_watch_revision_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "k", "x", 2)],
        vec![change("k", 2, Some("x")), change("k", 2, Some("x"))],
    );
    assert_only(&h, |a| {
        matches!(a, Anomaly::DuplicateWatchRevision { revision: 2, .. })
    });
}

#[test]
fn a_value_applied_twice_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "k", "x", 2)],
        vec![change("k", 2, Some("x")), change("k", 3, Some("x"))],
    );
    assert_only(&h, |a| {
        matches!(
            a,
            Anomaly::DuplicateWrite {
                first_revision: 2,
                second_revision: 3,
                ..
            }
        )
    });
}

#[test]
fn a_revision_going_backward_in_real_time_is_reported() {
    let h = history(
        vec![put(1, 0, 10, "a", "x", 5), put(2, 20, 30, "b", "y", 4)],
        vec![change("b", 4, Some("y")), change("a", 5, Some("x"))],
    );
    let anomaly = assert_only(
        &h,
        |a| matches!(a, Anomaly::RealTimeOrder { earlier, later } if earlier.index == 0 && later.index == 1),
    );
    assert!(
        anomaly
            .to_string()
            .ends_with("but revision 4 is not above revision 5"),
        "{anomaly}"
    );
}

#[test]
fn a_client_going_back_in_revisions_is_reported() {
    let h = history(
        vec![
            put(1, 0, 10, "a", "x", 2),
            put(2, 0, 50, "b", "y", 3),
            get(3, 20, 30, "b", 3, version("y", 3)),
            get(3, 30, 40, "a", 2, version("x", 2)),
        ],
        vec![change("a", 2, Some("x")), change("b", 3, Some("y"))],
    );
    // Nothing returned before the second read's call that it contradicts, but its own client
    // had already seen revision 3.
    assert_only(
        &h,
        |a| matches!(a, Anomaly::ClientOrder { client: 3, earlier, later } if earlier.index == 2 && later.index == 3),
    );
}

#[test]
fn unknown_writes_applied_and_not_applied_pass() {
    let h = history(
        vec![
            put(4, 0, 5, "b", "w", 2),
            // Gave up at 20; the watch shows it applied at revision 3, after the first read.
            unknown(1, 0, 20, put_op("a", "x")),
            get(2, 10, 15, "a", 2, None),
            get(2, 30, 40, "a", 3, version("x", 3)),
            // Never applied.
            unknown(3, 0, 20, put_op("a", "never")),
            // Applied compare-and-put, and a delete that applied.
            unknown(
                3,
                45,
                50,
                Op::CompareAndPut {
                    key: "a".into(),
                    expected_mod_revision: 3,
                    value: "z".into(),
                },
            ),
            unknown(1, 45, 50, Op::Delete { key: "a".into() }),
            get(2, 100, 110, "a", 5, None),
            // A delete that left no trace.
            unknown(4, 120, 130, Op::Delete { key: "b".into() }),
            // An unknown read: nothing to check.
            unknown(
                4,
                140,
                150,
                Op::Get {
                    key: "b".into(),
                    serializable: false,
                },
            ),
        ],
        vec![
            change("b", 2, Some("w")),
            change("a", 3, Some("x")),
            change("a", 4, Some("z")),
            change("a", 5, None),
        ],
    );
    let report = assert_passes(&h);
    assert_eq!(report.unknown_writes_applied, 3);
    assert_eq!(report.unknown_writes_not_applied, 2);
    assert_eq!(report.acknowledged_writes, 1);
}

#[test]
fn an_unknown_write_applied_before_its_call_fails() {
    let h = history(
        vec![
            put(1, 0, 10, "a", "x", 2),
            get(2, 20, 30, "a", 3, version("x", 2)),
            // The watch puts it at revision 2.5-ish: before a read that returned before its call.
            unknown(3, 40, 50, put_op("b", "y")),
        ],
        vec![change("a", 2, Some("x")), change("b", 3, Some("y"))],
    );
    assert_only(
        &h,
        |a| matches!(a, Anomaly::RealTimeOrder { earlier, later } if earlier.index == 1 && later.applied_revision == Some(3)),
    );
}

#[test]
fn a_compare_and_put_that_succeeded_when_it_should_not_fails() {
    let h = history(
        vec![
            put(1, 0, 10, "k", "x", 2),
            put(1, 20, 30, "k", "y", 3),
            // Compared against x's revision although y had replaced it.
            cas(2, 40, 50, "k", 2, "z", 4, None),
        ],
        vec![
            change("k", 2, Some("x")),
            change("k", 3, Some("y")),
            change("k", 4, Some("z")),
        ],
    );
    let anomaly = assert_only(
        &h,
        |a| matches!(a, Anomaly::NotLinearizable { key, minimal, .. } if key == "k" && minimal.len() == 3),
    );
    assert!(
        anomaly
            .to_string()
            .contains("compare-and-put k: if mod_revision == 2 then put \"z\" -> succeeded"),
        "{anomaly}"
    );
}

#[test]
fn a_failed_compare_and_put_that_applied_is_reported() {
    let h = history(
        vec![
            put(1, 0, 10, "k", "x", 2),
            cas(2, 20, 30, "k", 0, "z", 2, Some(version("x", 2))),
        ],
        vec![change("k", 2, Some("x")), change("k", 3, Some("z"))],
    );
    assert_only(
        &h,
        |a| matches!(a, Anomaly::FailedWriteApplied { revision: 3, write } if write.index == 1),
    );
}

#[test]
fn a_stale_serializable_read_passes_but_a_wrong_one_fails() {
    let writes = || vec![put(1, 0, 10, "k", "x", 2), put(1, 20, 30, "k", "y", 3)];
    let watched = || vec![change("k", 2, Some("x")), change("k", 3, Some("y"))];
    let mut stale = writes();
    stale.push(get_with(true, (2, 40, 50), "k", 2, version("x", 2)));
    assert_passes(&history(stale, watched()));

    let mut wrong = writes();
    wrong.push(get_with(true, (2, 40, 50), "k", 2, version("y", 3)));
    let anomaly = assert_only(
        &history(wrong, watched()),
        |a| matches!(a, Anomaly::ReadMismatch { revision: 2, key, .. } if key == "k"),
    );
    assert!(
        anomaly.to_string().ends_with(
            "saw k \"y\" (mod_revision 3) at revision 2, but the watch has k \"x\" \
             (mod_revision 2) at that revision"
        ),
        "{anomaly}"
    );
}

#[test]
fn a_search_that_hits_its_bound_is_reported_not_passed() {
    let mut events = Vec::new();
    let mut watched = Vec::new();
    for i in 0..30 {
        let value = format!("v{i}");
        events.push(put(i, 0, 1000, "k", &value, i64::from(i) + 2));
        watched.push(change("k", i64::from(i) + 2, Some(&value)));
    }
    let h = history(events, watched);
    let report = check_with(
        &h,
        &CheckOptions {
            max_steps_per_key: 10,
        },
    );
    assert!(
        matches!(report.anomalies[..], [Anomaly::CheckIncomplete { ref key, operations: 30, steps: 10 }] if key == "k"),
        "{report}"
    );
    assert_passes(&h);
}

#[test]
fn malformed_events_are_reported_and_left_out() {
    let h = history(
        vec![
            put(1, 0, 10, "k", "x", 2),
            event(
                2,
                20,
                10,
                Op::Get {
                    key: "k".into(),
                    serializable: false,
                },
                Outcome::Put { revision: 2 },
            ),
        ],
        vec![change("k", 2, Some("x"))],
    );
    assert_only(
        &h,
        |a| matches!(a, Anomaly::MalformedEvent { event, .. } if event.index == 1),
    );
}
