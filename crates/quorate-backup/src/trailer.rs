//! The SHA-256 of a byte stream that ends in its own SHA-256 (a delta snapshot, a full snapshot
//! as etcd writes it), computed as the bytes arrive: the object is verified in the same pass
//! that reads it, so nothing uses a byte of it before the whole was checked, and it is never
//! read twice.

use sha2::{Digest, Sha256};

/// Size of the trailing checksum.
pub const TRAILER_LEN: usize = 32;

/// Hashes everything but the last [`TRAILER_LEN`] bytes seen so far, and keeps those.
#[derive(Clone, Default)]
pub struct TrailingSha256 {
    hasher: Sha256,
    tail: Vec<u8>,
    len: u64,
}

impl TrailingSha256 {
    /// Nothing seen yet.
    pub fn new() -> TrailingSha256 {
        TrailingSha256::default()
    }

    /// Takes the next bytes of the stream.
    pub fn update(&mut self, chunk: &[u8]) {
        self.len += chunk.len() as u64;
        if chunk.len() >= TRAILER_LEN {
            let (body, tail) = chunk.split_at(chunk.len() - TRAILER_LEN);
            self.hasher.update(&self.tail);
            self.hasher.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(tail);
        } else {
            self.tail.extend_from_slice(chunk);
            if self.tail.len() > TRAILER_LEN {
                let excess = self.tail.len() - TRAILER_LEN;
                self.hasher.update(&self.tail[..excess]);
                self.tail.drain(..excess);
            }
        }
    }

    /// Bytes seen so far, the trailer included.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no byte was seen.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the stream was long enough to end in a checksum and its last
    /// [`TRAILER_LEN`] bytes are the SHA-256 of what precedes them.
    pub fn matches(self) -> bool {
        self.tail.len() == TRAILER_LEN && self.hasher.finalize().as_slice() == self.tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_trailer(body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&Sha256::digest(body));
        out
    }

    /// However the stream is cut into chunks, the result is the whole object's.
    #[test]
    fn any_chunking_gives_the_same_verdict() {
        let body: Vec<u8> = (0..200u8).collect();
        let good = with_trailer(&body);
        let mut bad = good.clone();
        bad[17] ^= 1;
        for size in [1, 5, 31, 32, 33, 64, 500] {
            for (data, expected) in [(&good, true), (&bad, false)] {
                let mut h = TrailingSha256::new();
                for chunk in data.chunks(size) {
                    h.update(chunk);
                }
                assert_eq!(h.len(), data.len() as u64);
                assert_eq!(h.matches(), expected, "chunks of {size}");
            }
        }
        let mut trailer_only = TrailingSha256::new();
        trailer_only.update(&with_trailer(b""));
        assert!(trailer_only.matches());
        let mut short = TrailingSha256::new();
        short.update(&[0; 31]);
        assert!(!short.matches());
    }
}
