//! ECS, OCS and OSS stores as druid configures them, against real S3 servers (s3s-fs in the test
//! process, and moto): each with its own Secret layout (ECS: `endpoint`, `accessKeyID`,
//! `secretAccessKey`; OCS: the same plus `region`, or one `*.json` file; OSS:
//! `storageEndpoint`, `accessKeyID`, `accessKeySecret`, or one `*.json` file), no
//! `endpointOverride`, snapshots round-trip; a wrong key is refused by s3s-fs (moto does not
//! check keys). OSS is reached through an S3 API here: Alibaba's own OSS is not tested.

mod support {
    pub mod s3;
}

use std::path::{Path, PathBuf};

use quorate_api::StoreSpec;
use quorate_backup::layout::SnapshotName;
use quorate_backup::store::{SnapStore, StoreError, StoreOptions};
use support::s3::{ACCESS_KEY, MotoServer, REGION, S3Target, S3sServer, body, read_all, scenarios};

const PREFIX: &str = "etcd-main";

/// A druid store spec naming `provider`, without `endpointOverride`: the endpoint comes from
/// the Secret, as with druid.
fn spec(target: &S3Target, provider: &str) -> StoreSpec {
    StoreSpec {
        container: Some(target.bucket.clone()),
        endpoint_override: None,
        prefix: PREFIX.to_string(),
        provider: Some(provider.to_string()),
        secret_ref: None,
    }
}

fn write(dir: &Path, entries: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for (key, value) in entries {
        std::fs::write(dir.join(key), value).unwrap();
    }
    dir.to_path_buf()
}

/// druid's ECS Secret for `target`: exactly its three keys.
fn ecs_secret(dir: &Path, target: &S3Target, secret_key: &str) -> PathBuf {
    write(
        dir,
        &[
            ("endpoint", &target.endpoint),
            ("accessKeyID", ACCESS_KEY),
            ("secretAccessKey", secret_key),
        ],
    )
}

/// The same with quorate's optional `region`: s3s-fs refuses to verify a signature for the
/// region etcd-backup-restore signs ECS requests for (`US-Standard` is not a region name in
/// AWS's form); moto accepts it.
fn ecs_secret_with_region(dir: &Path, target: &S3Target, secret_key: &str) -> PathBuf {
    let dir = ecs_secret(dir, target, secret_key);
    write(&dir, &[("region", REGION)])
}

/// etcd-backup-restore's OCS Secret for `target`, as keys.
fn ocs_secret(dir: &Path, target: &S3Target) -> PathBuf {
    let host = target.endpoint.trim_start_matches("http://");
    write(
        dir,
        &[
            // No scheme: disableSSL makes it http.
            ("endpoint", host),
            ("region", REGION),
            ("accessKeyID", ACCESS_KEY),
            ("secretAccessKey", support::s3::SECRET_KEY),
            ("disableSSL", "true"),
        ],
    )
}

/// The same as one JSON file.
fn ocs_json_secret(dir: &Path, target: &S3Target) -> PathBuf {
    let json = serde_json::json!({
        "endpoint": target.endpoint,
        "region": REGION,
        "accessKeyID": ACCESS_KEY,
        "secretAccessKey": support::s3::SECRET_KEY,
    });
    write(dir, &[("credentials.json", &json.to_string())])
}

/// etcd-backup-restore's OSS Secret for `target`, as keys.
fn oss_secret(dir: &Path, target: &S3Target, secret_key: &str) -> PathBuf {
    write(
        dir,
        &[
            ("storageEndpoint", &target.endpoint),
            ("accessKeyID", ACCESS_KEY),
            ("accessKeySecret", secret_key),
        ],
    )
}

/// The same as one JSON file.
fn oss_json_secret(dir: &Path, target: &S3Target) -> PathBuf {
    let json = serde_json::json!({
        "storageEndpoint": target.endpoint,
        "accessKeyID": ACCESS_KEY,
        "accessKeySecret": support::s3::SECRET_KEY,
    });
    write(dir, &[("credentials.json", &json.to_string())])
}

fn open(target: &S3Target, provider: &str, secret: &Path) -> Result<SnapStore, StoreError> {
    let opts = StoreOptions {
        local_root: secret.to_path_buf(),
        secret_dir: Some(secret.to_path_buf()),
        encryption_keys: None,
    };
    SnapStore::open(&spec(target, provider), &opts)
}

