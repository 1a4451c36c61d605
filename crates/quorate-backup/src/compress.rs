//! Streaming compression of snapshots in the formats etcd-backup-restore writes, so objects
//! either side uploads decompress on the other: gzip (`.gz`), zlib (`.zlib`) and LZW (`.Z`) as
//! Go's `compress/lzw` makes it with `lzw.NewWriter(w, lzw.LSB, 8)`.
//!
//! Everything works on streams of byte chunks; no snapshot is held in memory whole.
//!
//! Damage is reported as an `io::Error` in the stream: `InvalidData` for bytes that cannot be
//! decoded (or do not match gzip's CRC-32 / zlib's Adler-32), `UnexpectedEof` for a stream that
//! ends early. LZW carries no checksum: truncation and invalid codes are detected, other bit flips
//! only by the snapshot's own hash (etcd's database hash, the delta's SHA-256).

use std::io;

use async_compression::tokio::bufread::{GzipDecoder, GzipEncoder, ZlibDecoder, ZlibEncoder};
use bytes::{Buf, Bytes};
use futures::stream::{self, BoxStream, Stream, StreamExt, TryStreamExt};
use quorate_api::CompressionPolicy;
use tokio_util::io::{ReaderStream, StreamReader};

/// A stream of byte chunks, as snapshots move through upload and download.
pub type ByteStream<'a> = BoxStream<'a, io::Result<Bytes>>;

/// Size of the chunks the gzip and zlib coders produce.
const CHUNK: usize = 64 * 1024;

/// Compression level of gzip and zlib: the fastest. The backup leader shares its machine with
/// etcd, and at the default level compressing deltas costs etcd a fifth of its write
/// throughput on two cores (docs/benchmarks/backup.md); the objects are larger but still plain
/// gzip/zlib that any reader, etcd-backup-restore included, decompresses.
const LEVEL: async_compression::Level = async_compression::Level::Fastest;

/// Compresses `input` with `policy` (`None`: passes it through unchanged).
pub fn compress<'a, S>(policy: Option<CompressionPolicy>, input: S) -> ByteStream<'a>
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'a,
{
    match policy {
        None => input.boxed(),
        Some(CompressionPolicy::Gzip) => ReaderStream::with_capacity(
            GzipEncoder::with_quality(StreamReader::new(input), LEVEL),
            CHUNK,
        )
        .boxed(),
        Some(CompressionPolicy::Zlib) => ReaderStream::with_capacity(
            ZlibEncoder::with_quality(StreamReader::new(input), LEVEL),
            CHUNK,
        )
        .boxed(),
        Some(CompressionPolicy::Lzw) => lzw_encode(input),
    }
}

/// Decompresses `input`, which was compressed with `policy` (`None`: passes it through).
pub fn decompress<'a, S>(policy: Option<CompressionPolicy>, input: S) -> ByteStream<'a>
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'a,
{
    match policy {
        None => input.boxed(),
        Some(CompressionPolicy::Gzip) => {
            let mut decoder = GzipDecoder::new(StreamReader::new(mark_upstream(input)));
            // Go's gzip reader accepts concatenated members; so do we.
            decoder.multiple_members(true);
            ReaderStream::with_capacity(decoder, CHUNK)
                .map_err(|e| decode_error("gzip", e))
                .boxed()
        }
        Some(CompressionPolicy::Zlib) => {
            let decoder = ZlibDecoder::new(StreamReader::new(mark_upstream(input)));
            ReaderStream::with_capacity(decoder, CHUNK)
                .map_err(|e| decode_error("zlib", e))
                .boxed()
        }
        Some(CompressionPolicy::Lzw) => lzw_decode(input),
    }
}

