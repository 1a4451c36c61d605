//! Requests without the cluster's credential cost no work: the router is built with a
//! coordination that counts every call, so a test sees that a tokenless or wrong-token
//! request to `/snapshot/full|delta` reads no Secret, no lease and asks for no snapshot, and
//! that `/snapshot/latest` (open, as etcd-backup-restore serves it) reads no Secret and lists
//! the bucket at most once per [`LATEST_TTL`] however often it is asked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use quorate_agent::SharedState;
use quorate_agent::backup::BackupRequest;
use quorate_agent::http::{Http, LATEST_TTL, TOKEN_REREAD, router};
use quorate_api::backup::StoreSpec;
use quorate_coord::file::FileCoordination;
use quorate_coord::{CoordError, Coordination};
use quorate_core::cluster_config::{BackupConfig, ClusterConfig, EtcdSettings};
use quorate_core::lease::{MemberLease, SnapshotLease};
use tokio::sync::mpsc;
use tower::ServiceExt;

/// File coordination, counting the calls by method.
#[derive(Clone)]
struct Counting {
    inner: FileCoordination,
    calls: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Counting {
    fn count(&self, what: &'static str) {
        *self.calls.lock().unwrap().entry(what).or_default() += 1;
    }

    fn calls(&self, what: &str) -> usize {
        self.calls.lock().unwrap().get(what).copied().unwrap_or(0)
    }
}

impl Coordination for Counting {
    async fn cluster_config(&self) -> Result<ClusterConfig, CoordError> {
        self.count("cluster_config");
        self.inner.cluster_config().await
    }
    async fn member_lease(&self, name: &str) -> Result<Option<MemberLease>, CoordError> {
        self.count("member_lease");
        self.inner.member_lease(name).await
    }
    async fn member_leases(&self) -> Result<Vec<MemberLease>, CoordError> {
        self.count("member_leases");
        self.inner.member_leases().await
    }
    async fn put_member_lease(&self, lease: &MemberLease) -> Result<(), CoordError> {
        self.count("put_member_lease");
        self.inner.put_member_lease(lease).await
    }
    async fn snapshot_lease(&self, name: &str) -> Result<Option<SnapshotLease>, CoordError> {
        self.count("snapshot_lease");
        self.inner.snapshot_lease(name).await
    }
    async fn put_snapshot_lease(&self, lease: &SnapshotLease) -> Result<(), CoordError> {
        self.count("put_snapshot_lease");
        self.inner.put_snapshot_lease(lease).await
    }
    async fn secret_data(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, CoordError> {
        self.count("secret_data");
        self.inner.secret_data(name).await
    }
}

/// A one-member configuration with a token Secret `agent-token` and a `Local` bucket under
/// `dir`.
fn config(dir: &std::path::Path) -> ClusterConfig {
    ClusterConfig {
        cluster_name: "guarded".into(),
        namespace: "default".into(),
        cluster_token: "guarded-1".into(),
        leaving: Vec::new(),
        bootstrap_members: Vec::new(),
        members: Vec::new(),
        listen_host: "127.0.0.1".into(),
        etcd_version: quorate_api::EtcdVersion::V3_5,
        etcd_version_target: None,
        etcd: EtcdSettings {
            quota_backend_bytes: 1 << 30,
            snapshot_count: 10_000,
            auto_compaction_mode: "periodic".into(),
            auto_compaction_retention: "30m".into(),
            enable_grpc_gateway: false,
            metrics: "basic".into(),
            raft_heartbeat_millis: 100,
            election_timeout_millis: 1000,
        },
        client_tls: None,
        peer_tls: None,
        agent_tls: None,
        secret_files: Vec::new(),
        heartbeat_millis: 500,
        backup: Some(BackupConfig {
            spec: quorate_api::BackupSpec {
                store: Some(StoreSpec {
                    provider: Some("Local".into()),
                    container: Some("bucket".into()),
                    prefix: "guarded".into(),
                    ..StoreSpec::default()
                }),
                ..Default::default()
            },
            local_root: dir.join("backups").display().to_string(),
            secret_dir: None,
            full_snapshot_lease: "guarded-full-snap".into(),
            delta_snapshot_lease: "guarded-delta-snap".into(),
            cluster_uid: "uid".into(),
            adopt_foreign_backups: false,
            new_chain_request: None,
            encryption_secret: None,
            encryption_key_dir: None,
            accept_plaintext_before: None,
        }),
        recovery_request: None,
        maintenance: Default::default(),
        agent_token_secret: Some("agent-token".into()),
        hibernation_request: None,
    }
}

async fn status(app: &axum::Router, path: &str, token: Option<&str>) -> StatusCode {
    let mut request = Request::builder().uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
        .status()
}

#[tokio::test]
async fn unauthorized_snapshot_requests_read_no_secret_and_list_no_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let file = FileCoordination::new(dir.path());
    file.write_cluster_config(&config(dir.path())).unwrap();
    let secret = dir.path().join("secrets/agent-token");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("token"), "the-right-token").unwrap();
    let coord = Counting {
        inner: file,
        calls: Default::default(),
    };
    let (backups, mut requests) = mpsc::channel::<BackupRequest>(4);
    let state = SharedState::default();
    state.update(|s| s.is_leader = true);
    let app = router(Http {
        state,
        backups,
        coord: coord.clone(),
        guard: Default::default(),
    });
    let untouched = |coord: &Counting| {
        for what in [
            "secret_data",
            "member_lease",
            "member_leases",
            "snapshot_lease",
            "put_member_lease",
            "put_snapshot_lease",
        ] {
            assert_eq!(coord.calls(what), 0, "{what}");
        }
    };