/// One small snapshot goes up, is listed, comes back byte for byte, and is deleted.
async fn small_round_trip(store: &SnapStore) {
    let name = SnapshotName::incr(1, 5, 1_700_000_000, None);
    let s = store.upload(&name, body(b"ecs-ocs", 7)).await.unwrap();
    let listed = store.list().await.unwrap();
    assert!(listed.iter().any(|l| l.path == s.path), "{listed:?}");
    let got = read_all(store.download(&s).await.unwrap()).await.unwrap();
    assert_eq!(got, b"ecs-ocs");
    store.delete(&s).await.unwrap();
}

#[tokio::test]
async fn ecs_and_ocs_secrets_reach_s3s_fs() {
    let server = S3sServer::start("backups");
    let target = server.target();
    let dir = tempfile::tempdir().unwrap();

    let mut secrets: Vec<(&str, PathBuf)> = ["dell", "ECS"]
        .into_iter()
        .map(|p| {
            let secret =
                ecs_secret_with_region(&dir.path().join(p), target, support::s3::SECRET_KEY);
            (p, secret)
        })
        .collect();
    secrets.push((
        "openshift",
        ocs_secret(&dir.path().join("ocs-keys"), target),
    ));
    secrets.push(("OCS", ocs_json_secret(&dir.path().join("ocs-json"), target)));
    secrets.push((
        "alicloud",
        oss_secret(
            &dir.path().join("oss-keys"),
            target,
            support::s3::SECRET_KEY,
        ),
    ));
    secrets.push(("OSS", oss_json_secret(&dir.path().join("oss-json"), target)));
    for (provider, secret) in secrets {
        let store = open(target, provider, &secret).unwrap();
        assert_eq!(
            store.describe(),
            format!("s3://backups/{PREFIX} at {}", target.endpoint)
        );
        store.check().await.unwrap();
        small_round_trip(&store).await;
    }

    let store = open(
        target,
        "ECS",
        &ecs_secret_with_region(
            &dir.path().join("ecs-full"),
            target,
            support::s3::SECRET_KEY,
        ),
    )
    .unwrap();
    scenarios::round_trip_every_compression(&store).await;

    // The server checks the keys: a wrong secret key is refused, so the keys above were used.
    let wrong = ecs_secret_with_region(&dir.path().join("wrong"), target, "not-the-key");
    let e = open(target, "ECS", &wrong)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");
    let wrong = oss_secret(&dir.path().join("oss-wrong"), target, "not-the-key");
    let e = open(target, "OSS", &wrong)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::AccessDenied { .. }), "{e}");

    // A Secret without a key the provider needs is refused before any request, naming it.
    let partial = write(&dir.path().join("partial"), &[("accessKeyID", ACCESS_KEY)]);
    for (provider, key) in [
        ("ECS", "endpoint"),
        ("OCS", "endpoint"),
        ("OSS", "storageEndpoint"),
    ] {
        let e = open(target, provider, &partial).err().unwrap();
        assert!(
            e.to_string().contains(key) && e.to_string().contains(provider),
            "{e}"
        );
    }
    // And without a Secret at all.
    let opts = StoreOptions {
        local_root: dir.path().to_path_buf(),
        secret_dir: None,
        encryption_keys: None,
    };
    let e = SnapStore::open(&spec(target, "ECS"), &opts).err().unwrap();
    assert!(e.to_string().contains("secretRef"), "{e}");
}

#[tokio::test]
async fn ecs_and_ocs_secrets_reach_moto() {
    let Some(moto) = MotoServer::start("backups") else {
        return;
    };
    let target = moto.target();
    let dir = tempfile::tempdir().unwrap();
    // druid's ECS Secret exactly: requests signed for `US-Standard`, as etcd-backup-restore's.
    for (provider, secret) in [
        (
            "ECS",
            ecs_secret(&dir.path().join("ecs"), target, support::s3::SECRET_KEY),
        ),
        ("OCS", ocs_secret(&dir.path().join("ocs-keys"), target)),
        ("OCS", ocs_json_secret(&dir.path().join("ocs-json"), target)),
        (
            "OSS",
            oss_secret(&dir.path().join("oss"), target, support::s3::SECRET_KEY),
        ),
    ] {
        let store = open(target, provider, &secret).unwrap();
        store.check().await.unwrap();
        small_round_trip(&store).await;
    }
}
