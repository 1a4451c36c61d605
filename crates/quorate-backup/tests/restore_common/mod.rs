//! Shared by the restore tests: a real source cluster, a live watch capturing its events as
//! delta snapshot events, delta objects cut from them, and comparison of every key between
//! the source and a restored member.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use quorate_backup::delta::{self, DeltaEvent, EVENT_DELETE, EVENT_PUT, EtcdEvent, KeyValue};
use quorate_backup::layout::SnapshotName;
use quorate_backup::restore::{
    DeltaContent, DeltaObject, EtcdTools, FullSnapshotInput, FullSnapshotSource, MemberIdentity,
    RestoreInputs, RestoreOptions, RestoreTarget, deltas_from_iter,
};
use quorate_etcd::{EtcdTimeouts, MemberClient};
use quorate_testkit::{
    EtcdMemberConfig, EtcdProcess, EtcdTestCluster, TempDir, etcd_binary, etcdctl_binary,
};
use tokio::io::AsyncWriteExt;

/// A one-member source cluster and a client to it.
pub struct Source {
    pub cluster: EtcdTestCluster,
    pub client: Client,
}

impl Source {
    pub async fn start() -> Source {
        let cluster = EtcdTestCluster::start(1).await;
        let client = connect(&cluster.member(0).client_url()).await;
        Source { cluster, client }
    }

    pub fn url(&self) -> String {
        self.cluster.member(0).client_url()
    }

    /// The current revision.
    pub async fn head(&self) -> i64 {
        head(&self.client).await
    }

    /// A full snapshot through the adapter, written to `dir/<name>`; returns its path, object
    /// name and revision (read from the file, so writes racing the snapshot do not matter).
    pub async fn snapshot_file(&self, dir: &Path) -> (PathBuf, String, i64) {
        let member = MemberClient::connect(&self.url(), None, EtcdTimeouts::default())
            .await
            .unwrap();
        let mut stream = member.snapshot().await.unwrap();
        let download = dir.join("snapshot.download");
        let mut file = tokio::fs::File::create(&download).await.unwrap();
        while let Some(chunk) = stream.next_chunk().await.unwrap() {
            file.write_all(&chunk).await.unwrap();
        }
        file.sync_all().await.unwrap();
        let status = std::process::Command::new(etcdctl_binary())
            .args(["snapshot", "status", "--write-out=json"])
            .arg(&download)
            .env_clear()
            .output()
            .unwrap();
        assert!(status.status.success(), "{status:?}");
        let revision =
            serde_json::from_slice::<serde_json::Value>(&status.stdout).unwrap()["revision"]
                .as_i64()
                .unwrap();
        let name = SnapshotName::full(revision, now_unix(), None).file_name();
        let path = dir.join(&name);
        std::fs::rename(&download, &path).unwrap();
        (path, name, revision)
    }

    /// Starts capturing every event from `revision` on.
    pub async fn capture_from(&self, revision: i64) -> Capture {
        Capture::start(self.client.clone(), revision).await
    }

    /// Every key at `revision` (or now).
    pub async fn state(&self, revision: Option<i64>) -> State {
        state_of(&self.client, revision).await
    }
}

pub async fn connect(url: &str) -> Client {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(20));
    Client::connect([url], Some(options)).await.unwrap()
}

pub async fn head(client: &Client) -> i64 {
    client
        .clone()
        .status()
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision()
}

pub fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// One key as etcd reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// All keys and the revision they were read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub revision: i64,
    pub keys: Vec<KeyState>,
}

impl State {
    pub fn get(&self, key: &str) -> Option<&KeyState> {
        self.keys.iter().find(|k| k.key == key)
    }
}

