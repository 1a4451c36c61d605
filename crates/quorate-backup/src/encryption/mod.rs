//! Client-side encryption of backups (quorate's extension; etcd-backup-restore has none): every
//! full and delta object is compressed first and then encrypted with AES-256-GCM (`ring`) in
//! chunks, streaming, so no snapshot is held in memory whole.
//!
//! An encrypted object is named like any other with `.enc` after its compression suffix
//! ([`crate::layout`]) and holds, in this order:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `QRTENC\0\x02` (format version 2; version 1 ends in `\x01`) |
//! | 1 + n | the key ID's length and the key ID (≤ 64 bytes of UTF-8) |
//! | 8 | the key's fingerprint ([`Key::fingerprint`]): a wrong key under the right ID is named |
//! | 4 | plaintext bytes per chunk, big-endian |
//! | 32 | a random salt, new for every object (version 1: a 7-byte random nonce prefix) |
//! | … | the chunks: each chunk's ciphertext followed by its 16-byte tag |
//!
//! Version 2 encrypts every object under its own key, HKDF-SHA256 of the configured key with
//! the object's salt (info `quorate backup object v2`), so nonces never repeat under one AES key
//! however many objects a key encrypts (a 256-bit salt collides after about 2¹²⁸ objects).
//! Version 1 used the configured key directly with a 56-bit random nonce prefix per object,
//! whose collision bound (2⁻³²) is passed after about 5,800 objects; it is still read, never
//! written.
//!
//! Chunk *i*'s nonce is the prefix (zero in version 2), *i* as 4 bytes big-endian and a
//! last-chunk flag (the STREAM
//! construction of Hoang, Reyhanitabar, Rogaway and Vizár), and every chunk authenticates the
//! header and the object's file name as associated data. So a chunk that is altered, moved,
//! dropped or cut off, an object truncated at a chunk boundary, a header edited to name another
//! key, and an object renamed to stand for another snapshot all fail authentication. The last
//! chunk may be short or empty.

mod keyring;

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use futures::stream::{self, StreamExt};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};
use thiserror::Error;

pub use keyring::{ACTIVE_KEY_FILE, Key, Keyring, MAX_KEY_ID_LEN};

use crate::compress::ByteStream;

/// Suffix of an encrypted object's name, after the compression suffix.
pub const ENCRYPTED_SUFFIX: &str = ".enc";
/// First bytes of every encrypted object but the version byte.
const MAGIC_BASE: &[u8; 7] = b"QRTENC\x00";
/// Bytes of the magic, version byte included.
const MAGIC_LEN: usize = 8;
/// Bytes of a version 2 object's salt.
const SALT: usize = 32;
/// HKDF's info for a version 2 object's key.
const OBJECT_KEY_INFO: &[u8] = b"quorate backup object v2";
/// Plaintext bytes per chunk written.
const CHUNK: usize = 64 * 1024;
/// Bytes of an AES-GCM tag.
const TAG: usize = 16;
/// Largest chunk a reader accepts from a header, so a damaged header cannot make it buffer
/// without bound.
const MAX_CHUNK: usize = 16 * 1024 * 1024;
/// Bytes of the per-object nonce prefix.
const PREFIX: usize = 7;

