//! Encrypted backups through the store, on a local directory and a real S3 server (s3s-fs):
//! what is stored is never the clear data, every object comes back byte for byte with the
//! keys, keys rotate, and a missing, wrong or unreadable key and a tampered object are each a
//! clear error naming the object and the key ID.

mod support {
    pub mod s3;
}

use std::path::{Path, PathBuf};

use bytes::Bytes;
use object_store::ObjectStoreExt;
use quorate_api::{CompressionPolicy, StoreSpec};
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions, StoredSnapshot};
use support::s3::{S3sServer, body, read_all, sample_data, scenarios::download_error};

const HEX_1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const HEX_2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// A key directory holding `keys` (ID, hex) with `active` naming the first.
fn key_dir(parent: &Path, name: &str, keys: &[(&str, &str)]) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (id, hex) in keys {
        std::fs::write(dir.join(id), format!("{hex}\n")).unwrap();
    }
    std::fs::write(dir.join("active"), keys[0].0).unwrap();
    dir
}

fn local(root: &Path, keys: Option<PathBuf>) -> SnapStore {
    let spec = StoreSpec {
        container: Some("backups".to_string()),
        endpoint_override: None,
        prefix: "etcd-main".to_string(),
        provider: Some("Local".to_string()),
        secret_ref: None,
    };
    let opts = StoreOptions {
        local_root: root.to_path_buf(),
        secret_dir: None,
        encryption_keys: keys,
    };
    SnapStore::open(&spec, &opts).unwrap()
}

/// Uploads a 12 MiB full snapshot (multipart on S3) and a delta, gzip and uncompressed, and
/// checks names and downloads; returns what was stored with its data.
async fn round_trip(store: &SnapStore) -> Vec<(StoredSnapshot, Vec<u8>)> {
    let full_data = sample_data(7, 12 * 1024 * 1024, 256);
    let delta_data = sample_data(8, 200_000, 4);
    let mut stored = Vec::new();
    for (i, compression) in [None, Some(CompressionPolicy::Gzip)]
        .into_iter()
        .enumerate()
    {
        let i = i as i64;
        let full = SnapshotName::full(1000 * (i + 1), 1_700_000_000 + i, compression);
        let incr = SnapshotName::incr(
            1000 * (i + 1) + 1,
            1000 * (i + 1) + 9,
            1_700_000_100 + i,
            compression,
        );
        for (name, data) in [(full, &full_data), (incr, &delta_data)] {
            let s = store.upload(&name, body(data, 100_000)).await.unwrap();
            assert!(s.name.encrypted && s.path.ends_with(".enc"), "{}", s.path);
            assert_eq!(
                (s.name.last_revision, s.name.compression),
                (name.last_revision, compression)
            );
            stored.push((s, data.clone()));
        }
    }
    let mut listed = store.list().await.unwrap();
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    let mut expected: Vec<StoredSnapshot> = stored.iter().map(|(s, _)| s.clone()).collect();
    expected.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(listed, expected, "listing parses the .enc names back");
    for (s, data) in &stored {
        let got = read_all(store.download(s).await.unwrap()).await.unwrap();
        assert!(got == *data, "{} came back different", s.path);
    }
    stored
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn reason_of(e: &StoreError) -> &'static str {
    e.reason()
}

#[tokio::test]
async fn a_directory_holds_only_ciphertext_and_everything_comes_back() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = key_dir(tmp.path(), "keys", &[("k1", HEX_1)]);
    let store = local(tmp.path(), Some(keys));
    let stored = round_trip(&store).await;
    for (s, data) in &stored {
        let file = std::fs::read(tmp.path().join("backups").join(&s.path)).unwrap();
        assert!(
            file.starts_with(b"QRTENC\0\x02\x02k1"),
            "{}: header",
            s.path
        );
        assert!(
            !contains(&file, &data[5000..5064]),
            "{}: clear data stored",
            s.path
        );
    }
    // A compressed object is compressed before it is encrypted: small.
    let gz_delta = stored
        .iter()
        .find(|(s, _)| s.name.compression.is_some() && s.name.start_revision > 0)
        .unwrap();
    assert!(gz_delta.0.size < 200_000 / 2, "{} bytes", gz_delta.0.size);
}

#[tokio::test]
async fn an_s3_bucket_holds_only_ciphertext_and_everything_comes_back() {
    let server = S3sServer::start("backups");
    let tmp = tempfile::tempdir().unwrap();
    let secret = server.target().write_secret(&tmp.path().join("secret"));
    let keys = key_dir(tmp.path(), "keys", &[("k1", HEX_1)]);
    let opts = StoreOptions {
        local_root: tmp.path().to_path_buf(),
        secret_dir: Some(secret),
        encryption_keys: Some(keys),
    };
    let store = SnapStore::open(&server.target().store_spec("etcd-main"), &opts).unwrap();
    let stored = round_trip(&store).await;
    let raw = server.target().raw_client();
    for (s, data) in &stored {
        let object = raw
            .get(&s.path.as_str().into())
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(object.starts_with(b"QRTENC"), "{}", s.path);
        assert!(
            !contains(&object, &data[5000..5064]),
            "{}: clear data stored",
            s.path
        );
    }
    // A byte changed in the bucket: the download fails naming the object and the key.
    let (victim, _) = &stored[0];
    let object = raw
        .get(&victim.path.as_str().into())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut damaged = object.to_vec();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x40;
    raw.put(&victim.path.as_str().into(), Bytes::from(damaged).into())
        .await
        .unwrap();
    let e = download_error(&store, victim).await;
    assert_eq!(reason_of(&e), "SnapshotTampered", "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&victim.path) && text.contains("key \"k1\""),
        "{text}"
    );
}

