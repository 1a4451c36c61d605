//! The keys that encrypt and decrypt backups: a directory (a mounted Secret, or `secrets/<name>/`
//! locally) with one file per key, named by its key ID, and a file `active` naming the key new
//! objects are encrypted with. Older keys stay in the directory so older objects still decrypt;
//! rotating is adding a key and pointing `active` at it.
//!
//! The directory is read at every upload and download, so a rotated Secret takes effect without
//! restarting anything.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::EncryptionError;

/// The file naming the key new objects are encrypted with.
pub const ACTIVE_KEY_FILE: &str = "active";
/// Longest key ID (it is written into every object's header).
pub const MAX_KEY_ID_LEN: usize = 64;

/// A 256-bit key of AES-256-GCM.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", hex(&self.fingerprint()))
    }
}

impl Key {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }

    /// Parses a key file's content: 32 raw bytes, or (surrounding whitespace ignored) 64 hex
    /// digits or the base64 of 32 bytes, as `head -c 32 /dev/urandom`, `openssl rand -hex 32`
    /// and `openssl rand -base64 32` make them.
    pub fn parse(content: &[u8]) -> Option<Key> {
        if let Ok(raw) = <[u8; 32]>::try_from(content) {
            return Some(Key(raw));
        }
        let text = std::str::from_utf8(content).ok()?.trim();
        let decoded = if text.len() == 64 {
            (0..32)
                .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()?
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()?
        };
        <[u8; 32]>::try_from(decoded.as_slice()).ok().map(Key)
    }

    /// The key's bytes, for the cipher.
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Eight bytes that tell keys apart without revealing them (a domain-separated SHA-256),
    /// written into each object so a wrong key under the right ID is named as such.
    pub fn fingerprint(&self) -> [u8; 8] {
        let digest = Sha256::new()
            .chain_update(b"quorate backup key fingerprint\0")
            .chain_update(self.0)
            .finalize();
        let mut out = [0u8; 8];
        out.copy_from_slice(&digest[..8]);
        out
    }
}

/// The keys of one directory: the active one and every other one for decryption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyring {
    dir: PathBuf,
    active: String,
    keys: BTreeMap<String, Key>,
}

impl Keyring {
    /// Reads `dir`. Every regular file (symlinks followed, as in a mounted Secret; names starting
    /// with `.` skipped) but `active` is a key; `active` must name one of them.
    pub fn load(dir: &Path) -> Result<Keyring, EncryptionError> {
        let unreadable = |detail: String| EncryptionError::KeysUnreadable {
            dir: dir.display().to_string(),
            detail,
        };
        let entries = std::fs::read_dir(dir).map_err(|e| unreadable(e.to_string()))?;
        let mut keys = BTreeMap::new();
        let mut active = None;
        for entry in entries {
            let entry = entry.map_err(|e| unreadable(e.to_string()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || !path.is_file() {
                continue;
            }
            let content =
                std::fs::read(&path).map_err(|e| unreadable(format!("reading {name}: {e}")))?;
            if name == ACTIVE_KEY_FILE {
                active = Some(String::from_utf8_lossy(&content).trim().to_string());
                continue;
            }
            if name.len() > MAX_KEY_ID_LEN {
                return Err(unreadable(format!(
                    "key ID {name:?} is longer than {MAX_KEY_ID_LEN} characters"
                )));
            }
            let key = Key::parse(&content).ok_or_else(|| {
                unreadable(format!(
                    "{name} is not a 256-bit key: give 32 bytes, 64 hex digits or the base64 of 32 bytes (e.g. `openssl rand -hex 32`)"
                ))
            })?;
            keys.insert(name, key);
        }
        let Some(active) = active.filter(|a| !a.is_empty()) else {
            return Err(unreadable(format!(
                "there is no file {ACTIVE_KEY_FILE:?} naming the key to encrypt with (keys found: {})",
                list(keys.keys())
            )));
        };
        if !keys.contains_key(&active) {
            return Err(unreadable(format!(
                "{ACTIVE_KEY_FILE:?} names key {active:?}, which is not there (keys found: {})",
                list(keys.keys())
            )));
        }
        Ok(Keyring {
            dir: dir.to_path_buf(),
            active,
            keys,
        })
    }

    /// A keyring of the given keys (tests and benchmarks).
    pub fn new(active: &str, keys: impl IntoIterator<Item = (String, Key)>) -> Keyring {
        let keys: BTreeMap<String, Key> = keys.into_iter().collect();
        assert!(
            keys.contains_key(active),
            "the active key is one of the keys"
        );
        Keyring {
            dir: PathBuf::from("(in memory)"),
            active: active.to_string(),
            keys,
        }
    }

    /// The ID and key new objects are encrypted with.
    pub fn active(&self) -> (&str, &Key) {
        (&self.active, &self.keys[&self.active])
    }

    /// The key with ID `id`, if present.
    pub fn get(&self, id: &str) -> Option<&Key> {
        self.keys.get(id)
    }

    /// Where the keys were read from, for messages.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key IDs present, for messages.
    pub fn ids(&self) -> String {
        list(self.keys.keys())
    }
}

fn list<'a>(ids: impl Iterator<Item = &'a String>) -> String {
    let ids: Vec<&str> = ids.map(String::as_str).collect();
    if ids.is_empty() {
        "none".to_string()
    } else {
        ids.join(", ")
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_raw_hex_and_base64() {
        let raw = [7u8; 32];
        let hex_text = format!("{}\n", hex(&raw));
        let b64 = format!(
            "  {}\n",
            base64::engine::general_purpose::STANDARD.encode(raw)
        );
        for content in [&raw[..], hex_text.as_bytes(), b64.as_bytes()] {
            assert_eq!(Key::parse(content), Some(Key(raw)));
        }
        assert_eq!(Key::parse(b"short"), None);
        assert_eq!(Key::parse(&[1u8; 33]), None);
        assert_eq!(Key::parse("zz".repeat(32).as_bytes()), None);
    }

    #[test]
    fn fingerprints_tell_keys_apart() {
        assert_ne!(Key([1; 32]).fingerprint(), Key([2; 32]).fingerprint());
        assert_eq!(Key([1; 32]).fingerprint(), Key([1; 32]).fingerprint());
    }

    #[test]
    fn a_directory_loads_with_its_active_key_and_refuses_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let err = Keyring::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no file \"active\""), "{err}");
        std::fs::write(dir.path().join("k1"), hex(&[1; 32])).unwrap();
        std::fs::write(dir.path().join("active"), "k2\n").unwrap();
        let err = Keyring::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("names key \"k2\"") && err.contains("k1"),
            "{err}"
        );
        std::fs::write(dir.path().join("k2"), [2u8; 32]).unwrap();
        std::fs::write(dir.path().join(".hidden"), "not a key").unwrap();
        let ring = Keyring::load(dir.path()).unwrap();
        assert_eq!(ring.active().0, "k2");
        assert_eq!(ring.get("k1"), Some(&Key([1; 32])));
        std::fs::write(dir.path().join("k3"), "not a key").unwrap();
        let err = Keyring::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("k3 is not a 256-bit key"), "{err}");
    }
}
