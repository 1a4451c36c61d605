//! The seeded anomaly histories in `tools/history-check/testdata` (the same files the Go
//! checker's tests read): quorate's own checker passes the good one and rejects each anomaly,
//! and a history survives the round trip through its file format. The second checker
//! (tools/history-check, required under CI) gives the same verdicts through
//! `second_checker::run`, as a run calls it.

use std::path::PathBuf;

use quorate_chaos::checker::{Anomaly, CheckReport, check};
use quorate_chaos::history::History;
use quorate_chaos::second_checker::{self, SecondVerdictKind};

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/history-check/testdata")
        .join(name)
}

fn fixture(name: &str) -> History {
    let path = fixture_path(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    History::from_jsonl(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rejected(name: &str) -> CheckReport {
    let report = check(&fixture(name));
    assert!(!report.passed(), "{name} passed: {report}");
    report
}

#[test]
fn the_good_history_passes_and_round_trips() {
    let history = fixture("good.jsonl");
    let report = check(&history);
    assert!(report.passed(), "{report}");
    assert_eq!(report.operations_checked, 11);
    assert_eq!(
        (
            report.unknown_writes_applied,
            report.unknown_writes_not_applied
        ),
        (1, 1)
    );
    assert_eq!(History::from_jsonl(&history.to_jsonl()).unwrap(), history);
}

#[test]
fn a_lost_acknowledged_write_is_rejected() {
    let report = rejected("lost-write.jsonl");
    assert_eq!(report.lost_acknowledged_writes, 1, "{report}");
}

#[test]
fn a_stale_read_is_rejected() {
    let report = rejected("stale-read.jsonl");
    assert_eq!(report.lost_acknowledged_writes, 0, "{report}");
}

#[test]
fn a_revision_that_goes_back_is_rejected() {
    let report = rejected("revision-back.jsonl");
    assert!(
        !report.anomalies.iter().any(Anomaly::is_lost_write),
        "{report}"
    );
}

#[test]
fn an_incomplete_line_is_named() {
    let err = History::from_jsonl(
        "{\"type\":\"op\",\"client\":0,\"call_ns\":0,\"return_ns\":1,\"op\":\"put\",\"key\":\"k\",\"outcome\":\"ok\",\"revision\":2}\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
}

#[test]
fn both_checkers_agree_on_every_fixture() {
    let Some(binary) = second_checker::default_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "~/.cache/quorate/bin/history-check is missing (scripts/build-history-check.sh)"
        );
        eprintln!("history-check not installed: scripts/build-history-check.sh");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "good.jsonl",
        "lost-write.jsonl",
        "stale-read.jsonl",
        "revision-back.jsonl",
    ] {
        // Written from the parsed history, as a run writes it.
        let path = dir.path().join(name);
        std::fs::write(&path, fixture(name).to_jsonl()).unwrap();
        let second = second_checker::run(&binary, &path);
        let own = check(&fixture(name)).passed();
        let want = if name == "good.jsonl" {
            SecondVerdictKind::Linearizable
        } else {
            SecondVerdictKind::NotLinearizable
        };
        assert_eq!(second.kind, want, "{name}: {}", second.line);
        assert!(second.agrees_with(own), "{name}: {}", second.line);
        if name == "lost-write.jsonl" {
            let html = second.html.expect("a visualisation of the failing history");
            assert!(std::fs::read_to_string(html).unwrap().contains("<html"));
        }
    }
}