/// Why an encrypted object cannot be written or read; each names the object and the key ID.
#[derive(Debug, Error)]
pub enum EncryptionError {
    /// The key directory cannot be used.
    #[error("backup encryption keys in {dir} cannot be used: {detail}")]
    KeysUnreadable {
        /// The key directory.
        dir: String,
        /// What is wrong and what to do.
        detail: String,
    },
    /// The object is encrypted and no keys are configured here.
    #[error(
        "{object} is encrypted with key {key_id:?}, but no encryption keys are configured: name the key Secret with the annotation quorate.io/backup-encryption-secret (or give --encryption-key-dir)"
    )]
    NoKeys {
        /// The object key.
        object: String,
        /// The key ID in its header.
        key_id: String,
    },
    /// The object's key ID is not among the keys.
    #[error(
        "{object} is encrypted with key {key_id:?}, which {dir} does not hold (it holds: {held}); add that key (old keys stay for decryption)"
    )]
    KeyMissing {
        /// The object key.
        object: String,
        /// The key ID in its header.
        key_id: String,
        /// The key directory.
        dir: String,
        /// The key IDs it holds.
        held: String,
    },
    /// A key of the right ID but other bytes.
    #[error(
        "{object} was encrypted with another key than the one {dir} holds as {key_id:?} (fingerprint {expected}, found {found}); restore the original key under that ID"
    )]
    WrongKey {
        /// The object key.
        object: String,
        /// The key ID in its header.
        key_id: String,
        /// The key directory.
        dir: String,
        /// The fingerprint the object records.
        expected: String,
        /// The fingerprint of the key held.
        found: String,
    },
    /// Authentication failed: the bytes are not what was written.
    #[error(
        "{object} (key {key_id:?}) fails authentication at chunk {chunk}: it was altered, truncated or renamed; it cannot be used, restore from another snapshot"
    )]
    Tampered {
        /// The object key.
        object: String,
        /// The key ID in its header.
        key_id: String,
        /// Index of the chunk that failed.
        chunk: u32,
    },
    /// A clear object where keys are configured: whoever can write to the bucket could have
    /// put it there, so it is refused unless accepted for a migration window.
    #[error(
        "{object} is not encrypted, but encryption keys are configured ({dir}): anyone who can \
         write to the bucket could have put it there, so it is not used; if it is a backup made \
         before encryption was turned on, accept clear objects written before that time for \
         the migration (--accept-plaintext-before <time>){window}"
    )]
    Plaintext {
        /// The object key.
        object: String,
        /// The key directory.
        dir: String,
        /// The window in force, if any, as a sentence tail.
        window: String,
    },
    /// Not an object of this format (no or a damaged header).
    #[error("{object} is named as encrypted but {detail}; it cannot be used")]
    Malformed {
        /// The object key.
        object: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl EncryptionError {
    /// A stable reason for conditions and `lastErrors`.
    pub fn reason(&self) -> &'static str {
        match self {
            EncryptionError::KeysUnreadable { .. } => "BackupKeysUnreadable",
            EncryptionError::NoKeys { .. } | EncryptionError::KeyMissing { .. } => {
                "BackupKeyMissing"
            }
            EncryptionError::WrongKey { .. } => "BackupKeyWrong",
            EncryptionError::Tampered { .. }
            | EncryptionError::Malformed { .. }
            | EncryptionError::Plaintext { .. } => "SnapshotTampered",
        }
    }

    fn into_io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }
}

/// Seals or opens the chunks of one object in order.
struct ChunkCipher {
    key: LessSafeKey,
    prefix: [u8; PREFIX],
    /// Header bytes and the object's file name.
    aad: Vec<u8>,
    next: u32,
}

/// Where an object's nonces come from, by format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seed {
    /// Version 1: the configured key, this random nonce prefix.
    Prefix([u8; PREFIX]),
    /// Version 2: a key derived from the configured one with this salt, a zero prefix.
    Salt([u8; SALT]),
}

impl Seed {
    fn version(&self) -> u8 {
        match self {
            Seed::Prefix(_) => 1,
            Seed::Salt(_) => 2,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Seed::Prefix(p) => p,
            Seed::Salt(s) => s,
        }
    }
}

impl ChunkCipher {
    fn new(key: &Key, seed: Seed, header: &[u8], file_name: &str) -> ChunkCipher {
        let (unbound, prefix) = match seed {
            Seed::Prefix(prefix) => (
                UnboundKey::new(&AES_256_GCM, key.bytes()).expect("a 32-byte AES-256 key"),
                prefix,
            ),
            Seed::Salt(salt) => {
                let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(key.bytes());
                let okm = prk
                    .expand(&[OBJECT_KEY_INFO], &AES_256_GCM)
                    .expect("32 bytes are within HKDF-SHA256's output");
                (UnboundKey::from(okm), [0u8; PREFIX])
            }
        };
        let mut aad = header.to_vec();
        aad.extend_from_slice(file_name.as_bytes());
        ChunkCipher {
            key: LessSafeKey::new(unbound),
            prefix,
            aad,
            next: 0,
        }
    }

    /// The next chunk's nonce; `None` once 2³² chunks (256 TiB) are used up.
    fn nonce(&mut self, last: bool) -> Option<Nonce> {
        let mut n = [0u8; NONCE_LEN];
        n[..PREFIX].copy_from_slice(&self.prefix);
        n[PREFIX..PREFIX + 4].copy_from_slice(&self.next.to_be_bytes());
        n[NONCE_LEN - 1] = u8::from(last);
        self.next = self.next.checked_add(1)?;
        Some(Nonce::assume_unique_for_key(n))
    }

