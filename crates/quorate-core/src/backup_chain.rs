//! Whether a backup leader may continue the bucket's chain of snapshots. The chain holds one
//! history: the bucket records whose (the etcd cluster ID) beside the prefix. A leader continues
//! only when etcd's history is the bucket's and etcd is not behind it; otherwise it stops backing
//! up into that prefix and says why, because a chain continued from another history makes every
//! later restore replay one history onto another, and garbage collection would delete the newer
//! history's snapshots.

/// What the bucket records about its chain, beside the prefix.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainRecord {
    /// The etcd cluster whose history the chain holds.
    pub cluster_id: u64,
    /// The bucket's newest revision when this cluster took the chain over (0 for a new chain).
    pub since_revision: i64,
}

/// What the backup leader knows when it starts leading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainEvidence<'a> {
    /// The bucket's chain record, if it has one.
    pub record: Option<&'a ChainRecord>,
    /// The newest revision of any snapshot in the bucket (`None`: the bucket is empty).
    pub bucket_newest: Option<i64>,
    /// etcd's cluster ID.
    pub etcd_cluster_id: u64,
    /// etcd's current revision.
    pub etcd_revision: i64,
    /// A person asked for a new chain in this prefix.
    pub new_chain_requested: bool,
}

/// What the backup leader does with the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainDecision {
    /// Continue the chain.
    Continue,
    /// Record this cluster as the chain's owner (a new or unrecorded chain that etcd's history
    /// covers), then continue.
    Record(ChainRecord),
    /// A person asked for a new chain: move the existing snapshots aside (kept, under another
    /// prefix), record this cluster, and start with a full snapshot.
    StartNew(ChainRecord),
    /// Do not back up into this prefix; the text says why and what overrides it.
    Refuse(String),
}

/// Decides about the chain. See the module docs.
pub fn decide_chain(e: ChainEvidence<'_>) -> ChainDecision {
    let mine = e.etcd_cluster_id;
    let record_mine = |since| {
        ChainDecision::Record(ChainRecord {
            cluster_id: mine,
            since_revision: since,
        })
    };
    let Some(newest) = e.bucket_newest else {
        return match e.record {
            Some(r) if r.cluster_id == mine => ChainDecision::Continue,
            _ => record_mine(0),
        };
    };
    let override_hint = format!(
        "nothing is written to or deleted from the prefix. To back up this cluster, point \
         spec.backup.store.prefix at a new prefix, or annotate the Etcd with {}=<any id> to \
         start a new chain here (the old snapshots are moved aside, not deleted)",
        quorate_api::annotations::NEW_BACKUP_CHAIN
    );
    match e.record {
        Some(r) if r.cluster_id == mine && e.etcd_revision >= newest => ChainDecision::Continue,
        Some(r) if r.cluster_id == mine => ChainDecision::Refuse(format!(
            "etcd is at revision {}, behind the backups of the same cluster ({mine:x}), which \
             reach revision {newest}: its data was rolled back (volumes from an older disk \
             snapshot?) and continuing would mix two histories; {override_hint}",
            e.etcd_revision
        )),
        _ if e.new_chain_requested => ChainDecision::StartNew(ChainRecord {
            cluster_id: mine,
            since_revision: 0,
        }),
        Some(r) => ChainDecision::Refuse(format!(
            "the backups in this prefix hold the history of cluster {:x}, and etcd is cluster \
             {mine:x} (restored to an earlier point, or another cluster writing to the same \
             prefix); {override_hint}",
            r.cluster_id
        )),
        None if e.etcd_revision >= newest => record_mine(newest),
        None => ChainDecision::Refuse(format!(
            "etcd is at revision {}, behind the bucket's newest snapshot (revision {newest}), \
             and the bucket does not record whose history it holds; {override_hint}",
            e.etcd_revision
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(record: Option<&ChainRecord>, newest: Option<i64>, rev: i64) -> ChainEvidence<'_> {
        ChainEvidence {
            record,
            bucket_newest: newest,
            etcd_cluster_id: 0xa,
            etcd_revision: rev,
            new_chain_requested: false,
        }
    }

    const MINE: ChainRecord = ChainRecord {
        cluster_id: 0xa,
        since_revision: 0,
    };
    const OTHER: ChainRecord = ChainRecord {
        cluster_id: 0xb,
        since_revision: 0,
    };

    #[test]
    fn the_same_history_at_or_past_the_bucket_continues() {
        assert_eq!(
            decide_chain(evidence(Some(&MINE), Some(50), 50)),
            ChainDecision::Continue
        );
        assert_eq!(
            decide_chain(evidence(Some(&MINE), Some(50), 80)),
            ChainDecision::Continue
        );
    }

    #[test]
    fn etcd_behind_its_own_backups_is_refused() {
        let d = decide_chain(evidence(Some(&MINE), Some(50), 30));
        assert!(
            matches!(&d, ChainDecision::Refuse(w) if w.contains("behind the backups of the same cluster")),
            "{d:?}"
        );
    }

    #[test]
    fn another_history_is_refused_unless_a_new_chain_is_asked_for() {
        let d = decide_chain(evidence(Some(&OTHER), Some(50), 90));
        assert!(
            matches!(&d, ChainDecision::Refuse(w) if w.contains("history of cluster b") && w.contains("new-backup-chain")),
            "{d:?}"
        );
        let mut e = evidence(Some(&OTHER), Some(50), 10);
        e.new_chain_requested = true;
        assert_eq!(
            decide_chain(e),
            ChainDecision::StartNew(ChainRecord {
                cluster_id: 0xa,
                since_revision: 0
            })
        );
    }

    #[test]
    fn an_unrecorded_bucket_is_taken_over_only_by_a_history_that_covers_it() {
        assert_eq!(
            decide_chain(evidence(None, Some(50), 60)),
            ChainDecision::Record(ChainRecord {
                cluster_id: 0xa,
                since_revision: 50
            })
        );
        assert!(matches!(
            decide_chain(evidence(None, Some(50), 40)),
            ChainDecision::Refuse(_)
        ));
        assert_eq!(
            decide_chain(evidence(None, None, 3)),
            ChainDecision::Record(ChainRecord {
                cluster_id: 0xa,
                since_revision: 0
            })
        );
    }
}