pub async fn state_of(client: &Client, revision: Option<i64>) -> State {
    let mut options = GetOptions::new().with_all_keys();
    if let Some(rev) = revision {
        options = options.with_revision(rev);
    }
    let resp = client.clone().get("", Some(options)).await.unwrap();
    State {
        revision: revision.unwrap_or_else(|| resp.header().unwrap().revision()),
        keys: resp
            .kvs()
            .iter()
            .map(|kv| KeyState {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                value: kv.value().to_vec(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                version: kv.version(),
                lease: kv.lease(),
            })
            .collect(),
    }
}

/// A live watch turning every event into a [`DeltaEvent`] stamped with the time it arrived
/// and, for leased keys, the lease's granted TTL (as quorate's capture records it).
pub struct Capture {
    events: Arc<Mutex<Vec<DeltaEvent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Capture {
    async fn start(client: Client, from: i64) -> Capture {
        let events = Arc::new(Mutex::new(Vec::new()));
        let mut watch = client
            .clone()
            .watch(
                "",
                Some(
                    WatchOptions::new()
                        .with_all_keys()
                        .with_start_revision(from),
                ),
            )
            .await
            .unwrap();
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut ttls = std::collections::HashMap::new();
            while let Ok(Some(resp)) = watch.message().await {
                let time = jiff::Timestamp::now().to_string();
                for event in resp.events() {
                    let kv = event.kv().expect("watch events carry a kv");
                    let lease_ttl = if kv.lease() != 0 {
                        let ttl = match ttls.get(&kv.lease()) {
                            Some(ttl) => *ttl,
                            None => {
                                let ttl = client
                                    .clone()
                                    .lease_time_to_live(kv.lease(), None)
                                    .await
                                    .map(|r| r.granted_ttl())
                                    .unwrap_or(0);
                                ttls.insert(kv.lease(), ttl);
                                ttl
                            }
                        };
                        (ttl > 0).then_some(ttl)
                    } else {
                        None
                    };
                    let kind = match event.event_type() {
                        EventType::Put => EVENT_PUT,
                        EventType::Delete => EVENT_DELETE,
                    };
                    sink.lock().unwrap().push(DeltaEvent {
                        etcd_event: EtcdEvent {
                            kind,
                            kv: Some(KeyValue {
                                key: kv.key().to_vec(),
                                create_revision: kv.create_revision(),
                                mod_revision: kv.mod_revision(),
                                version: kv.version(),
                                value: kv.value().to_vec(),
                                lease: kv.lease(),
                            }),
                            prev_kv: None,
                        },
                        time: time.clone(),
                        lease_ttl,
                    });
                }
            }
        });
        Capture { events, task }
    }

    /// The events captured once the watch has delivered revision `revision`.
    pub async fn until(&self, revision: i64) -> Vec<DeltaEvent> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            {
                let events = self.events.lock().unwrap();
                if events
                    .last()
                    .is_some_and(|e| e.etcd_event.mod_revision() >= revision)
                {
                    return events.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "the watch did not deliver revision {revision}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The events with revisions in `start..=last`.
pub fn events_in(events: &[DeltaEvent], start: i64, last: i64) -> Vec<DeltaEvent> {
    events
        .iter()
        .filter(|e| (start..=last).contains(&e.etcd_event.mod_revision()))
        .cloned()
        .collect()
}

/// A delta snapshot object of `events`, named for `start..=last`, in the encoded (checksummed)
/// form a bucket holds after decompression.
pub fn delta_object(events: Vec<DeltaEvent>, start: i64, last: i64) -> DeltaObject {
    DeltaObject {
        name: SnapshotName::incr(start, last, now_unix(), None).file_name(),
        content: DeltaContent::Raw(delta::encode(&events).into()),
    }
}

/// Cuts `events` into delta objects at the given last revisions (the first starts at
/// `start`).
pub fn cut(events: &[DeltaEvent], start: i64, lasts: &[i64]) -> Vec<DeltaObject> {
    let mut from = start;
    lasts
        .iter()
        .map(|&last| {
            let object = delta_object(events_in(events, from, last), from, last);
            from = last + 1;
            object
        })
        .collect()
}

/// A mixed workload under `prefix`: puts, overwrites, deletes, a range delete, multi-op txns,
/// keys on a long lease, and a lease revoked with its keys. Returns the long lease's ID.
pub async fn workload(client: &Client, prefix: &str) -> i64 {
    let mut c = client.clone();
    let k = |s: &str| format!("{prefix}{s}");
    for i in 0..5 {
        c.put(k(&format!("plain/{i}")), format!("v{i}"), None)
            .await
            .unwrap();
    }
    c.put(k("plain/0"), "overwritten", None).await.unwrap();
    c.put(k("plain/0"), "overwritten-again", None)
        .await
        .unwrap();
    c.delete(k("plain/1"), None).await.unwrap();
    c.put(k("plain/1"), "recreated", None).await.unwrap();
    c.txn(Txn::new().and_then(vec![
        TxnOp::put(k("txn/a"), "a", None),
        TxnOp::put(k("txn/b"), "b", None),
        TxnOp::delete(k("plain/2"), None),
    ]))
    .await
    .unwrap();
    for i in 0..3 {
        c.put(k(&format!("range/{i}")), "r", None).await.unwrap();
    }
    c.delete(
        k("range/"),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    let long = c.lease_grant(600, None).await.unwrap().id();
    c.put(
        k("leased/a"),
        "la",
        Some(PutOptions::new().with_lease(long)),
    )
    .await
    .unwrap();
    c.put(
        k("leased/b"),
        "lb",
        Some(PutOptions::new().with_lease(long)),
    )
    .await
    .unwrap();
    let doomed = c.lease_grant(600, None).await.unwrap().id();
    c.put(
        k("doomed/a"),
        "d",
        Some(PutOptions::new().with_lease(doomed)),
    )
    .await
    .unwrap();
    c.put(
        k("doomed/b"),
        "d",
        Some(PutOptions::new().with_lease(doomed)),
    )
    .await
    .unwrap();
    c.lease_revoke(doomed).await.unwrap();
    long
}

/// Grants a lease with an explicit ID.
pub async fn grant(client: &Client, id: i64, ttl: i64) {
    client
        .clone()
        .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
        .await
        .unwrap();
}

/// Where a restored member lives and how it is started.
pub struct Target {
    pub dir: TempDir,
    pub config: EtcdMemberConfig,
}

impl Target {
    pub fn new() -> Target {
        let dir = tempfile::Builder::new()
            .prefix("quorate-restore-")
            .tempdir()
            .unwrap();
        let config = EtcdMemberConfig::new("restored", dir.path());
        Target { dir, config }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.config.data_dir.clone()
    }

    pub fn identity(&self) -> MemberIdentity {
        MemberIdentity {
            name: self.config.name.clone(),
            peer_urls: vec![self.config.peer_url()],
            initial_cluster: format!("{}={}", self.config.name, self.config.peer_url()),
            cluster_token: "restored-cluster".to_string(),
        }
    }

    /// Restore inputs for this target from a snapshot file and delta objects.
    pub fn inputs(
        &self,
        full_path: &Path,
        full_name: &str,
        deltas: Vec<DeltaObject>,
        target: RestoreTarget,
    ) -> RestoreInputs {
        RestoreInputs {
            full: FullSnapshotInput {
                name: full_name.to_string(),
                source: FullSnapshotSource::File(full_path.to_path_buf()),
            },
            deltas: deltas_from_iter(deltas),
            member: self.identity(),
            data_dir: self.data_dir(),
            tools: tools(),
            target,
            options: RestoreOptions::default(),
        }
    }

    /// Starts etcd on the restored data.
    pub async fn start(&self) -> (EtcdProcess, Client) {
        let process = EtcdProcess::start_ready(self.config.clone(), Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("restored member did not start: {e}"));
        let client = connect(&process.client_url()).await;
        (process, client)
    }
}

pub fn tools() -> EtcdTools {
    EtcdTools::new(etcd_binary(), etcdctl_binary())
}

/// Asserts two states are identical key by key, with a readable difference.
pub fn assert_same(restored: &State, source: &State) {
    for key in &source.keys {
        assert_eq!(
            restored.get(&key.key),
            Some(key),
            "key {} differs (restored vs source)",
            key.key
        );
    }
    for key in &restored.keys {
        assert!(
            source.get(&key.key).is_some(),
            "restored has key {} the source does not have at revision {}",
            key.key,
            source.revision
        );
    }
    assert_eq!(restored.revision, source.revision, "head revision");
}

/// Lists the entries of a directory (names), sorted, to show it is untouched.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    names.sort();
    names
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            }
            out.push(path);
        }
    }
    out
}

/// A `Local` store of the restore tests (container `bucket`, prefix `main`, under `root`),
/// encrypting and decrypting with the keyring directory `keys` when given.
pub fn local_store(root: &Path, keys: Option<&Path>) -> quorate_backup::store::SnapStore {
    let spec = quorate_api::StoreSpec {
        container: Some("bucket".into()),
        endpoint_override: None,
        prefix: "main".into(),
        provider: Some("Local".into()),
        secret_ref: None,
    };
    let opts = quorate_backup::store::StoreOptions {
        local_root: root.to_path_buf(),
        secret_dir: None,
        encryption_keys: keys.map(Path::to_path_buf),
    };
    quorate_backup::store::SnapStore::open(&spec, &opts).unwrap()
}

/// `bytes` as an object body of one chunk.
pub fn bytes_body(
    bytes: Vec<u8>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Unpin {
    futures::stream::iter([Ok(bytes::Bytes::from(bytes))])
}
