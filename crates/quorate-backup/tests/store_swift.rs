//! The Swift store against a real OpenStack Swift (Debian's proxy, account, container and object
//! servers, with tempauth or behind a real Keystone v3): druid's Secret keys (as files and as
//! one JSON file; a password or an application credential), a backup of a real etcd (a full
//! snapshot large enough to go up as a Dynamic Large Object, and deltas) restored exactly, the
//! objects as etcd-backup-restore writes and reads them, listing, deletion with the segments,
//! and clear errors for wrong credentials, a wrong region, a missing container and missing keys.

mod restore_common;
mod support {
    pub mod s3;
}

use std::path::{Path, PathBuf};

use quorate_api::StoreSpec;
use quorate_backup::layout::SnapshotName;
use quorate_backup::restore::RestoreTarget;
use quorate_backup::store::{MIN_PART_SIZE, SnapStore, StoreError, StoreOptions};
use quorate_backup::store_restore::{StoreRestoreOptions, restore_from_store};
use quorate_testkit::{
    KEYSTONE_PASSWORD, KEYSTONE_PROJECT, KEYSTONE_REGION, SWIFT_KEY, SwiftServer,
};
use restore_common::*;
use support::s3::{body, read_all, sample_data, scenarios};

const PREFIX: &str = "etcd-main";

fn spec(container: &str, provider: &str) -> StoreSpec {
    StoreSpec {
        container: Some(container.to_string()),
        endpoint_override: None,
        prefix: PREFIX.to_string(),
        provider: Some(provider.to_string()),
        secret_ref: None,
    }
}

fn open(container: &str, provider: &str, secret: &Path) -> Result<SnapStore, StoreError> {
    let opts = StoreOptions {
        local_root: secret.to_path_buf(),
        secret_dir: Some(secret.to_path_buf()),
        encryption_keys: None,
    };
    SnapStore::open(&spec(container, provider), &opts)
}

/// etcd-backup-restore's Swift credentials as one JSON file.
fn json_secret(swift: &SwiftServer, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let json = serde_json::json!({
        "authURL": swift.auth_url,
        "domainName": "default",
        "tenantName": quorate_testkit::SWIFT_ACCOUNT,
        "username": quorate_testkit::SWIFT_USER,
        "password": SWIFT_KEY,
    });
    std::fs::write(dir.join("credentials.json"), json.to_string()).unwrap();
    dir.to_path_buf()
}

