//! The delta buffer: captured events as their encoding only, cut into batches at revision
//! boundaries only. Pure (no I/O, no clock) so its invariants are property-tested.
//!
//! Each event's JSON is written straight into the buffer as it arrives (`[` + events joined
//! by `,`), so the size that the memory limit is checked against is exact and a cut costs only
//! the checksum. The result is byte-for-byte what [`crate::delta::encode`] makes of the same
//! events. The events themselves are not kept: a batch's [`DeltaBatch::events`] decodes them
//! from its encoding when someone looks at them.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::delta::{CHECKSUM_LEN, DeltaEvent, decode};

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
    /// Counted as captured; decoded from [`DeltaBatch::encoded`] only when looked at.
    pub events: DeltaEvents,
    /// The delta snapshot bytes (JSON array + SHA-256), as [`crate::delta::encode`] makes them.
    pub encoded: EncodedDelta,
    /// Why it was cut.
    pub reason: CutReason,
}

/// The bytes of one delta snapshot: a slice (`Deref`), cheap to clone, and turned into
/// [`Bytes`] for an upload without a copy.
#[derive(Clone, PartialEq, Eq)]
pub struct EncodedDelta(Bytes);

impl Deref for EncodedDelta {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for EncodedDelta {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<EncodedDelta> for Bytes {
    fn from(encoded: EncodedDelta) -> Bytes {
        encoded.0
    }
}

impl fmt::Debug for EncodedDelta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<[u8]> for EncodedDelta {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

impl PartialEq<Vec<u8>> for EncodedDelta {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.0 == other[..]
    }
}

/// The events of a [`DeltaBatch`]. Capture writes each event's JSON only; [`DeltaEvents::len`]
/// is known without decoding, and the events themselves (through `Deref` to a slice) are
/// decoded from the batch's encoding the first time they are looked at.
#[derive(Clone)]
pub struct DeltaEvents {
    len: usize,
    /// The batch's encoding, shared with [`DeltaBatch::encoded`].
    encoded: Bytes,
    decoded: OnceLock<Vec<DeltaEvent>>,
}

impl DeltaEvents {
    /// Number of events, without decoding them.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none (a cut batch always has some).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The events, decoded (once) from the batch's encoding.
    pub fn as_slice(&self) -> &[DeltaEvent] {
        self.decoded.get_or_init(|| {
            let events = decode("delta batch", &self.encoded)
                .expect("a batch's encoding is what the buffer wrote");
            debug_assert_eq!(events.len(), self.len);
            events
        })
    }
}

impl Deref for DeltaEvents {
    type Target = [DeltaEvent];