    // No token: refused before any Secret, lease or bucket is read.
    for path in [
        "/snapshot/full",
        "/snapshot/full?final=true",
        "/snapshot/delta",
    ] {
        for token in [None, Some(""), Some("   ")] {
            assert_eq!(status(&app, path, token).await, StatusCode::UNAUTHORIZED);
        }
    }
    untouched(&coord);
    assert!(requests.try_recv().is_err(), "a snapshot was asked for");

    // A wrong token: the Secret is read once to learn the token, then wrong tokens are
    // refused from the cache (read again at most once per TOKEN_REREAD).
    let started = Instant::now();
    for i in 0..30 {
        let path = ["/snapshot/full", "/snapshot/delta"][i % 2];
        assert_eq!(
            status(&app, path, Some(&format!("wrong-{i}"))).await,
            StatusCode::UNAUTHORIZED
        );
    }
    let rereads = (started.elapsed().as_millis() / TOKEN_REREAD.as_millis()) as usize;
    let reads = coord.calls("secret_data");
    assert!(
        (1..=1 + rereads).contains(&reads),
        "{reads} Secret reads for 30 wrong tokens"
    );
    for what in ["member_lease", "member_leases", "snapshot_lease"] {
        assert_eq!(coord.calls(what), 0, "{what}");
    }
    assert!(requests.try_recv().is_err(), "a snapshot was asked for");

    // /snapshot/latest: no Secret, and one listing serves every request within LATEST_TTL
    // (each listing reads the configuration first; a cached answer reads nothing).
    let (secret_reads, configs) = (coord.calls("secret_data"), coord.calls("cluster_config"));
    let started = Instant::now();
    for _ in 0..30 {
        assert_eq!(status(&app, "/snapshot/latest", None).await, StatusCode::OK);
    }
    let listings = coord.calls("cluster_config") - configs;
    let allowed = 1 + (started.elapsed().as_millis() / LATEST_TTL.as_millis()) as usize;
    assert!(
        (1..=allowed).contains(&listings),
        "{listings} listings for 30 requests"
    );
    assert_eq!(coord.calls("secret_data"), secret_reads);
}