/// `input` cut off with the error `too_large(limit)` as soon as it has yielded more than
/// `limit` bytes: a decompression bomb stops at the bound, checked chunk by chunk while it
/// streams, instead of filling memory or the disk.
pub fn bounded<'a>(
    input: ByteStream<'a>,
    limit: u64,
    too_large: impl Fn(u64) -> io::Error + Send + 'a,
) -> ByteStream<'a> {
    let mut seen = 0u64;
    let mut failed = false;
    input
        .map(move |chunk| {
            let chunk = chunk?;
            seen = seen.saturating_add(chunk.len() as u64);
            if seen > limit {
                return Err(too_large(limit));
            }
            Ok(chunk)
        })
        .take_while(move |item| {
            // Ends the stream after the first error, so nothing more is decompressed.
            let go = !failed;
            failed |= item.is_err();
            futures::future::ready(go)
        })
        .boxed()
}

/// An error of the compressed input itself (e.g. the network), as opposed to bad data.
#[derive(Debug)]
struct Upstream(io::Error);

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Upstream {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Tags the input's own errors so they come out of a decoder unchanged.
fn mark_upstream<'a, S>(input: S) -> impl Stream<Item = io::Result<Bytes>> + Send + 'a
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'a,
{
    input.map_err(|e| io::Error::new(e.kind(), Upstream(e)))
}

/// Passes the input's own errors through; every other decoder error means damaged data:
/// `UnexpectedEof` when the data ends early, `InvalidData` otherwise.
fn decode_error(format: &str, e: io::Error) -> io::Error {
    if e.get_ref().is_some_and(|inner| inner.is::<Upstream>()) {
        let kind = e.kind();
        return match e.into_inner().map(|inner| inner.downcast::<Upstream>()) {
            Some(Ok(upstream)) => upstream.0,
            Some(Err(other)) => io::Error::new(kind, other),
            None => io::Error::from(kind),
        };
    }
    let kind = match e.kind() {
        io::ErrorKind::UnexpectedEof => io::ErrorKind::UnexpectedEof,
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, format!("{format} data is corrupt: {e}"))
}

/// LZW-compresses a stream chunk by chunk.
fn lzw_encode<'a, S>(input: S) -> ByteStream<'a>
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'a,
{
    let state = (input.boxed(), Some(LzwEncoder::new()));
    stream::unfold(state, |(mut input, mut encoder)| async move {
        loop {
            let enc = encoder.as_mut()?;
            match input.next().await {
                Some(Ok(chunk)) => {
                    let out = enc.write(&chunk);
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (input, encoder)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (input, None))),
                None => {
                    let out = encoder.take()?.finish();
                    return Some((Ok(Bytes::from(out)), (input, None)));
                }
            }
        }
    })
    .boxed()
}

/// Decodes an LZW stream (LSB first, 8-bit literals) chunk by chunk, in output chunks of at
/// most [`CHUNK`] bytes: LZW expands a thousandfold, so an input chunk is decoded piecewise.
fn lzw_decode<'a, S>(input: S) -> ByteStream<'a>
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'a,
{
    let decoder = weezl::decode::Decoder::new(weezl::BitOrder::Lsb, 8);
    // The input not decoded yet, and whether the decoder may still hold output (the last
    // call filled the buffer).
    let state = (input.boxed().fuse(), Some(decoder), Bytes::new(), false);
    stream::unfold(
        state,
        |(mut input, mut decoder, mut pending, mut full)| async move {
            loop {
                let dec = decoder.as_mut()?;
                if pending.is_empty() && !full {
                    match input.next().await {
                        Some(Ok(chunk)) => {
                            if dec.has_ended() {
                                if chunk.is_empty() {
                                    continue;
                                }
                                return Some((
                                    Err(lzw_trailing_data()),
                                    (input, None, pending, false),
                                ));
                            }
                            pending = chunk;
                            continue;
                        }
                        Some(Err(e)) => return Some((Err(e), (input, None, pending, false))),
                        None if dec.has_ended() => return None,
                        None => {
                            // The decoder may hold the last codes until asked again with no
                            // more input.
                            match lzw_decode_some(dec, &mut pending) {
                                Ok(out) if !out.is_empty() => {
                                    return Some((
                                        Ok(Bytes::from(out)),
                                        (input, decoder, pending, true),
                                    ));
                                }
                                Ok(_) if dec.has_ended() => return None,
                                Ok(_) => {}
                                Err(e) => return Some((Err(e), (input, None, pending, false))),
                            }
                            let e = io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "LZW data ends before its end code: the object is truncated",
                            );
                            return Some((Err(e), (input, None, pending, false)));
                        }
                    }
                }
                match lzw_decode_some(dec, &mut pending) {
                    Ok(out) => {
                        full = out.len() == CHUNK;
                        if !out.is_empty() {
                            return Some((Ok(Bytes::from(out)), (input, decoder, pending, full)));
                        }
                    }
                    Err(e) => return Some((Err(e), (input, None, pending, false))),
                }
            }
        },
    )
    .boxed()
}

