//! One line of a client history file (JSON lines, `docs/reference/history-format.md`): what a
//! client asked etcd, when, and what came back, or one change a watch delivered. The fault
//! suite and `quorate canary --history` write these, and both checkers (quorate's own and the
//! porcupine-based `tools/history-check`) read them, so a history is checkable by a program
//! that shares no code with the one that recorded it.

use serde::{Deserialize, Serialize};

/// The operation a client line records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryOp {
    /// `get key`.
    #[default]
    Get,
    /// `put key value`.
    Put,
    /// `del key`.
    Delete,
    /// `txn: if mod_revision(key) == expected_mod_revision then put key value else get key`.
    CompareAndSwap,
}

/// Whether etcd answered the operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryOutcome {
    /// etcd answered; the response fields are set.
    #[default]
    Ok,
    /// No answer: a write may or may not have taken effect, at any time after its call.
    Unknown,
}

/// One line of a history file: a client operation (`type: "op"`), a watched change
/// (`type: "watch"`) or a lease operation (`type: "lease"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryLine {
    /// One client operation on one key.
    Op(OpLine),
    /// One change a watch over the workload's keys delivered, in delivery order.
    Watch(WatchLine),
    /// One operation of the lease client, on keys outside the linearizability check (a
    /// lease's expiry deletes them at a time no client chooses).
    Lease(LeaseLine),
}

/// What a lease line records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseOp {
    /// `lease grant ttl`: `lease` is the ID granted.
    #[default]
    Grant,
    /// `put key value --lease lease`.
    Put,
    /// One keep-alive of `lease`; `ttl` is the TTL the answer gave (-1 or 0: the lease is
    /// gone).
    KeepAlive,
    /// `lease revoke lease`.
    Revoke,
    /// A linearizable `get key` of the lease's key: `found` says whether it exists.
    Check,
}

/// A lease operation: the request, its call and return times, and etcd's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLine {
    /// The client: one sequential stream of operations.
    pub client: u32,
    /// When it was called (nanoseconds since the recorder's start, the clock of the op lines).
    pub call_ns: u64,
    /// When the answer came, or when the client gave up.
    pub return_ns: u64,
    /// What was asked.
    pub op: LeaseOp,
    /// The lease ID.
    pub lease: i64,
    /// The TTL asked for (grant) or answered (keep-alive), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// The lease's key (put, check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The value put.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Whether etcd answered.
    pub outcome: HistoryOutcome,
    /// The error of an unknown outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The response header's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Whether a check found the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
}

/// A client operation: the request, its call and return times, and etcd's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLine {
    /// The client: one sequential stream of operations.
    pub client: u32,
    /// When it was called, in nanoseconds since the recorder's start (one monotonic clock).
    pub call_ns: u64,
    /// When the answer came, or when the client gave up on an unknown outcome.
    pub return_ns: u64,
    /// What was asked.
    pub op: HistoryOp,
    /// The key.
    pub key: String,
    /// The value written (put, compare-and-swap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The compare-and-swap's expected `mod_revision`; 0 means "the key does not exist".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_mod_revision: Option<i64>,
    /// A get served by one member alone (may be stale; not part of the linearizability check).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub serializable: bool,
    /// Whether etcd answered.
    pub outcome: HistoryOutcome,
    /// The error of an unknown outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The response header's revision (for a write that changed the store, the revision it
    /// created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// Whether the compare-and-swap's compare held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,
    /// How many keys a delete removed (0 or 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<i64>,
    /// Whether a get (or a failed compare-and-swap's else branch) found the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
    /// The value found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_value: Option<String>,
    /// The found key's `mod_revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mod_revision: Option<i64>,
    /// The found key's `version` (puts since it was created), when the recorder read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

/// One change a watch delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchLine {
    /// The key.
    pub key: String,
    /// The revision of the change.
    pub mod_revision: i64,
    /// The value put, or absent for a delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A history line that cannot be read: which line and why.
#[derive(Debug, thiserror::Error)]
#[error(
    "history line {line}: {reason} (each line must be one JSON object as docs/reference/history-format.md describes)"
)]
pub struct HistoryLineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl HistoryLine {
    /// The line as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a history line serializes")
    }

    /// Parses a whole history file; blank lines are skipped.
    pub fn parse_all(text: &str) -> Result<Vec<HistoryLine>, HistoryLineError> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| HistoryLineError {
                    line: i + 1,
                    reason: e.to_string(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_bad_lines_are_named() {
        let op = HistoryLine::Op(OpLine {
            client: 2,
            call_ns: 10,
            return_ns: 20,
            op: HistoryOp::CompareAndSwap,
            key: "k".into(),
            value: Some("v".into()),
            expected_mod_revision: Some(0),
            outcome: HistoryOutcome::Ok,
            revision: Some(7),
            succeeded: Some(true),
            ..OpLine::default()
        });
        let watch = HistoryLine::Watch(WatchLine {
            key: "k".into(),
            mod_revision: 7,
            value: None,
        });
        let lease = HistoryLine::Lease(LeaseLine {
            client: 4,
            op: LeaseOp::KeepAlive,
            lease: 0x1234,
            ttl: Some(30),
            ..LeaseLine::default()
        });
        let text = format!(
            "{}\n\n{}\n{}\n",
            op.to_json(),
            watch.to_json(),
            lease.to_json()
        );
        assert!(text.starts_with(r#"{"type":"op","client":2"#), "{text}");
        assert!(
            text.contains(r#"{"type":"lease","client":4"#) && text.contains(r#""op":"keep_alive""#),
            "{text}"
        );
        assert_eq!(
            HistoryLine::parse_all(&text).unwrap(),
            vec![op, watch, lease]
        );
        let err = HistoryLine::parse_all("{\"type\":\"op\"}\nnot json").unwrap_err();
        assert_eq!(err.line, 1, "{err}");
    }
}
