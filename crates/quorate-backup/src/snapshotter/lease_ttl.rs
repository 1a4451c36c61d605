//! The granted TTL of the leases captured keys carry, looked up once per lease.
//!
//! A restore re-grants each lease with its ID and this TTL, so leased keys (Kubernetes events,
//! leader-election records) expire again after a restore instead of living forever. A lease
//! that is gone by the time it is looked up (expired or revoked, e.g. while catching up on old
//! history) is recorded as unknown (`None`); its keys' DELETE events follow in the history.

use std::collections::HashMap;
use std::future::Future;

/// Granted TTLs by lease ID, bounded: when full it starts over, so a capture running for
/// months with short-lived leases does not grow without limit.
#[derive(Debug)]
pub(crate) struct LeaseTtlCache {
    ttls: HashMap<i64, Option<i64>>,
    capacity: usize,
}

impl LeaseTtlCache {
    pub(crate) fn new(capacity: usize) -> LeaseTtlCache {
        LeaseTtlCache {
            ttls: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// The granted TTL of lease `id`, asking `lookup` only when it is not cached.
    pub(crate) async fn get<E, F>(
        &mut self,
        id: i64,
        lookup: impl FnOnce() -> F,
    ) -> Result<Option<i64>, E>
    where
        F: Future<Output = Result<Option<i64>, E>>,
    {
        if let Some(ttl) = self.ttls.get(&id) {
            return Ok(*ttl);
        }
        let ttl = lookup().await?;
        if self.ttls.len() >= self.capacity {
            self.ttls.clear();
        }
        self.ttls.insert(id, ttl);
        Ok(ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test]
    async fn looks_up_each_lease_once_including_gone_ones() {
        let mut cache = LeaseTtlCache::new(10);
        let calls = Cell::new(0);
        let lookup = |ttl: Option<i64>| {
            calls.set(calls.get() + 1);
            async move { Ok::<_, ()>(ttl) }
        };
        assert_eq!(cache.get(1, || lookup(Some(30))).await, Ok(Some(30)));
        assert_eq!(cache.get(1, || lookup(Some(99))).await, Ok(Some(30)));
        assert_eq!(cache.get(2, || lookup(None)).await, Ok(None));
        assert_eq!(cache.get(2, || lookup(Some(5))).await, Ok(None));
        assert_eq!(calls.get(), 2);
    }

    #[tokio::test]
    async fn failures_are_not_cached_and_the_cache_stays_bounded() {
        let mut cache = LeaseTtlCache::new(2);
        assert_eq!(
            cache
                .get(1, || async { Err::<Option<i64>, _>("down") })
                .await,
            Err("down")
        );
        assert_eq!(
            cache.get(1, || async { Ok::<_, ()>(Some(7)) }).await,
            Ok(Some(7))
        );
        cache
            .get(2, || async { Ok::<_, ()>(Some(8)) })
            .await
            .unwrap();
        cache
            .get(3, || async { Ok::<_, ()>(Some(9)) })
            .await
            .unwrap();
        assert!(cache.ttls.len() <= 2);
        // Lease 1 was dropped with the rest and is asked again.
        assert_eq!(
            cache.get(1, || async { Ok::<_, ()>(Some(70)) }).await,
            Ok(Some(70))
        );
    }
}
