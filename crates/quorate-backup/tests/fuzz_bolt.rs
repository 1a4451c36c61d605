//! Fuzzing quorate's bbolt reader (`restore::bolt`) with databases damaged as a writer of the
//! bucket could: bytes changed anywhere (page headers, element headers, branch children, meta
//! pages with their checksum recomputed or not) and files cut short. Every file is answered
//! promptly, without a panic or a stack overflow; a refusal names the object; a file that
//! passes [`bolt::check`] can be read whole.

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use quorate_backup::restore::bolt::{self, BoltReader, BoltWriter};

const PAGE: usize = 4096;
const OBJECT: &str = "main/v2/Full-00000000-00000042-1700000000.gz";

/// A small real database: two buckets, one with branch pages, leaves and an overflow value.
fn database(dir: &Path) -> Vec<u8> {
    let path = dir.join("good.db");
    let mut w = BoltWriter::create(&path, PAGE).unwrap();
    let mut keys = w.bucket(b"key", 3);
    for i in 0..2_000u32 {
        keys.put(&mut w, &i.to_be_bytes(), format!("value {i}").as_bytes())
            .unwrap();
    }
    keys.put(&mut w, &u32::MAX.to_be_bytes(), &[7u8; 9_000])
        .unwrap();
    keys.finish(&mut w).unwrap();
    let mut meta = w.bucket(b"meta", 0);
    meta.put(&mut w, b"consistent_index", &5u64.to_be_bytes())
        .unwrap();
    meta.finish(&mut w).unwrap();
    w.finish(9).unwrap();
    std::fs::read(path).unwrap()
}

/// Reads every key of every bucket; the count, or the error text.
fn read_all(path: &Path) -> Result<usize, String> {
    let reader = BoltReader::open_as(path, OBJECT).map_err(|e| e.to_string())?;
    let mut n = 0;
    for bucket in reader.buckets().map_err(|e| e.to_string())? {
        reader
            .for_each(&bucket, &mut |_, _| {
                n += 1;
                Ok(())
            })
            .map_err(|e| e.to_string())?;
    }
    Ok(n)
}

#[derive(Clone, Debug)]
enum Damage {
    /// A byte anywhere.
    Byte(usize, u8),
    /// A little-endian u64 at a page's offset (IDs, children, counts, sizes).
    Word(usize, usize, u64),
    /// The file cut at this length.
    Cut(usize),
}

fn damage(len: usize) -> impl Strategy<Value = Damage> {
    let pages = len / PAGE;
    prop_oneof![
        (0..len, any::<u8>()).prop_map(|(at, b)| Damage::Byte(at, b)),
        (
            0..pages,
            0usize..64,
            prop_oneof![
                any::<u64>(),
                0u64..64,
                Just(u64::from(u32::MAX)),
                Just(u64::MAX)
            ]
        )
            .prop_map(|(page, at, v)| Damage::Word(page, at, v)),
        (0..len).prop_map(Damage::Cut),
    ]
}

fn apply(bytes: &mut Vec<u8>, d: &Damage) {
    match *d {
        Damage::Byte(at, b) => bytes[at] = b,
        Damage::Word(page, at, v) => {
            let at = page * PAGE + at;
            let end = (at + 8).min(bytes.len());
            bytes[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
        }
        Damage::Cut(len) => bytes.truncate(len),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn damaged_databases_are_refused_or_read_never_crash(
        damages in proptest::collection::vec(damage(40 * PAGE), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let good = database(dir.path());
        let mut bytes = good.clone();
        for d in &damages {
            if let Damage::Byte(at, _) | Damage::Cut(at) = d && *at >= bytes.len() {
                continue;
            }
            if let Damage::Word(page, _, _) = d && page * PAGE >= bytes.len() {
                continue;
            }
            apply(&mut bytes, d);
        }
        let path = dir.path().join("damaged.db");
        std::fs::write(&path, &bytes).unwrap();
        let started = Instant::now();
        match bolt::check(&path, OBJECT) {
            Ok(()) => {
                read_all(&path).unwrap();
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.contains(OBJECT), "{}", text);
            }
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn the_undamaged_database_passes_and_reads_whole() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = database(dir.path());
    assert!(bytes.len() > 20 * PAGE, "{} bytes", bytes.len());
    let path = dir.path().join("good.db");
    bolt::check(&path, OBJECT).unwrap();
    assert_eq!(read_all(&path), Ok(2_002));
}
