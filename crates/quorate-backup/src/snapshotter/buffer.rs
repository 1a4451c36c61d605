//! The delta buffer: captured events kept together with their encoding, cut into batches at
//! revision boundaries only. Pure (no I/O, no clock) so its invariants are property-tested.
//!
//! The encoded bytes are built as events arrive (`[` + events joined by `,`), so the size
//! that the memory limit is checked against is exact and a cut costs only the checksum. The
//! result is byte-for-byte what [`crate::delta::encode`] makes of the same events.

use sha2::{Digest, Sha256};

use crate::delta::{CHECKSUM_LEN, DeltaEvent};

/// Why a batch was cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutReason {
    /// The delta period elapsed.
    Period,
    /// The encoded batch reached the memory limit.
    MemoryLimit,
    /// Someone asked for it ([`super::DeltaHandle::request_cut`]).
    Requested,
    /// The capture was stopped; this is its last batch.
    Stop,
    /// The capture failed; this batch holds what was captured before the failure.
    Failure,
}

/// Consecutive events, ready to be stored as one delta snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaBatch {
    /// First revision the batch covers: the previous batch's `last_revision + 1` (or the
    /// capture's start revision). Events may begin later; no revision in between had events.
    pub start_revision: i64,
    /// Revision of the last event.
    pub last_revision: i64,
    /// The events, in revision order; all events of one revision are in the same batch.
    pub events: Vec<DeltaEvent>,
    /// The delta snapshot bytes (JSON array + SHA-256), as [`crate::delta::encode`] makes them.
    pub encoded: Vec<u8>,
    /// Why it was cut.
    pub reason: CutReason,
}

/// What a cut produced, without the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaBatchInfo {
    /// See [`DeltaBatch::start_revision`].
    pub start_revision: i64,
    /// See [`DeltaBatch::last_revision`].
    pub last_revision: i64,
    /// Number of events.
    pub events: usize,
    /// Size of [`DeltaBatch::encoded`].
    pub encoded_len: usize,
}

impl DeltaBatch {
    /// The batch's summary.
    pub fn info(&self) -> DeltaBatchInfo {
        DeltaBatchInfo {
            start_revision: self.start_revision,
            last_revision: self.last_revision,
            events: self.events.len(),
            encoded_len: self.encoded.len(),
        }
    }
}

/// A revision arrived that is already behind the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutOfOrder {
    pub revision: i64,
    pub captured_through: i64,
}

/// Events not yet cut into a batch.
#[derive(Debug)]
pub(crate) struct DeltaBuffer {
    start_revision: i64,
    last_revision: i64,
    events: Vec<DeltaEvent>,
    /// `[` followed by the JSON of the events joined by `,`.
    json: Vec<u8>,
    memory_limit: usize,
}