    fn seal(&mut self, mut chunk: BytesMut, last: bool) -> io::Result<Bytes> {
        let nonce = self
            .nonce(last)
            .ok_or_else(|| io::Error::other("object too large to encrypt (2^32 chunks)"))?;
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(&self.aad), &mut chunk)
            .map_err(|_| io::Error::other("encryption failed"))?;
        chunk.extend_from_slice(tag.as_ref());
        Ok(chunk.freeze())
    }

    /// Opens one sealed chunk; `Err` carries the failing chunk's index.
    fn open(&mut self, mut sealed: BytesMut, last: bool) -> Result<Bytes, u32> {
        let index = self.next;
        let nonce = self.nonce(last).ok_or(index)?;
        let len = self
            .key
            .open_in_place(nonce, Aad::from(&self.aad), &mut sealed)
            .map_err(|_| index)?
            .len();
        sealed.truncate(len);
        Ok(sealed.freeze())
    }
}

/// The header of an object encrypted with `key_id`/`key` from `seed`.
fn header(key_id: &str, key: &Key, chunk: usize, seed: &Seed) -> Vec<u8> {
    let mut h = Vec::with_capacity(MAGIC_LEN + 1 + key_id.len() + 8 + 4 + SALT);
    h.extend_from_slice(MAGIC_BASE);
    h.push(seed.version());
    h.push(u8::try_from(key_id.len()).expect("key IDs are at most 64 bytes"));
    h.extend_from_slice(key_id.as_bytes());
    h.extend_from_slice(&key.fingerprint());
    h.extend_from_slice(&u32::try_from(chunk).expect("chunk fits u32").to_be_bytes());
    h.extend_from_slice(seed.bytes());
    h
}

/// Encrypts `input` (already compressed) as object `file_name` with the keyring's active key.
pub fn encrypt<'a>(keys: &Keyring, file_name: &str, input: ByteStream<'a>) -> ByteStream<'a> {
    encrypt_in_chunks(keys, file_name, input, CHUNK, 2)
}

/// Writes format `version` (2; 1 only for tests of the reader).
fn encrypt_in_chunks<'a>(
    keys: &Keyring,
    file_name: &str,
    input: ByteStream<'a>,
    chunk: usize,
    version: u8,
) -> ByteStream<'a> {
    let (key_id, key) = keys.active();
    let mut random = [0u8; SALT];
    if SystemRandom::new().fill(&mut random).is_err() {
        return stream::once(async {
            Err(io::Error::other(
                "no randomness for an encryption nonce from the operating system",
            ))
        })
        .boxed();
    }
    let seed = if version == 1 {
        Seed::Prefix(random[..PREFIX].try_into().expect("7 bytes"))
    } else {
        Seed::Salt(random)
    };
    let head = header(key_id, key, chunk, &seed);
    let cipher = ChunkCipher::new(key, seed, &head, file_name);
    struct State<'a> {
        input: ByteStream<'a>,
        buf: BytesMut,
        head: Option<Bytes>,
        cipher: ChunkCipher,
        done: bool,
    }
    let state = State {
        input,
        buf: BytesMut::new(),
        head: Some(Bytes::from(head)),
        cipher,
        done: false,
    };
    stream::try_unfold(state, move |mut st| async move {
        if let Some(head) = st.head.take() {
            return Ok(Some((head, st)));
        }
        if st.done {
            return Ok(None);
        }
        loop {
            // A chunk is sealed as not-last only once more data is known to follow it.
            if st.buf.len() > chunk {
                let part = st.buf.split_to(chunk);
                let sealed = st.cipher.seal(part, false)?;
                return Ok(Some((sealed, st)));
            }
            match st.input.next().await {
                Some(Ok(bytes)) => st.buf.extend_from_slice(&bytes),
                Some(Err(e)) => return Err(e),
                None => {
                    let part = st.buf.split();
                    let sealed = st.cipher.seal(part, true)?;
                    st.done = true;
                    return Ok(Some((sealed, st)));
                }
            }
        }
    })
    .boxed()
}