#[tokio::test]
async fn keys_rotate_and_each_key_problem_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let first = key_dir(tmp.path(), "first", &[("k1", HEX_1)]);
    let old = local(tmp.path(), Some(first.clone()))
        .upload(
            &SnapshotName::full(10, 1_700_000_000, None),
            body(b"old data", 4),
        )
        .await
        .unwrap();
    // Rotation: k2 becomes active, k1 stays for reading.
    let rotated = key_dir(tmp.path(), "rotated", &[("k2", HEX_2), ("k1", HEX_1)]);
    let store = local(tmp.path(), Some(rotated));
    let new = store
        .upload(
            &SnapshotName::full(20, 1_700_000_100, None),
            body(b"new data", 4),
        )
        .await
        .unwrap();
    let file = std::fs::read(tmp.path().join("backups").join(&new.path)).unwrap();
    // Format version 2 (a key per object from a random salt), then the key ID "k2".
    assert!(file.starts_with(b"QRTENC\0\x02\x02k2"));
    for (s, data) in [(&old, &b"old data"[..]), (&new, &b"new data"[..])] {
        assert_eq!(
            read_all(store.download(s).await.unwrap()).await.unwrap(),
            data
        );
    }

    // Only the new key: the old object names the key it needs.
    let only_new = key_dir(tmp.path(), "only-new", &[("k2", HEX_2)]);
    let e = download_error(&local(tmp.path(), Some(only_new)), &old).await;
    assert_eq!(reason_of(&e), "BackupKeyMissing");
    assert!(
        e.to_string().contains("key \"k1\"") && e.to_string().contains("holds: k2"),
        "{e}"
    );
    // Another key under the same ID.
    let wrong = key_dir(tmp.path(), "wrong", &[("k1", HEX_2)]);
    let e = download_error(&local(tmp.path(), Some(wrong)), &old).await;
    assert_eq!(reason_of(&e), "BackupKeyWrong", "{e}");
    assert!(e.to_string().contains(&old.path), "{e}");
    // No keys configured at all.
    let e = download_error(&local(tmp.path(), None), &old).await;
    assert_eq!(reason_of(&e), "BackupKeyMissing");
    assert!(
        e.to_string().contains("no encryption keys are configured"),
        "{e}"
    );
    // Keys that cannot be read: the upload fails and nothing is written (never in clear).
    let before = store.list().await.unwrap();
    let missing = local(tmp.path(), Some(tmp.path().join("no-such-dir")));
    let e = missing
        .upload(
            &SnapshotName::full(30, 1_700_000_200, None),
            body(b"secret", 4),
        )
        .await
        .unwrap_err();
    assert_eq!(reason_of(&e), "BackupKeysUnreadable", "{e}");
    assert!(e.to_string().contains("no-such-dir"), "{e}");
    assert_eq!(store.list().await.unwrap(), before);
}

#[tokio::test]
async fn a_copy_into_an_encrypting_store_encrypts_and_encrypted_objects_copy_as_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let clear = local(&tmp.path().join("clear"), None);
    let plain = clear
        .upload(
            &SnapshotName::full(10, 1_700_000_000, Some(CompressionPolicy::Gzip)),
            body(b"plain data", 3),
        )
        .await
        .unwrap();
    assert!(!plain.name.encrypted);
    let keys = key_dir(tmp.path(), "keys", &[("k1", HEX_1)]);
    let target = local(&tmp.path().join("target"), Some(keys.clone()));
    let copied = clear.copy_to(&plain, &target).await.unwrap();
    assert!(
        copied.name.encrypted && copied.path.ends_with(".gz.enc"),
        "{}",
        copied.path
    );
    assert_eq!(
        read_all(target.download(&copied).await.unwrap())
            .await
            .unwrap(),
        b"plain data"
    );
    // An encrypted object copied into a store without keys stays encrypted, readable with them.
    let third = local(&tmp.path().join("third"), None);
    let again = target.copy_to(&copied, &third).await.unwrap();
    assert_eq!(again.name, copied.name);
    let third_with_keys = local(&tmp.path().join("third"), Some(keys));
    assert_eq!(
        read_all(third_with_keys.download(&again).await.unwrap())
            .await
            .unwrap(),
        b"plain data"
    );
}
