//! Real S3 servers for tests, shared by every test that needs a bucket:
//!
//! - [`S3sServer`]: s3s-fs inside the test process (SigV4 with fixed keys, multipart, files in a
//!   temp dir), on 127.0.0.1 with a port from the OS; stopped when dropped.
//! - [`MotoServer`]: moto's S3 server as a child process (from the venv
//!   `scripts/install-deps.sh` creates), killed when dropped. Absent moto fails the test when
//!   `CI` is set and skips it with a note otherwise.
//!
//! Use from a test file with `mod support { pub mod s3; }`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::stream::{self, Stream};
use quorate_api::StoreSpec;
use quorate_testkit::TempDir;

/// Access key both servers are set up with.
pub const ACCESS_KEY: &str = "quorate-test-access";
/// Secret key both servers are set up with.
pub const SECRET_KEY: &str = "quorate-test-secret-key";
/// Region the test secrets name.
pub const REGION: &str = "us-east-1";

/// How to reach a bucket on a test server.
#[derive(Clone, Debug)]
pub struct S3Target {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The bucket the server was started with.
    pub bucket: String,
}

impl S3Target {
    /// A druid store spec for this bucket (provider `aws`, `endpointOverride` set).
    pub fn store_spec(&self, prefix: &str) -> StoreSpec {
        StoreSpec {
            container: Some(self.bucket.clone()),
            endpoint_override: Some(self.endpoint.clone()),
            prefix: prefix.to_string(),
            provider: Some("aws".to_string()),
            secret_ref: None,
        }
    }

    /// Writes a secret directory with etcd-backup-restore's S3 keys for this server into
    /// `dir` (created if needed) and returns it. The secret names the endpoint too, so a spec
    /// without `endpointOverride` works with it.
    pub fn write_secret(&self, dir: &Path) -> PathBuf {
        self.write_secret_with(dir, ACCESS_KEY, SECRET_KEY)
    }

    /// Like [`S3Target::write_secret`] with other keys (e.g. wrong ones).
    pub fn write_secret_with(&self, dir: &Path, access_key: &str, secret_key: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        for (key, value) in [
            ("accessKeyID", access_key),
            ("secretAccessKey", secret_key),
            ("region", REGION),
            ("endpoint", self.endpoint.as_str()),
            ("s3ForcePathStyle", "true"),
        ] {
            std::fs::write(dir.join(key), value).unwrap();
        }
        dir.to_path_buf()
    }

    /// A raw `object_store` client for the bucket, to look at or tamper with objects behind
    /// the store's back.
    pub fn raw_client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_bucket_name(&self.bucket)
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .with_region(REGION)
            .build()
            .unwrap()
    }
}

/// An s3s-fs server running in this process on its own thread.
pub struct S3sServer {
    target: S3Target,
    root: TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl S3sServer {
    /// Starts a server with one (empty) bucket.
    pub fn start(bucket: &str) -> S3sServer {
        let root = tempfile::Builder::new()
            .prefix("quorate-s3s-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(root.path().join(bucket)).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let fs_root = root.path().to_path_buf();
        let thread = std::thread::Builder::new()
            .name(format!("s3s-{}", addr.port()))
            .spawn(move || serve(listener, fs_root, rx))
            .unwrap();
        S3sServer {
            target: S3Target {
                endpoint: format!("http://{addr}"),
                bucket: bucket.to_string(),
            },
            root,
            shutdown: Some(tx),
            thread: Some(thread),
        }
    }

    /// Endpoint and bucket.
    pub fn target(&self) -> &S3Target {
        &self.target
    }

    /// The directory the server keeps buckets (as directories) and in-progress uploads in.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Files of multipart uploads that were neither completed nor aborted.
    pub fn leftover_upload_parts(&self) -> Vec<String> {
        std::fs::read_dir(self.root.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".upload_id-"))
            .collect()
    }
}

impl Drop for S3sServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the server until `stop` fires.
fn serve(
    listener: std::net::TcpListener,
    root: PathBuf,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder as ConnBuilder;
    use s3s::auth::SimpleAuth;
    use s3s::service::S3ServiceBuilder;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let fs = s3s_fs::FileSystem::new(&root).unwrap();
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let http = ConnBuilder::new(TokioExecutor::new());
        loop {
            let socket = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => socket,
                    Err(_) => continue,
                },
                _ = &mut stop => break,
            };
            let conn = http
                .serve_connection(TokioIo::new(socket), service.clone())
                .into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    });
    // Dropping the runtime ends the open connections.
}

/// moto's S3 server with one bucket, as an [`S3Target`].
pub struct MotoServer {
    target: S3Target,
    _server: quorate_testkit::MotoServer,
}

impl MotoServer {
    /// Starts moto with one bucket; `None` when moto is missing outside CI.
    pub fn start(bucket: &str) -> Option<MotoServer> {
        let server = quorate_testkit::MotoServer::start(bucket)?;
        let target = S3Target {
            endpoint: server.endpoint.clone(),
            bucket: server.bucket.clone(),
        };
        Some(MotoServer {
            target,
            _server: server,
        })
    }

    /// Endpoint and bucket.
    pub fn target(&self) -> &S3Target {
        &self.target
    }
}

