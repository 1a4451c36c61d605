//! Fuzzing the decompressors (`compress::decompress`, every policy): arbitrary bytes, valid
//! streams truncated or with bits flipped, in arbitrary chunkings. Every stream ends (no panic,
//! no hang) with data or an `InvalidData`/`UnexpectedEof` error whose message names the format;
//! no output chunk is larger than the coders' 64 KiB (a small input cannot make the decoder
//! hold a huge buffer); what was compressed decompresses back.

use std::io;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use proptest::prelude::*;
use quorate_api::CompressionPolicy;
use quorate_backup::compress::{compress, decompress};

const CHUNK: usize = 64 * 1024;

const POLICIES: [Option<CompressionPolicy>; 4] = [
    None,
    Some(CompressionPolicy::Gzip),
    Some(CompressionPolicy::Zlib),
    Some(CompressionPolicy::Lzw),
];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn chunked(data: &[u8], sizes: &[usize]) -> BoxStream<'static, io::Result<Bytes>> {
    let mut parts = Vec::new();
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        parts.push(Ok(Bytes::copy_from_slice(&rest[..n])));
        rest = &rest[n..];
        i += 1;
    }
    stream::iter(parts).boxed()
}

/// Decompresses, checking every chunk's size; the output, or the error.
async fn run(
    policy: Option<CompressionPolicy>,
    data: &[u8],
    sizes: &[usize],
) -> io::Result<Vec<u8>> {
    let mut s = decompress(policy, chunked(data, sizes));
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        match chunk {
            Ok(c) => {
                if policy.is_some() {
                    assert!(
                        c.len() <= CHUNK,
                        "{policy:?}: an output chunk of {} bytes",
                        c.len()
                    );
                }
                out.extend_from_slice(&c);
                assert!(out.len() <= 512 << 20, "{policy:?}: unbounded output");
            }
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
                    ),
                    "{policy:?}: {e:?}"
                );
                let shown = e.to_string();
                let format = match policy {
                    Some(CompressionPolicy::Gzip) => "gzip",
                    Some(CompressionPolicy::Zlib) => "zlib",
                    _ => "LZW",
                };
                assert!(shown.contains(format), "{policy:?}: {shown}");
                // The stream ends after an error.
                assert!(s.next().await.is_none(), "{policy:?}: data after an error");
                return Err(e);
            }
        }
    }
    Ok(out)
}

async fn packed(policy: Option<CompressionPolicy>, data: &[u8]) -> Vec<u8> {
    let mut s = compress(policy, chunked(data, &[4096]));
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

fn sizes() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(prop_oneof![1usize..8, 8usize..600, Just(1 << 20)], 1..4)
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..3000),
        (any::<u8>(), 0usize..200_000).prop_map(|(b, n)| vec![b; n]),
        proptest::collection::vec(0u8..3, 0..20_000),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_end_in_data_or_a_clear_error(data in proptest::collection::vec(any::<u8>(), 0..2000), sizes in sizes()) {
        runtime().block_on(async {
            for p in POLICIES {
                let _ = run(p, &data, &sizes).await;
            }
        });
    }

    #[test]
    fn plausible_headers_end_in_data_or_a_clear_error(
        header in prop_oneof![Just(vec![0x1f, 0x8b, 8, 0]), Just(vec![0x78, 0x9c]), Just(vec![0x78, 0x01]), Just(vec![0x00])],
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        sizes in sizes(),
    ) {
        let data = [header, data].concat();
        runtime().block_on(async {
            for p in POLICIES {
                let _ = run(p, &data, &sizes).await;
            }
        });
    }

    #[test]
    fn round_trip_truncation_and_bit_flips(data in payload(), sizes in sizes(), cut in any::<usize>(), at in any::<usize>(), bit in 0u8..8) {
        runtime().block_on(async {
            for p in POLICIES {
                let good = packed(p, &data).await;
                assert_eq!(run(p, &good, &sizes).await.unwrap(), data, "{p:?}");
                if p.is_none() || good.is_empty() {
                    continue;
                }
                let cut = cut % good.len();
                assert!(run(p, &good[..cut], &sizes).await.is_err(), "{p:?}: cut at {cut} of {}", good.len());
                let mut flipped = good.clone();
                flipped[at % good.len()] ^= 1 << bit;
                let back = run(p, &flipped, &sizes).await;
                if p != Some(CompressionPolicy::Lzw) {
                    // gzip and zlib carry checksums; LZW has none, but must not panic. A flipped
                    // bit that decodes to other data is caught by the checksum, unless that
                    // data has the same checksum: Adler-32 in particular collides often on short,
                    // low-entropy data (CI found one), which the format cannot tell apart.
                    if let Ok(other) = back
                        && other != data
                    {
                        assert_eq!(
                            checksum(p, &other),
                            checksum(p, &data),
                            "{p:?}: a flipped bit went unnoticed"
                        );
                    }
                }
            }
        });
    }
}