/// What a reader learns from an object's header.
struct Header {
    len: usize,
    key_id: String,
    fingerprint: [u8; 8],
    chunk: usize,
    seed: Seed,
}

/// Parses the header at the start of `buf`: `Ok(None)` when more bytes are needed.
fn parse_header(buf: &[u8]) -> Result<Option<Header>, String> {
    let id_at = MAGIC_LEN + 1;
    if buf.len() < id_at {
        return Ok(None);
    }
    if &buf[..MAGIC_BASE.len()] != MAGIC_BASE {
        return Err("does not start with quorate's encryption header".to_string());
    }
    let version = buf[MAGIC_BASE.len()];
    let seed_len = match version {
        1 => PREFIX,
        2 => SALT,
        other => {
            return Err(format!(
                "its header says format version {other}, which this quorate does not read \
                 (versions 1 and 2); restore with a newer quorate"
            ));
        }
    };
    let id_len = usize::from(buf[MAGIC_LEN]);
    let len = id_at + id_len + 8 + 4 + seed_len;
    if buf.len() < len {
        return Ok(None);
    }
    let key_id = std::str::from_utf8(&buf[id_at..id_at + id_len])
        .map_err(|_| "its header's key ID is not UTF-8".to_string())?
        .to_string();
    let mut at = id_at + id_len;
    let mut fingerprint = [0u8; 8];
    fingerprint.copy_from_slice(&buf[at..at + 8]);
    at += 8;
    let chunk = u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
    at += 4;
    if chunk == 0 || chunk > MAX_CHUNK {
        return Err(format!("its header's chunk size {chunk} is out of range"));
    }
    let seed = if version == 1 {
        Seed::Prefix(buf[at..at + PREFIX].try_into().expect("7 bytes"))
    } else {
        Seed::Salt(buf[at..at + SALT].try_into().expect("32 bytes"))
    };
    Ok(Some(Header {
        len,
        key_id,
        fingerprint,
        chunk,
        seed,
    }))
}

/// Decrypts object `object` (its key, for messages; `file_name` is authenticated) with `keys`
/// (`None`: none are configured, so an encrypted object is an error naming its key ID).
/// Errors in the stream are `InvalidData` carrying an [`EncryptionError`].
pub fn decrypt<'a>(
    keys: Option<Keyring>,
    object: String,
    file_name: String,
    input: ByteStream<'a>,
) -> ByteStream<'a> {
    struct State<'a> {
        input: ByteStream<'a>,
        buf: BytesMut,
        opened: Option<(ChunkCipher, usize, String)>,
        keys: Option<Keyring>,
        object: String,
        file_name: String,
        done: bool,
    }
    let state = State {
        input,
        buf: BytesMut::new(),
        opened: None,
        keys,
        object,
        file_name,
        done: false,
    };
    stream::try_unfold(state, |mut st| async move {
        if st.done {
            return Ok(None);
        }
        loop {
            if st.opened.is_none() {
                let parsed = parse_header(&st.buf).map_err(|detail| {
                    EncryptionError::Malformed {
                        object: st.object.clone(),
                        detail,
                    }
                    .into_io()
                })?;
                if let Some(h) = parsed {
                    let cipher =
                        open_with(st.keys.as_ref(), &st.object, &st.file_name, &st.buf, &h)
                            .map_err(EncryptionError::into_io)?;
                    st.buf.advance(h.len);
                    st.opened = Some((cipher, h.chunk + TAG, h.key_id));
                    continue;
                }
            } else if let Some((cipher, sealed_len, key_id)) = st.opened.as_mut()
                && st.buf.len() > *sealed_len
            {
                let part = st.buf.split_to(*sealed_len);
                let plain = cipher.open(part, false).map_err(|chunk| {
                    EncryptionError::Tampered {
                        object: st.object.clone(),
                        key_id: key_id.clone(),
                        chunk,
                    }
                    .into_io()
                })?;
                return Ok(Some((plain, st)));
            }
            match st.input.next().await {
                Some(Ok(bytes)) => st.buf.extend_from_slice(&bytes),
                Some(Err(e)) => return Err(e),
                None => {
                    let object = st.object.clone();
                    let Some((cipher, _, key_id)) = st.opened.as_mut() else {
                        return Err(EncryptionError::Malformed {
                            object,
                            detail: "it is shorter than its header".to_string(),
                        }
                        .into_io());
                    };
                    let part = st.buf.split();
                    let plain = cipher.open(part, true).map_err(|chunk| {
                        EncryptionError::Tampered {
                            object,
                            key_id: key_id.clone(),
                            chunk,
                        }
                        .into_io()
                    })?;
                    st.done = true;
                    return Ok((!plain.is_empty()).then_some((plain, st)));
                }
            }
        }
    })
    .boxed()
}

