//! Which member the backup leader asks for etcd's hash of the key space (`HashKV`) at a
//! snapshot's revision, so a restore to that revision can be verified against it.
//!
//! etcd computes the hash by reading its whole database while holding its commits, so the
//! member that answers stalls its own applies for that long. A follower is asked when one can
//! answer (a voting member with a leader that has applied the revision): in a cluster of three
//! or more the leader and the other follower still make a quorum, and no client write waits.
//! A full snapshot's revision is always hashed; a delta's only while the database is small
//! ([`DELTA_HASH_MAX_DB_BYTES`]), since deltas come every period.

/// Above this database size a delta's revision is not hashed (full snapshots still are):
/// etcd reads about this much for each hash.
pub const DELTA_HASH_MAX_DB_BYTES: i64 = 256 * 1024 * 1024;

/// Why a hash is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashOccasion {
    /// A full snapshot was stored at the revision.
    FullSnapshot,
    /// A delta snapshot ending at the revision was stored.
    Delta,
}

/// One member as its etcd answered `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashCandidate {
    /// The backup leader itself.
    pub is_self: bool,
    /// etcd says it is a learner.
    pub is_learner: bool,
    /// etcd knows a leader.
    pub has_leader: bool,
    /// etcd's revision.
    pub revision: i64,
    /// etcd's database file size.
    pub db_size: i64,
}

/// Whom to ask, or why nobody.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashSource {
    /// Ask the candidate at this index.
    Ask(usize),
    /// Do not hash now; why.
    Skip(String),
}

/// Chooses the member to hash `revision` on, from the members that answered.
pub fn hash_source(
    candidates: &[HashCandidate],
    revision: i64,
    occasion: HashOccasion,
) -> HashSource {
    let able = |c: &HashCandidate| !c.is_learner && c.has_leader && c.revision >= revision;
    let chosen = candidates
        .iter()
        .position(|c| able(c) && !c.is_self)
        .or_else(|| candidates.iter().position(able));
    let Some(index) = chosen else {
        return HashSource::Skip(format!(
            "no voting member with a leader has applied revision {revision} yet"
        ));
    };
    let db_size = candidates[index].db_size;
    if occasion == HashOccasion::Delta && db_size > DELTA_HASH_MAX_DB_BYTES {
        return HashSource::Skip(format!(
            "the database is {db_size} bytes, over {DELTA_HASH_MAX_DB_BYTES}: only full \
             snapshots are hashed"
        ));
    }
    HashSource::Ask(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(is_self: bool, revision: i64) -> HashCandidate {
        HashCandidate {
            is_self,
            is_learner: false,
            has_leader: true,
            revision,
            db_size: 1 << 20,
        }
    }

    #[test]
    fn a_follower_that_applied_the_revision_is_asked_before_the_leader() {
        let members = [member(true, 100), member(false, 99), member(false, 100)];
        assert_eq!(
            hash_source(&members, 100, HashOccasion::Delta),
            HashSource::Ask(2)
        );
    }

    #[test]
    fn learners_and_members_without_a_leader_are_not_asked() {
        let mut learner = member(false, 100);
        learner.is_learner = true;
        let mut lost = member(false, 100);
        lost.has_leader = false;
        let members = [member(true, 100), learner, lost];
        assert_eq!(
            hash_source(&members, 100, HashOccasion::Delta),
            HashSource::Ask(0)
        );
    }

    #[test]
    fn nobody_at_the_revision_skips() {
        let members = [member(true, 99)];
        assert!(matches!(
            hash_source(&members, 100, HashOccasion::FullSnapshot),
            HashSource::Skip(_)
        ));
    }

    #[test]
    fn a_large_database_is_hashed_at_full_snapshots_only() {
        let mut big = member(true, 100);
        big.db_size = DELTA_HASH_MAX_DB_BYTES + 1;
        let members = [big];
        assert!(matches!(
            hash_source(&members, 100, HashOccasion::Delta),
            HashSource::Skip(why) if why.contains("only full snapshots")
        ));
        assert_eq!(
            hash_source(&members, 100, HashOccasion::FullSnapshot),
            HashSource::Ask(0)
        );
    }
}