    fn deref(&self) -> &[DeltaEvent] {
        self.as_slice()
    }
}

impl<'a> IntoIterator for &'a DeltaEvents {
    type Item = &'a DeltaEvent;
    type IntoIter = std::slice::Iter<'a, DeltaEvent>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl fmt::Debug for DeltaEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The encoding is deterministic: equal bytes, equal events.
impl PartialEq for DeltaEvents {
    fn eq(&self, other: &DeltaEvents) -> bool {
        self.len == other.len && self.encoded == other.encoded
    }
}

impl Eq for DeltaEvents {}

impl PartialEq<[DeltaEvent]> for DeltaEvents {
    fn eq(&self, other: &[DeltaEvent]) -> bool {
        self.len == other.len() && self.as_slice() == other
    }
}

impl PartialEq<Vec<DeltaEvent>> for DeltaEvents {
    fn eq(&self, other: &Vec<DeltaEvent>) -> bool {
        *self == other[..]
    }
}

impl PartialEq<DeltaEvents> for Vec<DeltaEvent> {
    fn eq(&self, other: &DeltaEvents) -> bool {
        *other == self[..]
    }
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
    /// Events in `json`.
    events: usize,
    /// `[` followed by the JSON of the events joined by `,`.
    json: Vec<u8>,
    memory_limit: usize,
    /// The revision whose events are being added.
    open: Option<OpenRevision>,
}

/// Where the buffer stood when the revision being added began.
#[derive(Clone, Copy, Debug)]
struct OpenRevision {
    revision: i64,
    /// Length of the JSON before it: where a cut before it splits (at its leading `,`).
    mark: usize,
    events_before: usize,
    last_before: i64,
    /// A new revision joining earlier ones may be cut off from them; one that continues the
    /// last revision may not.
    may_cut_before: bool,
}

impl DeltaBuffer {
    /// An empty buffer whose first batch starts at `start_revision`.
    pub(crate) fn new(start_revision: i64, memory_limit: usize) -> DeltaBuffer {
        DeltaBuffer {
            start_revision,
            last_revision: start_revision - 1,
            events: 0,
            json: vec![b'['],
            memory_limit,
            open: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// The first revision not captured yet: where a (re)started watch must begin.
    pub(crate) fn next_revision(&self) -> i64 {
        self.last_revision + 1
    }

    /// Size of the batch if it were cut now.
    pub(crate) fn encoded_len(&self) -> usize {
        self.json.len() + 1 + CHECKSUM_LEN
    }

    /// The revision being added, between [`DeltaBuffer::begin_revision`] and
    /// [`DeltaBuffer::end_revision`].
    pub(crate) fn open_revision(&self) -> Option<i64> {
        self.open.map(|open| open.revision)
    }

    /// Starts adding the events of `revision` (one transaction) with
    /// [`DeltaBuffer::push_event`]; [`DeltaBuffer::end_revision`] finishes it.
    ///
    /// The same revision as the last one added joins it (it cannot have been cut yet); an
    /// older one is refused, since taking it could make batches overlap.
    pub(crate) fn begin_revision(&mut self, revision: i64) -> Result<(), OutOfOrder> {
        assert!(self.open.is_none(), "the previous revision was not ended");
        let continues_last = !self.is_empty() && revision == self.last_revision;
        if revision <= self.last_revision && !continues_last {
            return Err(OutOfOrder {
                revision,
                captured_through: self.last_revision,
            });
        }
        self.open = Some(OpenRevision {
            revision,
            mark: self.json.len(),
            events_before: self.events,
            last_before: self.last_revision,
            may_cut_before: !self.is_empty() && !continues_last,
        });
        Ok(())
    }

    /// Adds one event of the open revision: `write` appends its JSON (see
    /// [`crate::delta::write_event_json`]).
    pub(crate) fn push_event(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let open = self.open.expect("an event belongs to a begun revision");
        if !self.is_empty() {
            self.json.push(b',');
        }
        write(&mut self.json);
        self.events += 1;
        self.last_revision = open.revision;
    }

    /// Finishes the open revision. Returns the batches this cut: one before the revision when
    /// it pushed a buffer that held earlier revisions over the memory limit, one after it
    /// when the buffer has reached the limit. A revision is never split, so a single revision
    /// larger than the limit makes one oversized batch.
    pub(crate) fn end_revision(&mut self) -> Vec<DeltaBatch> {
        let Some(open) = self.open.take() else {
            return Vec::new();
        };
        let mut cuts = Vec::new();
        if open.may_cut_before
            && self.events > open.events_before
            && self.encoded_len() > self.memory_limit
        {
            // The earlier revisions make a batch; this one (after its `,`) starts the next.
            let mut rest = self.json.split_off(open.mark);
            rest[0] = b'[';
            let before = std::mem::replace(&mut self.json, rest);
            cuts.push(self.batch(
                before,
                open.events_before,
                open.last_before,
                CutReason::MemoryLimit,
            ));
            self.events -= open.events_before;
        }
        if self.encoded_len() >= self.memory_limit
            && let Some(batch) = self.cut(CutReason::MemoryLimit)
        {
            cuts.push(batch);
        }
        cuts
    }

    /// Adds all events of `revision`: [`DeltaBuffer::begin_revision`], one
    /// [`DeltaBuffer::push_event`] per event, [`DeltaBuffer::end_revision`].
    #[cfg(test)]
    pub(crate) fn push_revision(
        &mut self,
        revision: i64,
        events: &[DeltaEvent],
    ) -> Result<Vec<DeltaBatch>, OutOfOrder> {
        use crate::delta::{JsonTime, write_event_json};
        self.begin_revision(revision)?;
        for event in events {
            self.push_event(|out| {
                write_event_json(
                    out,
                    event.etcd_event.kind,
                    event.etcd_event.kv.as_ref(),
                    event.etcd_event.prev_kv.as_ref(),
                    &JsonTime::new(&event.time),
                    event.lease_ttl,
                )
            });
        }
        Ok(self.end_revision())
    }

    /// Cuts the buffered events into a batch; `None` when there are none. The next batch
    /// starts right after this one's last revision. Never inside a revision.
    pub(crate) fn cut(&mut self, reason: CutReason) -> Option<DeltaBatch> {
        assert!(self.open.is_none(), "a revision is never split");
        if self.is_empty() {
            return None;
        }
        let json = std::mem::replace(&mut self.json, vec![b'[']);
        let events = std::mem::take(&mut self.events);
        Some(self.batch(json, events, self.last_revision, reason))
    }

    /// Closes `json` into a batch that ends at `last_revision`; the next one starts after it.
    fn batch(
        &mut self,
        mut json: Vec<u8>,
        events: usize,
        last_revision: i64,
        reason: CutReason,
    ) -> DeltaBatch {
        json.push(b']');
        let checksum = Sha256::digest(&json);
        json.extend_from_slice(&checksum);
        let encoded = Bytes::from(json);
        let batch = DeltaBatch {
            start_revision: self.start_revision,
            last_revision,
            events: DeltaEvents {
                len: events,
                encoded: encoded.clone(),
                decoded: OnceLock::new(),
            },
            encoded: EncodedDelta(encoded),
            reason,
        };
        self.start_revision = last_revision + 1;
        batch
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
            assert!(buffer.push_revision(rev, &events).unwrap().is_empty());
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
            cuts.extend(buffer.push_revision(rev, &events).unwrap());
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
            .push_revision(10, &[event(10, "a", 1, false)])
            .unwrap();
        buffer
            .push_revision(10, &[event(10, "b", 1, false)])
            .unwrap();
        assert_eq!(
            buffer.push_revision(9, &[event(9, "c", 1, false)]),
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
                .push_revision(10, &[event(10, "d", 1, false)])
                .is_err()
        );
    }

    #[test]
    fn batch_events_are_counted_and_decoded_only_when_looked_at() {
        let mut buffer = DeltaBuffer::new(10, usize::MAX);
        let events: Vec<DeltaEvent> = revisions(&[(2, 4), (1, 0)])
            .into_iter()
            .flat_map(|(rev, events)| {
                buffer.push_revision(rev, &events).unwrap();
                events
            })
            .collect();
        let batch = buffer.cut(CutReason::Stop).unwrap();
        assert_eq!(batch.events.len(), 3);
        assert!(batch.events.decoded.get().is_none(), "not decoded for len");
        assert_eq!(batch.info().events, 3);
        assert_eq!(batch.events, events);
        assert_eq!(events, batch.events);
        assert_eq!(batch.events[2], events[2]);
        assert_eq!((&batch.events).into_iter().count(), 3);
        assert_eq!(format!("{:?}", batch.events), format!("{events:?}"));
        assert_eq!(batch.clone(), batch);
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
                batches.extend(buffer.push_revision(rev, &events).unwrap());
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
                // Exactly what `encode` makes of the input events the batch covers.
                let covered: Vec<DeltaEvent> = revs
                    .iter()
                    .filter(|(rev, _)| (batch.start_revision..=batch.last_revision).contains(rev))
                    .flat_map(|(_, events)| events.iter().cloned())
                    .collect();
                prop_assert_eq!(&batch.encoded, &encode(&covered));
                prop_assert_eq!(batch.events.len(), covered.len());
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