/// Decodes from `inp` (consuming what it used) until there is output (at most [`CHUNK`]
/// bytes) or the input is used up, failing on invalid codes and on data after the end code.
fn lzw_decode_some(dec: &mut weezl::decode::Decoder, inp: &mut Bytes) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let r = dec.decode_bytes(inp, &mut buf);
        inp.advance(r.consumed_in);
        let made = r.consumed_out;
        match r.status {
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("LZW data is corrupt: {e}"),
                ));
            }
            Ok(weezl::LzwStatus::Done) => {
                if !inp.is_empty() {
                    return Err(lzw_trailing_data());
                }
            }
            Ok(weezl::LzwStatus::NoProgress) if inp.is_empty() => {}
            Ok(weezl::LzwStatus::NoProgress) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "LZW data is corrupt: the decoder cannot make progress",
                ));
            }
            Ok(weezl::LzwStatus::Ok) => {
                if made == 0 && !inp.is_empty() {
                    continue;
                }
            }
        }
        buf.truncate(made);
        return Ok(buf);
    }
}

fn lzw_trailing_data() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "LZW data continues after its end code: the object is corrupt",
    )
}

/// Literal width: every byte value is a literal code.
const LIT_WIDTH: u32 = 8;
/// The code that resets the dictionary.
const CLEAR_CODE: u32 = 1 << LIT_WIDTH;
/// The code that ends the data.
const EOF_CODE: u32 = CLEAR_CODE + 1;
/// Codes are at most 12 bits wide. Like Go's writer, the dictionary is reset when the next code
/// would be this one, so 4095 itself is never assigned.
const MAX_CODE: u32 = (1 << 12) - 1;
/// Slots of the open-addressing dictionary (four times the codes, so probes stay short).
const TABLE_SLOTS: usize = 1 << 14;
/// A free dictionary slot. No entry is 0: entries hold codes above `EOF_CODE`.
const FREE: u32 = 0;

/// An LZW encoder producing exactly the bytes of Go's `compress/lzw` writer with LSB order and
/// 8-bit literals: a clear code first, code width growing from 9 bits when the next code reaches
/// the next power of two, a clear code instead of assigning code 4095, the end code last, and
/// the final partial byte padded with zeros. Output does not depend on how input is chunked.
struct LzwEncoder {
    /// Dictionary: `(prefix code << 8 | byte) << 12 | code`, open addressing.
    table: Box<[u32]>,
    /// The last code assigned (or the end code right after a reset).
    hi: u32,
    /// The first code that needs one more bit.
    overflow: u32,
    /// The current code width in bits.
    width: u32,
    /// The code of the input seen but not yet emitted; `None` before the first byte.
    pending: Option<u32>,
    /// Bits not yet written, least significant first.
    bits: u64,
    /// How many of `bits` are valid.
    nbits: u32,
    /// Bytes produced since the last call.
    out: Vec<u8>,
}