impl DeltaBuffer {
    /// An empty buffer whose first batch starts at `start_revision`.
    pub(crate) fn new(start_revision: i64, memory_limit: usize) -> DeltaBuffer {
        DeltaBuffer {
            start_revision,
            last_revision: start_revision - 1,
            events: Vec::new(),
            json: vec![b'['],
            memory_limit,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The first revision not captured yet: where a (re)started watch must begin.
    pub(crate) fn next_revision(&self) -> i64 {
        self.last_revision + 1
    }

    /// Size of the batch if it were cut now.
    pub(crate) fn encoded_len(&self) -> usize {
        self.json.len() + 1 + CHECKSUM_LEN
    }

    /// Adds all events of `revision` (one transaction). Returns the batches this cut: one
    /// before the revision when it would push a non-empty buffer over the memory limit, one
    /// after it when the buffer has reached the limit. A revision is never split, so a single
    /// revision larger than the limit makes one oversized batch.
    ///
    /// The same revision as the last one added joins it (it cannot have been cut yet); an
    /// older one is refused, since taking it could make batches overlap.
    pub(crate) fn push_revision(
        &mut self,
        revision: i64,
        events: Vec<DeltaEvent>,
    ) -> Result<Vec<DeltaBatch>, OutOfOrder> {
        let continues_last = !self.is_empty() && revision == self.last_revision;
        if revision <= self.last_revision && !continues_last {
            return Err(OutOfOrder {
                revision,
                captured_through: self.last_revision,
            });
        }
        let mut group = Vec::new();
        for event in &events {
            if !group.is_empty() {
                group.push(b',');
            }
            serde_json::to_writer(&mut group, event).expect("delta events always serialize");
        }
        let mut cuts = Vec::new();
        if !self.is_empty()
            && !continues_last
            && self.encoded_len() + 1 + group.len() > self.memory_limit
            && let Some(batch) = self.cut(CutReason::MemoryLimit)
        {
            cuts.push(batch);
        }
        if !self.is_empty() {
            self.json.push(b',');
        }
        self.json.extend_from_slice(&group);
        self.events.extend(events);
        self.last_revision = revision;
        if self.encoded_len() >= self.memory_limit
            && let Some(batch) = self.cut(CutReason::MemoryLimit)
        {
            cuts.push(batch);
        }
        Ok(cuts)
    }

    /// Cuts the buffered events into a batch; `None` when there are none. The next batch
    /// starts right after this one's last revision.
    pub(crate) fn cut(&mut self, reason: CutReason) -> Option<DeltaBatch> {
        if self.is_empty() {
            return None;
        }
        let mut encoded = std::mem::replace(&mut self.json, vec![b'[']);
        encoded.push(b']');
        let checksum = Sha256::digest(&encoded);
        encoded.extend_from_slice(&checksum);
        let batch = DeltaBatch {
            start_revision: self.start_revision,
            last_revision: self.last_revision,
            events: std::mem::take(&mut self.events),
            encoded,
            reason,
        };
        self.start_revision = self.last_revision + 1;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{EVENT_DELETE, EVENT_PUT, EtcdEvent, KeyValue, decode, encode};
    use proptest::prelude::*;

    fn event(revision: i64, key: &str, value_len: usize, delete: bool) -> DeltaEvent {
        DeltaEvent {
            etcd_event: EtcdEvent {
                kind: if delete { EVENT_DELETE } else { EVENT_PUT },
                kv: Some(KeyValue {
                    key: key.as_bytes().to_vec(),
                    mod_revision: revision,
                    value: vec![b'v'; value_len],
                    ..Default::default()
                }),
                prev_kv: None,
            },
            time: "2026-11-22T05:00:00Z".into(),
            lease_ttl: None,
        }
    }

    /// Revisions 10, 11, ... each with the given number of events and value size.
    fn revisions(shape: &[(usize, usize)]) -> Vec<(i64, Vec<DeltaEvent>)> {
        shape
            .iter()
            .enumerate()
            .map(|(i, &(count, len))| {
                let rev = 10 + i as i64;
                let events = (0..count)
                    .map(|j| event(rev, &format!("k{i}-{j}"), len, j % 3 == 2))
                    .collect();
                (rev, events)
            })
            .collect()
    }

    #[test]
    fn encoding_matches_delta_encode_and_decodes() {
        let mut buffer = DeltaBuffer::new(10, usize::MAX);
        let mut all = Vec::new();
        for (rev, events) in revisions(&[(1, 3), (3, 0), (2, 5)]) {
            all.extend(events.clone());
            assert!(buffer.push_revision(rev, events).unwrap().is_empty());
        }
        let before = buffer.encoded_len();
        let batch = buffer.cut(CutReason::Requested).unwrap();
        assert_eq!(batch.encoded.len(), before);
        assert_eq!(batch.encoded, encode(&all));
        assert_eq!(decode("d", &batch.encoded).unwrap(), all);
        assert_eq!((batch.start_revision, batch.last_revision), (10, 12));
        assert_eq!(buffer.next_revision(), 13);
        assert!(
            buffer.cut(CutReason::Period).is_none(),
            "no events, no batch"
        );
    }

    #[test]
    fn an_oversized_transaction_stays_whole() {
        let mut buffer = DeltaBuffer::new(10, 200);
        let revs = revisions(&[(1, 10), (5, 100), (1, 10)]);
        let mut cuts = Vec::new();
        for (rev, events) in revs {
            cuts.extend(buffer.push_revision(rev, events).unwrap());
        }
        // Revision 10 is cut before the big txn, the txn alone (over the limit) right after.
        assert_eq!(cuts.len(), 2);
        assert_eq!((cuts[0].start_revision, cuts[0].last_revision), (10, 10));
        assert_eq!((cuts[1].start_revision, cuts[1].last_revision), (11, 11));
        assert_eq!(cuts[1].events.len(), 5);
        assert!(cuts[1].encoded.len() > 200);
        assert!(cuts.iter().all(|c| c.reason == CutReason::MemoryLimit));
        assert_eq!(buffer.next_revision(), 13);
    }

    #[test]
    fn old_revisions_are_refused_and_the_last_one_may_continue() {
        let mut buffer = DeltaBuffer::new(10, usize::MAX);
        buffer
            .push_revision(10, vec![event(10, "a", 1, false)])
            .unwrap();
        buffer
            .push_revision(10, vec![event(10, "b", 1, false)])
            .unwrap();
        assert_eq!(
            buffer.push_revision(9, vec![event(9, "c", 1, false)]),
            Err(OutOfOrder {
                revision: 9,
                captured_through: 10
            })
        );
        let batch = buffer.cut(CutReason::Requested).unwrap();
        assert_eq!(batch.events.len(), 2);
        // After the cut, revision 10 belongs to a stored batch: it must not come again.
        assert!(
            buffer
                .push_revision(10, vec![event(10, "d", 1, false)])
                .is_err()
        );
    }

    proptest! {
        #[test]
        fn batches_are_contiguous_whole_bounded_and_lossless(
            shape in proptest::collection::vec((1usize..4, 0usize..120), 1..40),
            limit in 150usize..2000,
            requested_cuts in proptest::collection::vec(any::<bool>(), 40),
        ) {
            let mut buffer = DeltaBuffer::new(10, limit);
            let revs = revisions(&shape);
            let mut batches = Vec::new();
            for (i, (rev, events)) in revs.iter().cloned().enumerate() {
                batches.extend(buffer.push_revision(rev, events).unwrap());
                if requested_cuts[i] {
                    batches.extend(buffer.cut(CutReason::Requested));
                }
            }
            batches.extend(buffer.cut(CutReason::Stop));

            let mut next = 10;
            let mut all = Vec::new();
            for batch in &batches {
                prop_assert_eq!(batch.start_revision, next);
                prop_assert!(!batch.events.is_empty());
                prop_assert_eq!(
                    batch.events.last().unwrap().etcd_event.mod_revision(),
                    batch.last_revision
                );
                prop_assert_eq!(&batch.encoded, &encode(&batch.events));
                let revisions_in_batch: std::collections::BTreeSet<i64> =
                    batch.events.iter().map(|e| e.etcd_event.mod_revision()).collect();
                if batch.encoded.len() > limit {
                    prop_assert_eq!(revisions_in_batch.len(), 1, "only a lone txn may exceed");
                }
                next = batch.last_revision + 1;
                all.extend(batch.events.iter().cloned());
            }
            let expected: Vec<DeltaEvent> = revs.into_iter().flat_map(|(_, e)| e).collect();
            prop_assert_eq!(all, expected);
            // No revision is split across batches.
            for pair in batches.windows(2) {
                prop_assert!(pair[0].last_revision < pair[1].events[0].etcd_event.mod_revision());
            }
        }
    }
}