/// Deterministic test data: incompressible when `alphabet` is 256, compressible below.
pub fn sample_data(seed: u64, len: usize, alphabet: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
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

/// `data` as a stream of chunks of `chunk` bytes, as a snapshot body arrives.
pub fn body(
    data: &[u8],
    chunk: usize,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin {
    let chunks: Vec<std::io::Result<Bytes>> = data
        .chunks(chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    stream::iter(chunks)
}

/// `data` followed by an error, as a snapshot body whose source breaks mid-way.
pub fn failing_body(
    data: &[u8],
    chunk: usize,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + Unpin {
    let mut chunks: Vec<std::io::Result<Bytes>> = data
        .chunks(chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    chunks.push(Err(std::io::Error::other("etcd snapshot stream broke")));
    stream::iter(chunks)
}

/// Reads a download stream to the end.
pub async fn read_all(
    mut s: futures::stream::BoxStream<'static, std::io::Result<Bytes>>,
) -> std::io::Result<Vec<u8>> {
    use futures::StreamExt;
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

/// Scenarios every store must pass, whatever serves it (s3s-fs, moto, a local directory).
pub mod scenarios {
    use super::{body, read_all, sample_data};
    use quorate_api::CompressionPolicy;
    use quorate_backup::layout::SnapshotName;
    use quorate_backup::store::{SnapStore, StoreError, StoredSnapshot};

    /// Every compression etcd-backup-restore writes, and none.
    pub const COMPRESSIONS: [Option<CompressionPolicy>; 4] = [
        None,
        Some(CompressionPolicy::Gzip),
        Some(CompressionPolicy::Lzw),
        Some(CompressionPolicy::Zlib),
    ];

    /// Size of the full snapshots: well over two 5 MiB parts even compressed.
    pub const BIG: usize = 12 * 1024 * 1024;

    /// For each compression: a 12 MiB full snapshot (multipart) and a small delta go up, are
    /// listed under the names they were given, come back byte for byte, and are deleted.
    pub async fn round_trip_every_compression(store: &SnapStore) {
        let full_data = sample_data(7, BIG, 256);
        let delta_data = sample_data(8, 200_000, 4);
        let mut uploaded: Vec<(StoredSnapshot, &[u8])> = Vec::new();
        for (i, compression) in COMPRESSIONS.into_iter().enumerate() {
            let i = i as i64;
            let full = SnapshotName::full(1000 * (i + 1), 1_700_000_000 + i, compression);
            let incr = SnapshotName::incr(
                1000 * (i + 1) + 1,
                1000 * (i + 1) + 50,
                1_700_000_100 + i,
                compression,
            );
            let f = store
                .upload(&full, body(&full_data, 256 * 1024))
                .await
                .unwrap_or_else(|e| panic!("upload {full}: {e}"));
            assert_eq!(f.name, full);
            assert_eq!(f.path, full.v2_key(store.prefix()));
            let d = store
                .upload(&incr, body(&delta_data, 4096))
                .await
                .unwrap_or_else(|e| panic!("upload {incr}: {e}"));
            match compression {
                None => {
                    assert_eq!(f.size, BIG as u64);
                    assert_eq!(d.size, delta_data.len() as u64);
                }
                // Letters from a 4-symbol alphabet compress well with every method.
                Some(c) => assert!(
                    d.size < delta_data.len() as u64 / 2,
                    "{c}: delta of {} bytes stored as {}",
                    delta_data.len(),
                    d.size
                ),
            }
            uploaded.push((f, &full_data));
            uploaded.push((d, &delta_data));
        }

        let listed = store.list().await.unwrap();
        let mut expected: Vec<StoredSnapshot> = uploaded.iter().map(|(s, _)| s.clone()).collect();
        expected.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            listed, expected,
            "list shows exactly what was uploaded, sorted"
        );
        for s in &listed {
            let file = s.path.rsplit('/').next().unwrap();
            assert_eq!(SnapshotName::parse(file).unwrap(), s.name, "{}", s.path);
        }

        for (s, data) in &uploaded {
            let got = read_all(store.download(s).await.unwrap())
                .await
                .unwrap_or_else(|e| panic!("download {}: {e}", s.path));
            assert!(
                got.len() == data.len() && got == *data,
                "{}: downloaded {} bytes that differ from the {} uploaded",
                s.path,
                got.len(),
                data.len()
            );
        }

        for (s, _) in &uploaded {
            store.delete(s).await.unwrap();
        }
        assert_eq!(store.list().await.unwrap(), vec![]);
        let (gone, _) = &uploaded[0];
        match store.download(gone).await {
            Err(StoreError::NotFound { path, .. }) => assert_eq!(&path, &gone.path),
            Err(e) => panic!("download of a deleted snapshot: {e}"),
            Ok(_) => panic!("download of a deleted snapshot succeeded"),
        }
        // Deleting again is not an error (garbage collection may race with itself).
        store.delete(gone).await.unwrap();
    }

    /// A body that breaks after 7 MiB (one part already uploaded) fails the upload with
    /// `Source`, and nothing is listed afterwards.
    pub async fn broken_body_leaves_nothing(store: &SnapStore) {
        let data = sample_data(9, 7 * 1024 * 1024, 256);
        let name = SnapshotName::full(77, 1_700_000_000, Some(CompressionPolicy::Gzip));
        let e = store
            .upload(&name, super::failing_body(&data, 512 * 1024))
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Source { .. }), "{e}");
        assert!(e.to_string().contains("etcd snapshot stream broke"), "{e}");
        assert_eq!(store.list().await.unwrap(), vec![]);
    }

    /// Reads a download to its end and returns the `StoreError` it fails with.
    pub async fn download_error(store: &SnapStore, s: &StoredSnapshot) -> StoreError {
        let stream = match store.download(s).await {
            Ok(stream) => stream,
            Err(e) => return e,
        };
        match read_all(stream).await {
            Ok(data) => panic!(
                "{} downloaded ({} bytes) despite damage",
                s.path,
                data.len()
            ),
            Err(e) => StoreError::from_stream_error(e, &store.describe(), &s.path),
        }
    }
}
