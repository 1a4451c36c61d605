//! Generated histories: a random sequential execution of a random operation mix over three keys,
//! produced by a model of etcd, spread over clients with overlapping intervals that contain each
//! operation's place in the sequence, some writes turned unknown and some unknown writes that
//! never applied. Every such history must pass; changing one read's answer must make it fail.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;
use crate::history::{Event, Op, Outcome, Versioned, WatchChange};

const CLIENTS: u32 = 6;
/// Time between consecutive operations' places in the sequence.
const SPACING: u64 = 100;
/// How far an interval reaches before or after its place: several spacings, so intervals of
/// different clients overlap.
const REACH: u64 = 450;

/// One generated operation: which key, what kind, a free parameter, how to place it in time and
/// whether its answer is lost.
#[derive(Clone, Debug)]
struct Planned {
    key: usize,
    kind: u8,
    aux: u8,
    client_pick: u8,
    before: u64,
    after: u64,
    unknown: bool,
}

fn planned() -> impl Strategy<Value = Planned> {
    (
        0..3usize,
        0..7u8,
        any::<u8>(),
        any::<u8>(),
        0..REACH,
        0..REACH,
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(key, kind, aux, client_pick, before, after, unknown)| Planned {
                key,
                kind,
                aux,
                client_pick,
                before,
                after,
                unknown,
            },
        )
}

/// Runs the plan against a model of etcd and records it as the clients and the watch would.
fn execute(plan: &[Planned]) -> History {
    let keys = ["/chaos/k0", "/chaos/k1", "/chaos/k2"];
    let mut revision = 1;
    let mut state: [Option<Versioned>; 3] = Default::default();
    // Every state each key had, from the revision it began.
    let mut states: [Vec<(i64, Option<Versioned>)>; 3] = Default::default();
    let mut last_return = [0u64; CLIENTS as usize];
    let mut history = History::default();
    for (i, p) in plan.iter().enumerate() {
        let key = keys[p.key].to_owned();
        let value = format!("v{i}");
        let at = 1_000 + SPACING * i as u64;
        let mut write = |current: &mut Option<Versioned>, value: Option<String>| {
            revision += 1;
            *current = value.clone().map(|value| Versioned {
                value,
                mod_revision: revision,
            });
            states[p.key].push((revision, current.clone()));
            history.watched.push(WatchChange {
                key: key.clone(),
                mod_revision: revision,
                value,
            });
            revision
        };
        let current = &mut state[p.key];
        let (op, outcome) = match p.kind {
            0 | 1 => {
                let revision = write(current, Some(value.clone()));
                (Op::Put { key, value }, Outcome::Put { revision })
            }
            2 => {
                let deleted = i64::from(current.is_some());
                let revision = if deleted == 1 {
                    write(current, None)
                } else {
                    revision
                };
                (Op::Delete { key }, Outcome::Delete { revision, deleted })
            }
            3 => (
                Op::Get {
                    key,
                    serializable: false,
                },
                Outcome::Get {
                    revision,
                    found: current.clone(),
                },
            ),
            4 => {
                // A member behind by up to `aux` revisions.
                let seen = (revision - i64::from(p.aux % 8)).max(1);
                let found = states[p.key]
                    .iter()
                    .rev()
                    .find(|(from, _)| *from <= seen)
                    .and_then(|(_, s)| s.clone());
                (
                    Op::Get {
                        key,
                        serializable: true,
                    },
                    Outcome::Get {
                        revision: seen,
                        found,
                    },
                )
            }
            5 => {
                let actual = current.as_ref().map_or(0, |v| v.mod_revision);
                let expected = if p.aux % 2 == 0 {
                    actual
                } else {
                    actual + 1 + i64::from(p.aux % 3)
                };
                let op = Op::CompareAndPut {
                    key: key.clone(),
                    expected_mod_revision: expected,
                    value: value.clone(),
                };
                let outcome = if expected == actual {
                    Outcome::CompareAndPut {
                        revision: write(current, Some(value)),
                        succeeded: true,
                        current: None,
                    }
                } else {
                    Outcome::CompareAndPut {
                        revision,
                        succeeded: false,
                        current: current.clone(),
                    }
                };
                (op, outcome)
            }
            _ => {
                // An attempt that never reached the store; only ever unknown.
                let op = match p.aux % 3 {
                    0 => Op::Put { key, value },
                    1 => Op::Delete { key },
                    _ => Op::CompareAndPut {
                        key,
                        expected_mod_revision: i64::from(p.aux),
                        value,
                    },
                };
                (
                    op,
                    Outcome::Unknown {
                        error: "lost".into(),
                    },
                )
            }
        };
        let outcome = if p.unknown && op.writes() {
            Outcome::Unknown {
                error: "timeout".into(),
            }
        } else {
            outcome
        };

        // A client that is free at the operation's place, its interval around the place.
        let free: Vec<usize> = (0..CLIENTS as usize)
            .filter(|&c| last_return[c] < at)
            .collect();
        let client = free[usize::from(p.client_pick) % free.len()];
        let call_ns = (at - p.before).max(last_return[client] + 1);
        // An unknown write may be given up on before it applies.
        let return_ns = if outcome.acknowledged() {
            at + p.after
        } else {
            call_ns + p.after
        };
        last_return[client] = return_ns;
        history.events.push(Event {
            client: client as u32,
            op,
            call_ns,
            return_ns,
            outcome,
        });
    }
    history
}