/// The checksum the format stores: zlib's Adler-32, gzip's CRC-32.
fn checksum(policy: Option<CompressionPolicy>, data: &[u8]) -> u32 {
    match policy {
        Some(CompressionPolicy::Zlib) => {
            let (mut a, mut b) = (1u32, 0u32);
            for &byte in data {
                a = (a + u32::from(byte)) % 65521;
                b = (b + a) % 65521;
            }
            (b << 16) | a
        }
        _ => {
            let mut crc = !0u32;
            for &byte in data {
                crc ^= u32::from(byte);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0xEDB8_8320
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
    }
}

/// Regression check of [`checksum`] against the formats' published check values.
#[test]
fn checksums_match_the_published_check_values() {
    assert_eq!(
        checksum(Some(CompressionPolicy::Zlib), b"Wikipedia"),
        0x11E6_0398
    );
    assert_eq!(
        checksum(Some(CompressionPolicy::Gzip), b"123456789"),
        0xCBF4_3926
    );
}

/// The highest ratios each format allows: a long run of one byte, fed in one chunk.
#[test]
fn a_small_bomb_decodes_in_bounded_chunks() {
    runtime().block_on(async {
        let data = vec![0u8; 64 << 20];
        for p in &POLICIES[1..] {
            let bomb = packed(*p, &data).await;
            assert!(bomb.len() < 1 << 20, "{p:?}: {}", bomb.len());
            let out = run(*p, &bomb, &[1 << 20]).await.unwrap();
            assert_eq!(out.len(), data.len(), "{p:?}");
        }
    });
}

/// Found by fuzzing: the LZW decoder turned each input chunk into one output chunk, so 64 KiB
/// of input (a run of one byte compresses about 1,300-fold) became one buffer of ~85 MB.
#[test]
fn lzw_small_input_decodes_in_bounded_chunks_not_one_huge_buffer() {
    runtime().block_on(async {
        let data = vec![b'a'; 32 << 20];
        let bomb = packed(Some(CompressionPolicy::Lzw), &data).await;
        assert!(bomb.len() < 64 << 10, "{}", bomb.len());
        // `run` fails on any output chunk above 64 KiB.
        let out = run(Some(CompressionPolicy::Lzw), &bomb, &[bomb.len()])
            .await
            .unwrap();
        assert_eq!(out.len(), data.len());
    });
}

/// Found by fuzzing: the LZW decoder could hold the last codes of a valid stream until asked
/// again, and the stream's end was then reported as truncation (one zero byte, or 196,353 of
/// them, could not be read back).
#[test]
fn lzw_stream_whose_last_codes_are_held_back_is_read_not_called_truncated() {
    runtime().block_on(async {
        for n in [1, 2, 15, 196_353] {
            let data = vec![0u8; n];
            let packed = packed(Some(CompressionPolicy::Lzw), &data).await;
            for sizes in [[packed.len()], [1], [7]] {
                let out = run(Some(CompressionPolicy::Lzw), &packed, &sizes).await;
                assert_eq!(out.unwrap(), data, "{n} zeros in chunks of {sizes:?}");
            }
        }
    });
}