impl LzwEncoder {
    fn new() -> LzwEncoder {
        LzwEncoder {
            table: vec![FREE; TABLE_SLOTS].into_boxed_slice(),
            hi: EOF_CODE,
            overflow: 1 << (LIT_WIDTH + 1),
            width: LIT_WIDTH + 1,
            pending: None,
            bits: 0,
            nbits: 0,
            out: Vec::new(),
        }
    }

    /// Encodes `data`, returning the bytes completed so far.
    fn write(&mut self, data: &[u8]) -> Vec<u8> {
        for &byte in data {
            let literal = u32::from(byte);
            let Some(code) = self.pending else {
                self.emit(CLEAR_CODE);
                self.pending = Some(literal);
                continue;
            };
            let key = (code << 8) | literal;
            if let Some(next) = self.lookup(key) {
                self.pending = Some(next);
                continue;
            }
            self.emit(code);
            self.pending = Some(literal);
            if self.next_code() {
                self.insert(key, self.hi);
            }
        }
        std::mem::take(&mut self.out)
    }

    /// Ends the data: the pending code, the end code and the last partial byte.
    fn finish(mut self) -> Vec<u8> {
        match self.pending {
            Some(code) => {
                self.emit(code);
                self.next_code();
            }
            None => self.emit(CLEAR_CODE),
        }
        self.emit(EOF_CODE);
        if self.nbits > 0 {
            self.out.push(self.bits as u8);
        }
        self.out
    }

    /// Assigns the next code; widens codes at a power of two; when the codes are used up,
    /// emits a clear code, resets and returns false (the entry is then not stored).
    fn next_code(&mut self) -> bool {
        self.hi += 1;
        if self.hi == self.overflow {
            self.width += 1;
            self.overflow <<= 1;
        }
        if self.hi == MAX_CODE {
            self.emit(CLEAR_CODE);
            self.width = LIT_WIDTH + 1;
            self.hi = EOF_CODE;
            self.overflow = 1 << (LIT_WIDTH + 1);
            self.table.fill(FREE);
            return false;
        }
        true
    }

    fn emit(&mut self, code: u32) {
        self.bits |= u64::from(code) << self.nbits;
        self.nbits += self.width;
        while self.nbits >= 8 {
            self.out.push(self.bits as u8);
            self.bits >>= 8;
            self.nbits -= 8;
        }
    }

    fn slot(key: u32) -> usize {
        (key.wrapping_mul(0x9E37_79B1) >> (32 - 14)) as usize
    }

    fn lookup(&self, key: u32) -> Option<u32> {
        let mut i = Self::slot(key);
        loop {
            let entry = self.table[i];
            if entry == FREE {
                return None;
            }
            if entry >> 12 == key {
                return Some(entry & MAX_CODE);
            }
            i = (i + 1) & (TABLE_SLOTS - 1);
        }
    }

    fn insert(&mut self, key: u32, code: u32) {
        let mut i = Self::slot(key);
        while self.table[i] != FREE {
            i = (i + 1) & (TABLE_SLOTS - 1);
        }
        self.table[i] = (key << 12) | code;
    }
}

#[cfg(test)]
mod tests {
    //! The LZW vectors come from Go 1.19's `compress/lzw` (`lzw.NewWriter(&buf, lzw.LSB, 8)`,
    //! one `Write`, `Close`), run on the inputs `gen` makes here with the same xorshift
    //! generator in Go: small inputs as hex, large ones as length and SHA-256 of Go's output.

    use super::*;
    use sha2::{Digest, Sha256};