/// Changes the answer of the `pick`-th acknowledged get to one that was never true at its
/// revision (another state of the key if it had one, else absent or a value nobody wrote), and
/// says which it changed.
fn corrupt_a_read(history: &mut History, pick: usize) -> Option<usize> {
    let gets: Vec<usize> = (0..history.events.len())
        .filter(|&i| matches!(history.events[i].outcome, Outcome::Get { .. }))
        .collect();
    if gets.is_empty() {
        return None;
    }
    let i = gets[pick % gets.len()];
    let key = history.events[i].op.key().to_owned();
    let mut versions: HashMap<&str, Vec<Versioned>> = HashMap::new();
    for c in &history.watched {
        if let Some(value) = &c.value {
            versions.entry(&c.key).or_default().push(Versioned {
                value: value.clone(),
                mod_revision: c.mod_revision,
            });
        }
    }
    let others = versions.remove(key.as_str()).unwrap_or_default();
    let Outcome::Get { found, .. } = &mut history.events[i].outcome else {
        unreachable!("picked among gets");
    };
    *found = match found.take() {
        Some(actual) => others.into_iter().find(|v| *v != actual),
        None => Some(others.into_iter().next().unwrap_or(Versioned {
            value: "nobody wrote this".into(),
            mod_revision: 1,
        })),
    };
    Some(i)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn executions_of_the_model_pass(plan in prop::collection::vec(planned(), 1..80)) {
        let history = execute(&plan);
        let report = check(&history);
        prop_assert!(report.passed(), "{}\n{:#?}", report, history);
        prop_assert_eq!(report.lost_acknowledged_writes, 0);
    }

    #[test]
    fn a_changed_read_fails(
        plan in prop::collection::vec(planned(), 1..80),
        pick in any::<usize>(),
    ) {
        let mut history = execute(&plan);
        let Some(i) = corrupt_a_read(&mut history, pick) else {
            return Err(TestCaseError::reject("no read to change"));
        };
        let report = check(&history);
        prop_assert!(!report.passed(), "{:#?}", history);
        // A linearizable read's is found by the search too, and is in its minimal history (a
        // dependency-closed part of a correct execution always linearizes).
        if matches!(history.events[i].op, Op::Get { serializable: false, .. }) {
            let found = report.anomalies.iter().any(|a| matches!(
                a,
                Anomaly::NotLinearizable { minimal, .. } if minimal.iter().any(|op| op.index == i)
            ));
            prop_assert!(found, "{}", report);
        }
    }
}

/// A long history with heavy overlap and thousands of never-returning writes: the search stays
/// linear (etcd's revisions nearly fix the order), and a wrong linearizable read deep inside it
/// is still shrunk to the few operations that show it.
#[test]
fn a_long_history_is_checked_in_linear_steps() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let plan = prop::collection::vec(planned(), 20_000)
        .new_tree(&mut runner)
        .expect("a plan")
        .current();
    let history = execute(&plan);
    let report = check(&history);
    assert!(report.passed(), "{report}");
    assert!(report.unknown_writes_applied > 1_000, "{report}");
    assert!(report.search_steps < 5 * 20_000, "{report}");

    let (corrupted, i) = (5_000..)
        .find_map(|pick| {
            let mut corrupted = history.clone();
            let i = corrupt_a_read(&mut corrupted, pick)?;
            let linearizable = matches!(
                corrupted.events[i].op,
                Op::Get {
                    serializable: false,
                    ..
                }
            );
            linearizable.then_some((corrupted, i))
        })
        .expect("a linearizable read");
    let report = check(&corrupted);
    let minimal = report.anomalies.iter().find_map(|a| match a {
        Anomaly::NotLinearizable { minimal, .. } => Some(minimal),
        _ => None,
    });
    let minimal = minimal.unwrap_or_else(|| panic!("{report}"));
    // The read, the write of the value it returned, and the chain of writes its revision rests
    // on (a delete or compare-and-put keeps the write before it, back to a put).
    assert!(minimal.len() <= 8, "{report}");
    assert!(minimal.iter().any(|op| op.index == i), "{report}");
}
