//! Checks etcd's snapshot trailer while the data streams past: etcd ends `Maintenance.Snapshot`
//! with the SHA-256 of everything before it, so a truncated or damaged download is caught at
//! capture time instead of at restore time. Only the last 32 bytes are held back.

use sha2::{Digest, Sha256};

/// Length of etcd's SHA-256 trailer.
const TRAILER: usize = 32;

/// Running check of a snapshot's trailing SHA-256.
#[derive(Clone)]
pub(crate) struct TrailerCheck {
    hasher: Sha256,
    /// The last (up to) 32 bytes seen, not hashed yet: they may be the trailer.
    tail: [u8; TRAILER],
    tail_len: usize,
    total: u64,
}

impl TrailerCheck {
    pub(crate) fn new() -> TrailerCheck {
        TrailerCheck {
            hasher: Sha256::new(),
            tail: [0; TRAILER],
            tail_len: 0,
            total: 0,
        }
    }

    /// Feeds the next chunk of the stream.
    pub(crate) fn update(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= TRAILER {
            self.hasher.update(&self.tail[..self.tail_len]);
            let (body, tail) = chunk.split_at(chunk.len() - TRAILER);
            self.hasher.update(body);
            self.tail.copy_from_slice(tail);
            self.tail_len = TRAILER;
            return;
        }
        // A short chunk: the held-back bytes plus it are at most 63 bytes.
        let mut joined = [0u8; 2 * TRAILER];
        let len = self.tail_len + chunk.len();
        joined[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        joined[self.tail_len..len].copy_from_slice(chunk);
        let keep = len.min(TRAILER);
        self.hasher.update(&joined[..len - keep]);
        self.tail[..keep].copy_from_slice(&joined[len - keep..len]);
        self.tail_len = keep;
    }

    /// Bytes seen so far, trailer included.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// At the end of the stream: `Err` with what is wrong when the trailer is missing or does
    /// not match the data.
    pub(crate) fn finish(self) -> Result<(), String> {
        if self.tail_len < TRAILER {
            return Err(format!(
                "the stream ended after {} bytes, before etcd's 32-byte SHA-256 trailer",
                self.total
            ));
        }
        if self.hasher.finalize().as_slice() != self.tail {
            return Err(format!(
                "the SHA-256 trailer does not match the {} bytes of data before it",
                self.total - TRAILER as u64
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn with_trailer(data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        out.extend_from_slice(&Sha256::digest(data));
        out
    }

    fn check(stream: &[u8], cuts: &[usize]) -> Result<(), String> {
        let mut check = TrailerCheck::new();
        let mut start = 0;
        for &cut in cuts {
            let cut = cut.clamp(start, stream.len());
            check.update(&stream[start..cut]);
            start = cut;
        }
        check.update(&stream[start..]);
        assert_eq!(check.total(), stream.len() as u64);
        check.finish()
    }

    proptest! {
        #[test]
        fn any_chunking_of_a_good_stream_passes(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            mut cuts in proptest::collection::vec(0usize..340, 0..12),
        ) {
            cuts.sort();
            prop_assert_eq!(check(&with_trailer(&data), &cuts), Ok(()));
        }

        #[test]
        fn any_flipped_bit_is_caught(
            data in proptest::collection::vec(any::<u8>(), 1..300),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
            mut cuts in proptest::collection::vec(0usize..340, 0..12),
        ) {
            cuts.sort();
            let mut stream = with_trailer(&data);
            let i = at.index(stream.len());
            stream[i] ^= 1 << bit;
            prop_assert!(check(&stream, &cuts).is_err());
        }
    }

    #[test]
    fn truncated_stream_is_reported_with_its_length() {
        let stream = with_trailer(b"database");
        let err = check(&stream[..20], &[7]).unwrap_err();
        assert!(err.contains("after 20 bytes"), "{err}");
        let err = check(&stream[..stream.len() - 1], &[]).unwrap_err();
        assert!(err.contains("does not match"), "{err}");
    }
}
