//! What etcd last reported about this member's data (cluster ID, member ID, revision) and the
//! record of a recovery this member carried out, kept in files beside the data directory, so
//! they can be published before etcd runs again (after an agent restart, or while the member
//! waits for quorum).

use quorate_core::membership::data_state::DataState;
use quorate_core::membership::recovery::RecoveryRecord;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DataFacts {
    cluster_id: Option<u64>,
    member_id: Option<u64>,
    revision: Option<i64>,
}

fn facts_path(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("quorate-data-facts.json")
}

fn superseded_path(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("quorate-restored-over.json")
}

/// Records the recovery records that existed when the data was restored from the bucket.
pub fn store_superseded(data_dir: &Path, records: &[RecoveryRecord]) -> std::io::Result<()> {
    std::fs::write(
        superseded_path(data_dir),
        serde_json::to_string(records).expect("recovery records serialize"),
    )
}

/// The records [`store_superseded`] kept (none when there are none or they are unreadable).
pub fn load_superseded(data_dir: &Path) -> Vec<RecoveryRecord> {
    std::fs::read_to_string(superseded_path(data_dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn recovery_path(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("quorate-recovery.json")
}

/// The data state of a data directory that holds data, with the facts last recorded for it.
pub fn load(data_dir: &Path) -> DataState {
    let facts: DataFacts = std::fs::read_to_string(facts_path(data_dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    DataState::Present {
        cluster_id: facts.cluster_id,
        member_id: facts.member_id,
        revision: facts.revision,
    }
}

/// Records what etcd reported; best effort (the facts are informative, the decisions that need
/// exact values ask etcd).
pub fn store(data_dir: &Path, cluster_id: u64, member_id: u64, revision: i64) {
    let facts = DataFacts {
        cluster_id: Some(cluster_id),
        member_id: Some(member_id),
        revision: Some(revision),
    };
    let path = facts_path(data_dir);
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string(&facts).expect("facts serialize");
    if std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .is_err()
    {
        tracing::debug!(path = %path.display(), "recording the data facts failed");
    }
}

/// The recovery this member carried out, if it did.
pub fn load_recovery(data_dir: &Path) -> Option<RecoveryRecord> {
    serde_json::from_str(&std::fs::read_to_string(recovery_path(data_dir)).ok()?).ok()
}

/// Keeps the record of a recovery this member carries out; it must survive an agent restart,
/// because members dropped by it rely on it to rejoin instead of staying down.
pub fn store_recovery(data_dir: &Path, record: &RecoveryRecord) -> std::io::Result<()> {
    let path = recovery_path(data_dir);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(
        path,
        serde_json::to_string(record).expect("a recovery record serializes"),
    )
}
