//! Which operator replica owns which `Etcd` when the operator is sharded (`--shard I/M`): each
//! of M replicas reconciles only the `Etcd`s whose `namespace/name` hashes to its index, so a
//! landscape too large for one process is split without two replicas ever writing the same
//! cluster. The hash is SHA-256 (stable across builds, platforms and Rust versions: replicas of
//! different releases during an upgrade agree on the split).

use sha2::{Digest, Sha256};

/// One replica's share: index `index` of `count` (`0 <= index < count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// A `--shard` value that is not `I/M` with `0 <= I < M`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid shard {text:?}: {why}; write INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/2 and 1/2 \
     for two replicas"
)]
pub struct ShardParseError {
    /// What was given.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Shard {
    /// The whole landscape in one share (no sharding).
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Share `index` of `count`; `None` unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<Shard> {
        (index < count).then_some(Shard { index, count })
    }

    /// Parses `I/M`.
    pub fn parse(text: &str) -> Result<Shard, ShardParseError> {
        let error = |why| ShardParseError {
            text: text.to_string(),
            why,
        };
        let (index, count) = text.trim().split_once('/').ok_or(error("no '/'"))?;
        let index: u32 = index
            .trim()
            .parse()
            .map_err(|_| error("INDEX is not a number"))?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| error("COUNT is not a number"))?;
        if count == 0 {
            return Err(error("COUNT must be at least 1"));
        }
        Shard::new(index, count).ok_or(error("INDEX must be less than COUNT"))
    }

    /// This share's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many shares there are.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether the landscape is split at all.
    pub fn is_sharded(&self) -> bool {
        self.count > 1
    }

    /// Whether this share owns the `Etcd` `namespace/name`.
    pub fn owns(&self, namespace: &str, name: &str) -> bool {
        shard_of(namespace, name, self.count) == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The share (of `count`) that owns the `Etcd` `namespace/name`.
pub fn shard_of(namespace: &str, name: &str, count: u32) -> u32 {
    if count <= 1 {
        return 0;
    }
    let mut hasher = Sha256::new();
    hasher.update(namespace.as_bytes());
    hasher.update(b"/");
    hasher.update(name.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(count)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_index_of_count() {
        assert_eq!(Shard::parse("1/2"), Ok(Shard { index: 1, count: 2 }));
        assert_eq!(Shard::parse(" 0 / 1 "), Ok(Shard::ALL));
        for bad in ["2/2", "1", "a/2", "0/0", "-1/2", "1/b", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad} should be refused");
        }
        assert_eq!(Shard::parse("3/4").unwrap().to_string(), "3/4");
    }

    #[test]
    fn every_etcd_has_exactly_one_owner_and_the_shares_are_even() {
        let shards: Vec<Shard> = (0..3).map(|i| Shard::new(i, 3).unwrap()).collect();
        let mut per_share = [0u32; 3];
        for n in 0..3000 {
            let (ns, name) = (format!("ns-{}", n % 10), format!("etcd-{n}"));
            let owners: Vec<_> = shards.iter().filter(|s| s.owns(&ns, &name)).collect();
            assert_eq!(owners.len(), 1, "{ns}/{name} owned by {owners:?}");
            per_share[owners[0].index() as usize] += 1;
        }
        for count in per_share {
            assert!((900..=1100).contains(&count), "uneven split {per_share:?}");
        }
    }

    #[test]
    fn the_split_is_pinned_so_replicas_of_different_builds_agree() {
        let split: Vec<u32> = (0..8)
            .map(|i| shard_of("garden", &format!("etcd-{i}"), 4))
            .collect();
        assert_eq!(split, [2, 1, 3, 1, 1, 1, 1, 0]);
        // `namespace/name`, so `a/bc` and `ab/c` are different clusters.
        assert_ne!(
            (0..16)
                .map(|i| shard_of("a", &format!("b{i}"), 8))
                .collect::<Vec<_>>(),
            (0..16)
                .map(|i| shard_of("ab", &format!("{i}"), 8))
                .collect::<Vec<_>>()
        );
        assert_eq!(shard_of("a", "anything", 1), 0);
        assert!(Shard::ALL.owns("x", "y"));
        assert!(!Shard::ALL.is_sharded());
    }
}