/// The cipher for `object`, whose header is `h` (its bytes `raw`), if `keys` hold its key.
fn open_with(
    keys: Option<&Keyring>,
    object: &str,
    file_name: &str,
    raw: &[u8],
    h: &Header,
) -> Result<ChunkCipher, EncryptionError> {
    let Some(keys) = keys else {
        return Err(EncryptionError::NoKeys {
            object: object.to_string(),
            key_id: h.key_id.clone(),
        });
    };
    let Some(key) = keys.get(&h.key_id) else {
        return Err(EncryptionError::KeyMissing {
            object: object.to_string(),
            key_id: h.key_id.clone(),
            dir: keys.dir().display().to_string(),
            held: keys.ids(),
        });
    };
    if key.fingerprint() != h.fingerprint {
        return Err(EncryptionError::WrongKey {
            object: object.to_string(),
            key_id: h.key_id.clone(),
            dir: keys.dir().display().to_string(),
            expected: keyring::hex(&h.fingerprint),
            found: keyring::hex(&key.fingerprint()),
        });
    }
    Ok(ChunkCipher::new(key, h.seed, &raw[..h.len], file_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use proptest::prelude::*;

    fn ring(id: &str, byte: u8) -> Keyring {
        Keyring::new(id, [(id.to_string(), Key::from_bytes([byte; 32]))])
    }

    /// `data` as a stream of pieces of `piece` bytes.
    fn pieces(data: &[u8], piece: usize) -> ByteStream<'static> {
        let parts: Vec<io::Result<Bytes>> = data
            .chunks(piece.max(1))
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(parts).boxed()
    }

    fn collect(s: ByteStream<'_>) -> io::Result<Vec<u8>> {
        futures::executor::block_on(s.map_ok(|b| b.to_vec()).try_concat())
    }

    fn sealed(keys: &Keyring, name: &str, data: &[u8], chunk: usize) -> Vec<u8> {
        collect(encrypt_in_chunks(keys, name, pieces(data, 7), chunk, 2)).unwrap()
    }

    fn sealed_v1(keys: &Keyring, name: &str, data: &[u8], chunk: usize) -> Vec<u8> {
        collect(encrypt_in_chunks(keys, name, pieces(data, 7), chunk, 1)).unwrap()
    }

    fn opened(keys: Option<Keyring>, name: &str, object: &[u8]) -> Result<Vec<u8>, String> {
        collect(decrypt(
            keys,
            format!("p/v2/{name}"),
            name.to_string(),
            pieces(object, 5),
        ))
        .map_err(|e| e.to_string())
    }

    const NAME: &str = "Full-00000000-00000042-1700000000.gz.enc";

    proptest! {
        #[test]
        fn round_trips_any_data_in_any_pieces(
            data in proptest::collection::vec(any::<u8>(), 0..300),
            chunk in 1usize..40,
            piece in 1usize..50,
            version in 1u8..=2,
        ) {
            let keys = ring("k1", 1);
            let object =
                collect(encrypt_in_chunks(&keys, NAME, pieces(&data, piece), chunk, version))
                    .unwrap();
            prop_assert_eq!(object[7], version);
            prop_assert_eq!(opened(Some(keys), NAME, &object).unwrap(), data);
        }
    }

    #[test]
    fn chunk_sized_and_empty_inputs_round_trip_at_the_real_chunk_size() {
        let keys = ring("k1", 1);
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let object = collect(encrypt(&keys, NAME, pieces(&data, 10_000))).unwrap();
            assert_eq!(opened(Some(keys.clone()), NAME, &object).unwrap(), data);
        }
    }

    #[test]
    fn every_altered_byte_and_every_cut_is_refused_naming_object_and_key() {
        let keys = ring("k1", 1);
        let data: Vec<u8> = (0..100u8).collect();
        every_alteration_is_refused(&keys, &sealed(&keys, NAME, &data, 16));
        every_alteration_is_refused(&keys, &sealed_v1(&keys, NAME, &data, 16));
    }

    #[test]
    fn version_2_objects_have_their_own_key_and_version_1_objects_still_read() {
        let keys = ring("k1", 1);
        let v2 = sealed(&keys, NAME, b"data", 16);
        assert_eq!(&v2[..8], b"QRTENC\x00\x02");
        // magic, key ID length and "k1", fingerprint, chunk size, 32-byte salt, one chunk.
        assert_eq!(v2.len(), 8 + 1 + 2 + 8 + 4 + 32 + 4 + TAG);
        // The chunk is not sealed under the configured key with a zero prefix: opening it as
        // version 1 with that prefix fails.
        let mut as_v1 = v2[..8 + 1 + 2 + 8 + 4].to_vec();
        as_v1[7] = 1;
        as_v1.extend_from_slice(&[0u8; PREFIX]);
        as_v1.extend_from_slice(&v2[8 + 1 + 2 + 8 + 4 + 32..]);
        assert!(opened(Some(keys.clone()), NAME, &as_v1).is_err());
        let v1 = sealed_v1(&keys, NAME, b"data", 16);
        assert_eq!(&v1[..8], b"QRTENC\x00\x01");
        assert_eq!(opened(Some(keys.clone()), NAME, &v1).unwrap(), b"data");
        let mut v3 = v2.clone();
        v3[7] = 3;
        let err = opened(Some(keys), NAME, &v3).unwrap_err();
        assert!(err.contains("format version 3"), "{err}");
    }

    fn every_alteration_is_refused(keys: &Keyring, object: &[u8]) {
        for at in 0..object.len() {
            let mut bad = object.to_vec();
            bad[at] ^= 0x01;
            let err = opened(Some(keys.clone()), NAME, &bad).unwrap_err();
            assert!(err.contains("p/v2/Full-"), "byte {at}: {err}");
        }
        for cut in 0..object.len() {
            let err = opened(Some(keys.clone()), NAME, &object[..cut]).unwrap_err();
            assert!(
                err.contains("fails authentication") || err.contains("header"),
                "cut at {cut}: {err}"
            );
        }
        let mut longer = object.to_vec();
        longer.extend_from_slice(&[0; 20]);
        assert!(opened(Some(keys.clone()), NAME, &longer).is_err());
    }

    #[test]
    fn an_object_renamed_to_stand_for_another_snapshot_is_refused() {
        let keys = ring("k1", 1);
        let object = sealed(&keys, NAME, b"data", 16);
        let other = "Full-00000000-00000099-1700000000.gz.enc";
        let err = opened(Some(keys), other, &object).unwrap_err();
        assert!(err.contains("fails authentication at chunk 0"), "{err}");
    }

    #[test]
    fn missing_wrong_and_absent_keys_are_told_apart() {
        let object = sealed(&ring("k1", 1), NAME, b"data", 16);
        let err = opened(None, NAME, &object).unwrap_err();
        assert!(
            err.contains("key \"k1\"") && err.contains("no encryption keys are configured"),
            "{err}"
        );
        let err = opened(Some(ring("k2", 1)), NAME, &object).unwrap_err();
        assert!(
            err.contains("key \"k1\", which") && err.contains("holds: k2"),
            "{err}"
        );
        let err = opened(Some(ring("k1", 2)), NAME, &object).unwrap_err();
        assert!(
            err.contains("another key than the one") && err.contains("\"k1\""),
            "{err}"
        );
        let both = Keyring::new(
            "k2",
            [
                ("k1".to_string(), Key::from_bytes([1; 32])),
                ("k2".to_string(), Key::from_bytes([2; 32])),
            ],
        );
        assert_eq!(opened(Some(both), NAME, &object).unwrap(), b"data");
    }

    #[test]
    fn a_clear_object_named_encrypted_is_refused() {
        let err = opened(Some(ring("k1", 1)), NAME, b"\x1f\x8b plain gzip").unwrap_err();
        assert!(
            err.contains("does not start with quorate's encryption header"),
            "{err}"
        );
    }

    #[test]
    fn two_encryptions_of_the_same_data_differ() {
        let keys = ring("k1", 1);
        assert_ne!(
            sealed(&keys, NAME, b"same", 16),
            sealed(&keys, NAME, b"same", 16)
        );
    }
}