/// Puts incompressible values until the source's database passes `bytes`, then deletes them:
/// the history keeps the database that large while reads of the current state stay small.
async fn grow(source: &Source, bytes: usize) {
    let mut c = source.client.clone();
    let value = sample_data(3, 512 * 1024, 256);
    for i in 0..(bytes / value.len() + 1) {
        c.put(format!("big/{i:03}"), value.clone(), None)
            .await
            .unwrap();
    }
    c.delete(
        "big/",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_swift_backup_restores_exactly_and_matches_etcd_backup_restores_layout() {
    let Some(swift) = SwiftServer::start("backups") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = open(
        "backups",
        "Swift",
        &swift.write_secret(&dir.path().join("secret"), SWIFT_KEY),
    )
    .unwrap();
    assert_eq!(
        store.describe(),
        format!("swift://backups/{PREFIX} at {}", swift.auth_url)
    );
    store.check().await.unwrap();

    let source = Source::start().await;
    workload(&source.client, "before/").await;
    // More than two parts, so the full snapshot goes up in segments.
    grow(&source, 2 * MIN_PART_SIZE + 1).await;
    let (full_path, _, full_revision) = source.snapshot_file(dir.path()).await;
    let full_bytes = std::fs::read(&full_path).unwrap();
    assert!(full_bytes.len() > 2 * MIN_PART_SIZE, "{}", full_bytes.len());
    let capture = source.capture_from(full_revision + 1).await;
    workload(&source.client, "after/").await;
    let head = source.head().await;
    let events = capture.until(head).await;

    let full = store
        .upload(
            &SnapshotName::full(full_revision, now_unix() - 60, None),
            bytes_body(full_bytes.clone()),
        )
        .await
        .unwrap();
    assert_eq!(full.size, full_bytes.len() as u64);
    let mid = full_revision + (head - full_revision) / 2;
    let mut deltas = Vec::new();
    for (first, last) in [(full_revision + 1, mid), (mid + 1, head)] {
        let encoded = quorate_backup::delta::encode(&events_in(&events, first, last));
        let name = SnapshotName::incr(first, last, now_unix() - 30, None);
        deltas.push(store.upload(&name, bytes_body(encoded)).await.unwrap());
    }

    // What the container holds is what etcd-backup-restore writes: segments
    // `<key>/0000000001`… and a zero-byte manifest `<key>` naming them.
    let segments = swift.names(&format!("{}/", full.path));
    let parts = full_bytes.len().div_ceil(MIN_PART_SIZE);
    assert_eq!(
        segments,
        (1..=parts)
            .map(|i| format!("{}/{i:010}", full.path))
            .collect::<Vec<_>>()
    );
    let manifest = swift.raw("HEAD", &full.path, &[], b"");
    assert_eq!(manifest.status, 200, "{manifest:?}");
    assert_eq!(
        manifest.header("X-Object-Manifest"),
        Some(format!("backups/{}/", full.path).as_str())
    );
    let plain = swift.raw("GET", &full.path, &[], b"");
    assert!(
        plain.body == full_bytes,
        "a plain GET (etcd-backup-restore's read) returns the snapshot"
    );
    // Listed with their real sizes (Swift lists a manifest as 0 bytes), segments not as
    // snapshots.
    let listed = store.list().await.unwrap();
    let mut expected = vec![full.clone()];
    expected.extend(deltas.iter().cloned());
    assert_eq!(listed, expected);

    for (target_rev, expected) in [
        (RestoreTarget::Latest, None),
        (RestoreTarget::ToRevision(mid - 3), Some(mid - 3)),
    ] {
        let target = Target::new();
        let report = restore_from_store(
            &store,
            target_rev,
            target.identity(),
            &target.data_dir(),
            tools(),
            StoreRestoreOptions {
                keep_revision: true,
                ..StoreRestoreOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("restore to {expected:?}: {e}"));
        assert_eq!(report.restored_revision, expected.unwrap_or(head));
        let (_restored, client) = target.start().await;
        assert_same(
            &state_of(&client, None).await,
            &source.state(expected).await,
        );
    }

    // Garbage collection's delete takes the segments with the manifest.
    store.delete(&full).await.unwrap();
    assert_eq!(
        swift.names(&format!("{}/", full.path)),
        Vec::<String>::new()
    );
    assert_eq!(store.list().await.unwrap(), deltas);
    for d in &deltas {
        store.delete(d).await.unwrap();
    }
    assert_eq!(swift.names(&format!("{PREFIX}/")), Vec::<String>::new());
}

/// A large object exactly as etcd-backup-restore's Swift store writes it (segments, then a
/// manifest whose `X-Object-Manifest` has no trailing slash) is listed, read and deleted whole.
#[tokio::test]
async fn a_snapshot_written_as_etcd_backup_restore_writes_it_is_read_and_deleted() {
    let Some(swift) = SwiftServer::start("backups") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = open(
        "backups",
        "openstack",
        &json_secret(&swift, &dir.path().join("json")),
    )
    .unwrap();
    let name = SnapshotName::full(42, 1_700_000_000, None);
    let key = name.v2_key(PREFIX);
    let data = sample_data(11, 3 * 1024 * 1024 + 17, 256);
    for (i, chunk) in data.chunks(1024 * 1024).enumerate() {
        let put = swift.raw("PUT", &format!("{key}/{:010}", i + 1), &[], chunk);
        assert_eq!(put.status, 201, "{put:?}");
    }
    let manifest = format!("backups/{key}");
    let put = swift.raw("PUT", &key, &[("X-Object-Manifest", &manifest)], b"");
    assert_eq!(put.status, 201, "{put:?}");

    let listed = store.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, name);
    assert_eq!(listed[0].size, data.len() as u64);
    let got = read_all(store.download(&listed[0]).await.unwrap())
        .await
        .unwrap();
    assert!(got == data, "read back {} bytes that differ", got.len());
    store.delete(&listed[0]).await.unwrap();
    assert_eq!(swift.names(&format!("{PREFIX}/")), Vec::<String>::new());
}

#[tokio::test]
async fn swift_round_trips_every_compression_and_reports_what_is_wrong() {
    let Some(swift) = SwiftServer::start("backups") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let secret = swift.write_secret(&dir.path().join("secret"), SWIFT_KEY);
    let store = open("backups", "Swift", &secret).unwrap();
    scenarios::round_trip_every_compression(&store).await;
    scenarios::broken_body_leaves_nothing(&store).await;
    // No segment of the broken upload is left behind.
    assert_eq!(swift.names(""), Vec::<String>::new());

    // Markers: created once, then read back.
    assert_eq!(store.claim_unclaimed("one").await.unwrap(), "one");
    assert_eq!(store.claim_unclaimed("two").await.unwrap(), "one");

    // Archiving (a new chain in the prefix) copies server-side, a segmented snapshot too.
    let big_data = sample_data(12, MIN_PART_SIZE + 4096, 256);
    let big = store
        .upload(
            &SnapshotName::full(9, 1_700_000_000, None),
            body(&big_data, 65536),
        )
        .await
        .unwrap();
    let small = store
        .upload(
            &SnapshotName::incr(10, 12, 1_700_000_001, None),
            body(b"delta", 2),
        )
        .await
        .unwrap();
    assert_eq!(store.archive("old").await.unwrap(), 2);
    assert_eq!(store.list().await.unwrap(), vec![]);
    let archived = |p: &str| p.replacen(PREFIX, &format!("superseded-old-{PREFIX}"), 1);
    let got = swift.raw("GET", &archived(&big.path), &[], b"");
    assert!(
        got.body == big_data,
        "{} ({} bytes)",
        got.head,
        got.body.len()
    );
    assert_eq!(
        swift.raw("GET", &archived(&small.path), &[], b"").body,
        b"delta"
    );
    assert_eq!(swift.names(&format!("{}/", archived(&big.path))).len(), 2);
    // The originals' segments went with them.
    assert_eq!(swift.names(&format!("{PREFIX}/")), Vec::<String>::new());

    // Tokens the server stops accepting (as when they expire) are renewed: the old token is
    // refused, and the store carries on with a new one.
    swift.expire_tempauth_tokens();
    assert_eq!(swift.raw("HEAD", "", &[], b"").status, 401);
    assert_eq!(store.owner().await.unwrap().as_deref(), Some("one"));
    store.check().await.unwrap();

    // A wrong password: refused by the auth service, said so.
    let wrong = swift.write_secret(&dir.path().join("wrong"), "not-the-key");
    let e = open("backups", "Swift", &wrong)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
    assert!(e.to_string().contains("refused the credentials"), "{e}");

    // A container that does not exist.
    let e = open("missing", "Swift", &secret)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");
    // Uploading there fails the same way, not as "not found".
    let e = open("missing", "Swift", &secret)
        .unwrap()
        .upload(
            &SnapshotName::incr(1, 2, 1_700_000_000, None),
            body(b"x", 1),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::BucketMissing { .. }), "{e}");

    // A Secret without a key Swift needs is refused before any request, naming the key.
    std::fs::remove_file(secret.join("tenantName")).unwrap();
    let e = open("backups", "Swift", &secret).err().unwrap();
    assert!(e.to_string().contains("tenantName"), "{e}");
    // A password and an application credential together are refused, as etcd-backup-restore does.
    std::fs::write(secret.join("tenantName"), "test").unwrap();
    std::fs::write(secret.join("applicationCredentialSecret"), "s").unwrap();
    let e = open("backups", "Swift", &secret).err().unwrap();
    assert!(e.to_string().contains("keep one"), "{e}");
}

/// One small and one segmented snapshot go up, are listed, come back byte for byte, and are
/// deleted with their segments.
async fn round_trip(store: &SnapStore, swift: &SwiftServer) {
    let small = SnapshotName::incr(1, 5, 1_700_000_000, None);
    let big = SnapshotName::full(6, 1_700_000_001, None);
    let big_data = sample_data(5, MIN_PART_SIZE + 1000, 256);
    let s = store.upload(&small, body(b"keystone", 3)).await.unwrap();
    let b = store
        .upload(&big, body(&big_data, 64 * 1024))
        .await
        .unwrap();
    assert_eq!(store.list().await.unwrap(), vec![s.clone(), b.clone()]);
    let got = read_all(store.download(&b).await.unwrap()).await.unwrap();
    assert!(got == big_data, "read back {} bytes that differ", got.len());
    assert_eq!(
        read_all(store.download(&s).await.unwrap()).await.unwrap(),
        b"keystone"
    );
    store.delete(&s).await.unwrap();
    store.delete(&b).await.unwrap();
    assert_eq!(swift.names(""), Vec::<String>::new());
}

#[tokio::test]
async fn swift_behind_keystone_v3_takes_a_password_or_an_application_credential() {
    let Some(swift) = SwiftServer::start_with_keystone("backups") else {
        return;
    };
    assert!(swift.auth_url.ends_with("/v3"), "{}", swift.auth_url);
    let dir = tempfile::tempdir().unwrap();

    // druid's password Secret, with and without the region.
    let password = swift.write_secret(&dir.path().join("password"), KEYSTONE_PASSWORD);
    let store = open("backups", "openstack", &password).unwrap();
    store.check().await.unwrap();
    round_trip(&store, &swift).await;
    std::fs::write(password.join("region"), KEYSTONE_REGION).unwrap();
    open("backups", "Swift", &password)
        .unwrap()
        .check()
        .await
        .unwrap();

    // An application credential (scoped to the project when it was created).
    let app = swift.application_credential.clone().unwrap();
    let app_dir = dir.path().join("app");
    std::fs::create_dir_all(&app_dir).unwrap();
    for (key, value) in [
        ("authURL", swift.auth_url.as_str()),
        ("domainName", "Default"),
        ("tenantName", KEYSTONE_PROJECT),
        ("applicationCredentialID", &app.id),
        ("applicationCredentialName", &app.name),
        ("applicationCredentialSecret", &app.secret),
    ] {
        std::fs::write(app_dir.join(key), value).unwrap();
    }
    let store = open("backups", "Swift", &app_dir).unwrap();
    store.check().await.unwrap();
    round_trip(&store, &swift).await;

    // A wrong password and a wrong application credential secret: refused by Keystone.
    let wrong = swift.write_secret(&dir.path().join("wrong"), "not-the-password");
    std::fs::write(
        app_dir.join("applicationCredentialSecret"),
        "not-the-secret",
    )
    .unwrap();
    for secret in [&wrong, &app_dir] {
        let e = open("backups", "Swift", secret)
            .unwrap()
            .check()
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
        assert!(
            e.to_string().contains("Keystone v3 authentication")
                && e.to_string().contains("refused the credentials"),
            "{e}"
        );
    }

    // A region without Swift in the catalog.
    std::fs::write(password.join("region"), "RegionTwo").unwrap();
    let e = open("backups", "Swift", &password)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no public object-store endpoint in region \"RegionTwo\""),
        "{e}"
    );
}