    /// Deterministic test data: xorshift64, byte = bits 32..40; `alphabet < 256` maps bytes
    /// to `'a' + b % alphabet`.
    fn sample(seed: u64, n: usize, alphabet: u32) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = (x >> 32) as u8;
                if alphabet < 256 {
                    b'a' + (u32::from(b) % alphabet) as u8
                } else {
                    b
                }
            })
            .collect()
    }

    fn lzw(data: &[u8]) -> Vec<u8> {
        let mut e = LzwEncoder::new();
        let mut out = e.write(data);
        out.extend(e.finish());
        out
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn sha(b: &[u8]) -> String {
        hex(&Sha256::digest(b))
    }

    async fn collect(s: ByteStream<'_>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut s = s;
        while let Some(chunk) = s.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    fn chunks(data: &[u8], size: usize) -> ByteStream<'static> {
        let parts: Vec<io::Result<Bytes>> = data
            .chunks(size.max(1))
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(parts).boxed()
    }

    async fn decode_lzw(data: &[u8], chunk: usize) -> io::Result<Vec<u8>> {
        collect(decompress(
            Some(CompressionPolicy::Lzw),
            chunks(data, chunk),
        ))
        .await
    }

    #[test]
    fn lzw_matches_go_on_small_inputs() {
        for (input, go) in [
            ("", "000302"),
            ("a", "00c30404"),
            (
                "TOBEORNOTTOBEORTOBEORNOT",
                "00a93c1152e48914274fa80824687061c183090302",
            ),
            ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "00c3081c48b0a0c183020302"),
        ] {
            assert_eq!(hex(&lzw(input.as_bytes())), go, "input {input:?}");
        }
    }

    #[test]
    fn lzw_matches_go_on_large_inputs() {
        for (name, data, len, go_sha) in [
            (
                "a x 100000",
                vec![b'a'; 100_000],
                530,
                "444a344b318b4a0af70cb18d3fa3ce3d31ec91b32d3bd68878c1dc4ee0a79b68",
            ),
            (
                "random bytes",
                sample(0x9E37_79B9_7F4A_7C15, 300_000, 256),
                410_912,
                "0aa425b7885c24a30b12bdf3f9d906ebe901b93263983df7830699e9c9fb2179",
            ),
            (
                "4 letters",
                sample(42, 400_000, 4),
                118_981,
                "d777fd092b42bcbce806201530d21b7f510beeacafefe8d4caf77d020aae0846",
            ),
            (
                "26 letters",
                sample(7, 200_000, 26),
                148_621,
                "0eb28ad646fc92a1396c27692a13675e0c561bca17bab66b16cf3179fd75269b",
            ),
        ] {
            let out = lzw(&data);
            assert_eq!((out.len(), sha(&out).as_str()), (len, go_sha), "{name}");
        }
    }

    /// Every prefix length around the width changes (codes 511/1023/2047) and the dictionary
    /// reset (code 4095), where an encoder most easily differs in the last codes it writes.
    #[test]
    fn lzw_matches_go_at_every_boundary() {
        for (alphabet, go_sha) in [
            (
                256,
                "b675196fbd0a46c4aa09e80225f18031253b5dc7c6e1adf658f4e131001a7761",
            ),
            (
                3,
                "b5f3749db6cb2759857225ba75089dbeb761a2ca92a2237be3128bae25f47eee",
            ),
        ] {
            let src = sample(1_234_567, 20_000, alphabet);
            let mut h = Sha256::new();
            for n in 0..=src.len() {
                let wanted =
                    n < 700 || (n > 3500 && n < 4500) || (alphabet == 3 && n > 9000 && n < 20000);
                if !wanted {
                    continue;
                }
                let out = lzw(&src[..n]);
                h.update((out.len() as u64).to_le_bytes());
                h.update(&out);
            }
            assert_eq!(hex(&h.finalize()), go_sha, "alphabet {alphabet}");
        }
    }

    #[tokio::test]
    async fn lzw_output_does_not_depend_on_chunking_and_decodes_back() {
        let data = sample(99, 150_000, 5);
        let whole = lzw(&data);
        for size in [1, 7, 4096, 1 << 20] {
            let piecewise = collect(compress(Some(CompressionPolicy::Lzw), chunks(&data, size)))
                .await
                .unwrap();
            assert_eq!(piecewise, whole, "chunk size {size}");
            assert_eq!(
                decode_lzw(&whole, size).await.unwrap(),
                data,
                "chunk size {size}"
            );
        }
        // The empty stream Go writes decodes to nothing.
        assert_eq!(decode_lzw(&[0x00, 0x03, 0x02], 1).await.unwrap(), b"");
    }

    #[tokio::test]
    async fn lzw_damage_is_detected() {
        let data = sample(5, 50_000, 256);
        let good = lzw(&data);
        // Truncated: no end code.
        for cut in [1, good.len() / 2, good.len() - 1] {
            let e = decode_lzw(&good[..cut], 1000).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}: {e}");
        }
        // Data after the end code.
        let mut long = good.clone();
        long.extend_from_slice(b"junk");
        let e = decode_lzw(&long, 1000).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let e = decode_lzw(&long, good.len()).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        // A code no dictionary has yet: right after the leading clear code (9 bits), a 9-bit
        // code of 511 where only literals are known.
        let bad = [0x00, 0xfe, 0x03, 0x00];
        let e = decode_lzw(&bad, 10).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[tokio::test]
    async fn every_policy_round_trips_in_chunks() {
        let data = sample(3, 300_000, 256);
        let policies = [
            None,
            Some(CompressionPolicy::Gzip),
            Some(CompressionPolicy::Zlib),
            Some(CompressionPolicy::Lzw),
        ];
        for p in policies {
            let packed = collect(compress(p, chunks(&data, 10_000))).await.unwrap();
            if p.is_none() {
                assert_eq!(packed, data);
            }
            let back = collect(decompress(p, chunks(&packed, 777))).await.unwrap();
            assert_eq!(back, data, "{p:?}");
        }
        // Compressible data really shrinks.
        let text = sample(3, 300_000, 4);
        for p in &policies[1..] {
            let packed = collect(compress(*p, chunks(&text, 10_000))).await.unwrap();
            assert!(packed.len() < text.len() / 2, "{p:?}: {}", packed.len());
        }
    }

    #[tokio::test]
    async fn gzip_and_zlib_damage_is_detected() {
        let data = sample(11, 200_000, 256);
        for p in [CompressionPolicy::Gzip, CompressionPolicy::Zlib] {
            let good = collect(compress(Some(p), chunks(&data, 50_000)))
                .await
                .unwrap();
            let truncated = &good[..good.len() - 3];
            let e = collect(decompress(Some(p), chunks(truncated, 4096)))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::InvalidData
                ),
                "{p}: truncated: {e:?}"
            );
            // A flipped bit in the last byte of the checksum trailer.
            let mut flipped = good.clone();
            *flipped.last_mut().unwrap() ^= 0x01;
            let e = collect(decompress(Some(p), chunks(&flipped, 4096)))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{p}: flipped: {e}");
            // Garbage instead of compressed data.
            let e = collect(decompress(Some(p), chunks(&data[..1000], 4096)))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{p}: garbage: {e}");
        }
    }

    #[tokio::test]
    async fn input_errors_pass_through() {
        for p in [
            None,
            Some(CompressionPolicy::Gzip),
            Some(CompressionPolicy::Zlib),
            Some(CompressionPolicy::Lzw),
        ] {
            let failing = stream::iter(vec![
                Ok(Bytes::from_static(b"abc")),
                Err(io::Error::other("disk gone")),
            ]);
            let e = collect(compress(p, failing)).await.unwrap_err();
            assert!(e.to_string().contains("disk gone"), "{p:?}: {e}");
            // A good start of compressed data, then the connection breaks.
            let packed = collect(compress(p, chunks(&sample(1, 100_000, 256), 10_000)))
                .await
                .unwrap();
            let failing = stream::iter(vec![
                Ok(Bytes::copy_from_slice(&packed[..packed.len() / 2])),
                Err(io::Error::new(io::ErrorKind::ConnectionReset, "peer gone")),
            ]);
            let e = collect(decompress(p, failing)).await.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{p:?}: {e}");
            assert_eq!(e.to_string(), "peer gone", "{p:?}");
        }
    }
}
