//! A real kube-apiserver (v1.37.2 from Go modules by `scripts/install-deps.sh`) on its own
//! etcd, for tests of code that talks to Kubernetes: CRDs, RBAC, admission and API discovery
//! behave exactly as on a cluster, with no fake to drift from the real thing. No kubelet or controller-manager runs,
//! so Pods stay Pending and namespaces get no default ServiceAccount.
//!
//! Starting one takes 5-15 s, so a test binary normally shares one server
//! ([`KubeApiServer::shared`]) and gives each test its own namespace
//! ([`KubeApiServer::create_namespace`]); [`KubeApiServer::start`] gives a test a private one.
//!
//! The processes belong to a dedicated owner thread that lives exactly as long as the server:
//! dropping the [`KubeApiServer`] (also while a test panics) kills and reaps the apiserver and its
//! etcd and deletes their directory; a test process that dies takes them along through their
//! parent-death signal (see [`crate::child`]). The shared server is stopped when the test
//! process exits normally.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;
use tokio::sync::{OnceCell, oneshot};

use crate::child::ChildGuard;
use crate::etcd::{EtcdMemberConfig, EtcdProcess, NotReady};
use crate::ports::free_port;

/// Environment variable naming where `scripts/k8s/build-modules.sh` puts its build (binaries in
/// `bin/`).
pub const K8S_HOME_ENV: &str = "QUORATE_K8S_HOME";

/// How long the apiserver may take to answer `/readyz` with ok. It usually needs 5-15 s; a
/// 2-core machine busy with other tests can take several times that.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the apiserver's own etcd may take to become healthy.
const ETCD_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Service IP range; the apiserver reserves its first address for the `kubernetes` Service.
const SERVICE_CIDR: &str = "10.0.0.0/24";

/// Issuer and audience of the service-account tokens the apiserver signs.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The user the static token authenticates; member of `system:masters`, so RBAC allows it all.
pub const ADMIN_USER: &str = "quorate-test-admin";

const START_ATTEMPTS: usize = 3;

/// Name prefix of the servers' temp dirs.
const DIR_PREFIX: &str = "quorate-kube-apiserver-";

/// File in a server's directory naming the test process that owns it.
const OWNER_FILE: &str = "owner.pid";

/// Why no kube-apiserver could be started or reached. Each variant says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum KubeApiServerError {
    /// The binaries of `scripts/install-deps.sh` are not there. Tests turn this into a skip
    /// (outside CI) or a failure (in CI) with [`KubeApiServer::shared_or_skip`].
    #[error(
        "{binary} does not exist: run scripts/install-deps.sh once to build kube-apiserver and \
         kubectl v1.37.2 into {bin_dir} (from Go modules); set {K8S_HOME_ENV} if the build lives \
         elsewhere"
    )]
    BinariesMissing {
        /// The first binary found missing.
        binary: PathBuf,
        /// Where the binaries are looked for.
        bin_dir: PathBuf,
    },
    /// Creating the server's directory, certificates or kubeconfig failed.
    #[error("preparing the kube-apiserver's files in {path}: {source}")]
    Files {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// rcgen refused to generate a key or certificate.
    #[error("generating the kube-apiserver's certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    /// The apiserver's own etcd did not come up.
    #[error("the kube-apiserver's etcd did not start: {0}")]
    Etcd(Box<NotReady>),
    /// The apiserver binary could not be executed.
    #[error("cannot run {binary}: {source}; rebuild it with scripts/k8s/build-modules.sh")]
    Spawn {
        /// The kube-apiserver binary.
        binary: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The apiserver exited or did not report ready in time.
    #[error("kube-apiserver at {url} {reason}; last lines of {log_file}:\n{log_tail}")]
    NotReady {
        /// Its base URL.
        url: String,
        /// What happened (exited with a status, timed out and the last probe's answer).
        reason: String,
        /// Its full log.
        log_file: PathBuf,
        /// The end of that log.
        log_tail: String,
    },
    /// A kube client for the server could not be built from its kubeconfig.
    #[error("building a kube client from {kubeconfig}: {reason}")]
    Client {
        /// The kubeconfig used.
        kubeconfig: PathBuf,
        /// kube's error.
        reason: String,
    },
    /// The thread owning the processes died while starting them (a bug in this module).
    #[error("the kube-apiserver's owner thread died during start: {0}")]
    OwnerThread(String),
}

impl From<NotReady> for KubeApiServerError {
    fn from(e: NotReady) -> Self {
        KubeApiServerError::Etcd(Box::new(e))
    }
}

impl KubeApiServerError {
    /// True when only the binaries are missing (nothing is wrong with the machine otherwise).
    pub fn is_missing_binaries(&self) -> bool {
        matches!(self, KubeApiServerError::BinariesMissing { .. })
    }

    fn is_port_clash(&self) -> bool {
        matches!(self, KubeApiServerError::NotReady { log_tail, .. }
            if log_tail.contains("address already in use"))
    }

    fn files(path: &Path) -> impl FnOnce(io::Error) -> KubeApiServerError + '_ {
        move |source| KubeApiServerError::Files {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Where `scripts/install-deps.sh` puts the binaries: `$QUORATE_K8S_HOME/bin`, else
/// `~/.cache/quorate/k8s-1.37/bin` (`scripts/k8s/build-modules.sh`).
pub fn k8s_bin_dir() -> PathBuf {
    let home = std::env::var_os(K8S_HOME_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/quorate/k8s-1.37")
        });
    home.join("bin")
}

/// The kube-apiserver binary, or why there is none.
pub fn kube_apiserver_binary() -> Result<PathBuf, KubeApiServerError> {
    k8s_binary("kube-apiserver")
}

/// The kubectl binary of the same build (matching the server), or why there is none.
pub fn kubectl_binary() -> Result<PathBuf, KubeApiServerError> {
    k8s_binary("kubectl")
}

fn k8s_binary(name: &str) -> Result<PathBuf, KubeApiServerError> {
    let bin_dir = k8s_bin_dir();
    let binary = bin_dir.join(name);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(KubeApiServerError::BinariesMissing { binary, bin_dir })
    }
}

/// What the owner thread reports once the server is ready.
#[derive(Debug)]
struct Started {
    dir: PathBuf,
    url: String,
    token: String,
    kubeconfig: PathBuf,
    ca_cert: PathBuf,
    apiserver_log: PathBuf,
    etcd_url: String,
    apiserver_pid: u32,
    etcd_pid: u32,
    kubectl: PathBuf,
}

/// A running kube-apiserver with its own etcd, reachable as a `system:masters` user. Stopped,
/// with its etcd, and its files deleted when dropped.
#[derive(Debug)]
pub struct KubeApiServer {
    info: Started,
    /// Dropping the sender tells the owner thread to kill, reap and clean up.
    stop: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    owner: Mutex<Option<JoinHandle<()>>>,
}

static SHARED: OnceCell<KubeApiServer> = OnceCell::const_new();
static SHARED_EXIT_HOOK: AtomicBool = AtomicBool::new(false);

impl KubeApiServer {
    /// Starts a private apiserver for the caller (etcd, certificates, token, kubeconfig in a
    /// fresh temp dir; free loopback ports) and returns once `/readyz` answers ok.
    ///
    /// Prefer [`KubeApiServer::shared`] unless the test needs a server nobody else touches
    /// (e.g. it stops it, or asserts on cluster-scoped state).
    pub async fn start() -> Result<KubeApiServer, KubeApiServerError> {
        let apiserver = kube_apiserver_binary()?;
        let kubectl = kubectl_binary()?;
        let (ready_tx, ready_rx) = oneshot::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel();
        let owner = std::thread::Builder::new()
            .name("kube-apiserver-owner".into())
            .spawn(move || own(apiserver, kubectl, ready_tx, stop_rx))
            .map_err(|e| KubeApiServerError::OwnerThread(format!("cannot spawn it: {e}")))?;
        let started = ready_rx.await;
        let server = match started {
            Ok(Ok(info)) => KubeApiServer {
                info,
                stop: Mutex::new(Some(stop_tx)),
                owner: Mutex::new(Some(owner)),
            },
            Ok(Err(e)) => {
                let _ = owner.join();
                return Err(e);
            }
            Err(_) => {
                let why = match owner.join() {
                    Err(panic) => panic_message(&panic),
                    Ok(()) => "it ended without reporting".to_string(),
                };
                return Err(KubeApiServerError::OwnerThread(why));
            }
        };
        Ok(server)
    }

    /// The apiserver shared by every test of this test binary, started on first use. Tests
    /// sharing it should work in their own namespace ([`KubeApiServer::create_namespace`]) and
    /// name cluster-scoped objects uniquely (a CRD is the same for all, so applying one twice
    /// must be harmless). It is stopped when the test process exits.
    ///
    /// A failed start is not remembered: the next caller tries again.
    pub async fn shared() -> Result<&'static KubeApiServer, KubeApiServerError> {
        let server = SHARED.get_or_try_init(KubeApiServer::start).await?;
        if !SHARED_EXIT_HOOK.swap(true, Ordering::SeqCst) {
            // SAFETY: registers a plain `extern "C"` function; libc runs it once, at exit.
            let rc = unsafe { nix::libc::atexit(stop_shared_at_exit) };
            if rc != 0 {
                eprintln!(
                    "quorate-testkit: cannot register the shared kube-apiserver's exit hook; its \
                     processes still die with the test process, its temp dir {} stays",
                    server.dir().display()
                );
            }
        }
        Ok(server)
    }

    /// [`KubeApiServer::shared`] for tests: `None` after printing `SKIPPED` with what to run
    /// when the binaries are missing and `CI` is unset; panics when `CI` is set (a component a
    /// test needs is missing, which must fail the build) and on every other error.
    pub async fn shared_or_skip(test: &str) -> Option<&'static KubeApiServer> {
        skip_or_panic(test, KubeApiServer::shared().await)
    }

    /// [`KubeApiServer::start`] with the skip rules of [`KubeApiServer::shared_or_skip`].
    pub async fn start_or_skip(test: &str) -> Option<KubeApiServer> {
        skip_or_panic(test, KubeApiServer::start().await)
    }

    /// A new kube client acting as the admin user (`system:masters`), built from the written
    /// kubeconfig. Build one per test: a client is tied to the tokio runtime it was built in,
    /// and every `#[tokio::test]` has its own.
    pub async fn client(&self) -> Result<Client, KubeApiServerError> {
        client_from_kubeconfig(&self.info.kubeconfig).await
    }

    /// A client acting as `user` (e.g. `system:serviceaccount:<ns>:<name>`), impersonated by the
    /// admin, with `groups` added to the groups the API server gives that user; so RBAC and
    /// admission see that user, as they would see a pod's or the operator's requests.
    pub async fn client_as(
        &self,
        user: &str,
        groups: &[&str],
    ) -> Result<Client, KubeApiServerError> {
        client_from_kubeconfig_as(&self.info.kubeconfig, Some((user, groups))).await
    }

    /// Creates a namespace with a fresh name starting with `prefix` (the server appends a
    /// random suffix) and returns its name, so tests sharing the server do not meet.
    pub async fn create_namespace(
        &self,
        client: &Client,
        prefix: &str,
    ) -> Result<String, kube::Error> {
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}-")),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        Ok(created.metadata.name.unwrap_or_default())
    }

    /// A `kubectl` command (of the server's build) already pointed at this server as the admin
    /// user, with its discovery cache inside the server's directory and `KUBECONFIG` from the
    /// caller's environment removed.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(&self.info.kubectl);
        cmd.arg(format!("--kubeconfig={}", self.info.kubeconfig.display()))
            .arg(format!(
                "--cache-dir={}",
                self.info.dir.join("kubectl-cache").display()
            ))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    /// The kubeconfig (admin user, bearer token, the server's CA) for tools and clients.
    pub fn kubeconfig(&self) -> &Path {
        &self.info.kubeconfig
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.info.url
    }

    /// The admin user's bearer token.
    pub fn token(&self) -> &str {
        &self.info.token
    }

    /// The CA certificate (PEM) that signed the apiserver's serving certificate.
    pub fn ca_cert(&self) -> &Path {
        &self.info.ca_cert
    }

    /// The server's directory (etcd data, PKI, kubeconfig, logs); deleted when it stops.
    pub fn dir(&self) -> &Path {
        &self.info.dir
    }

    /// The client URL of the apiserver's own etcd (plain HTTP), e.g. to look at raw keys.
    pub fn etcd_url(&self) -> &str {
        &self.info.etcd_url
    }

    /// Process ids of the apiserver and its etcd, for tests that check they are gone.
    pub fn pids(&self) -> (u32, u32) {
        (self.info.apiserver_pid, self.info.etcd_pid)
    }

    /// The apiserver's log file.
    pub fn log_file(&self) -> &Path {
        &self.info.apiserver_log
    }

    /// The last `lines` lines of the apiserver's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.info.apiserver_log, lines)
    }

    /// Kills and reaps the apiserver and its etcd and deletes the directory; returns when all
    /// of that is done. Idempotent; dropping the server does the same.
    fn shutdown(&self) {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(stop);
        let owner = self.owner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(owner) = owner
            && let Err(panic) = owner.join()
        {
            eprintln!(
                "quorate-testkit: the kube-apiserver's owner thread panicked while stopping: {}",
                panic_message(&panic)
            );
        }
    }
}

impl Drop for KubeApiServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

extern "C" fn stop_shared_at_exit() {
    if let Some(server) = SHARED.get() {
        server.shutdown();
    }
}

fn skip_or_panic<T>(test: &str, result: Result<T, KubeApiServerError>) -> Option<T> {
    match result {
        Ok(server) => Some(server),
        Err(e) if e.is_missing_binaries() && std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED {test} (kube-apiserver): {e}");
            None
        }
        Err(e) if e.is_missing_binaries() => {
            panic!("{test}: CI is set, so a missing kube-apiserver is a failure: {e}")
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Builds a kube client from a kubeconfig file.
async fn client_from_kubeconfig(path: &Path) -> Result<Client, KubeApiServerError> {
    client_from_kubeconfig_as(path, None).await
}

/// A client from the kubeconfig at `path`, impersonating `(user, groups)` when given (the
/// API server adds a ServiceAccount's own groups; `groups` adds more).
async fn client_from_kubeconfig_as(
    path: &Path,
    impersonate: Option<(&str, &[&str])>,
) -> Result<Client, KubeApiServerError> {
    let error = |reason: String| KubeApiServerError::Client {
        kubeconfig: path.to_path_buf(),
        reason,
    };
    // kube's rustls needs a process-wide crypto provider when more than one is compiled in.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| error(e.to_string()))?;
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_string());
        if !groups.is_empty() {
            config.auth_info.impersonate_groups =
                Some(groups.iter().map(|g| g.to_string()).collect());
        }
    }
    Client::try_from(config).map_err(|e| error(e.to_string()))
}

/// The processes and files of one server; field order is drop order: apiserver, etcd, files.
struct Processes {
    _apiserver: ChildGuard,
    _etcd: EtcdProcess,
    _dir: TempDir,
}

/// The owner thread: starts everything, reports, then holds the processes until told to stop
/// (or until the server's handle is gone). Children die with this thread, so it must outlive
/// them, which it does by owning them.
fn own(
    apiserver: PathBuf,
    kubectl: PathBuf,
    ready: oneshot::Sender<Result<Started, KubeApiServerError>>,
    stop: std::sync::mpsc::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(KubeApiServerError::OwnerThread(format!(
                "cannot build its tokio runtime: {e}"
            ))));
            return;
        }
    };
    match runtime.block_on(launch(apiserver, kubectl)) {
        Ok((processes, started)) => {
            if ready.send(Ok(started)).is_ok() {
                // Returns when the sender is dropped (or sends): time to stop.
                let _ = stop.recv();
            }
            drop(processes);
        }
        Err(e) => {
            let _ = ready.send(Err(e));
        }
    }
}

/// PEM files the apiserver and its clients use.
struct Pki {
    ca_cert: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    service_account_key: PathBuf,
    service_account_pub: PathBuf,
    tokens: PathBuf,
}

async fn launch(
    apiserver: PathBuf,
    kubectl: PathBuf,
) -> Result<(Processes, Started), KubeApiServerError> {
    let tmp = std::env::temp_dir();
    sweep_stale_dirs(&tmp);
    let dir = tempfile::Builder::new()
        .prefix(DIR_PREFIX)
        .tempdir_in(&tmp)
        .map_err(KubeApiServerError::files(&tmp))?;
    let root = dir.path().to_path_buf();
    let owner = root.join(OWNER_FILE);
    fs::write(&owner, std::process::id().to_string()).map_err(KubeApiServerError::files(&owner))?;
    let token = format!("{:032x}", rand::random::<u128>());
    let pki = write_pki(&root.join("pki"), &token)?;

    let etcd_config = EtcdMemberConfig::new("apiserver-etcd", &root);
    let etcd = EtcdProcess::start_ready(etcd_config, ETCD_READY_TIMEOUT).await?;
    let etcd_url = etcd.client_url();
    let etcd_pid = etcd.child().pid();

    let log_file = root.join("kube-apiserver.log");
    let kubeconfig = root.join("kubeconfig");
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        write_kubeconfig(&kubeconfig, &url, &pki.ca_cert, &token)?;
        let mut child = spawn_apiserver(&apiserver, &root, &pki, &etcd_url, port, &log_file)?;
        match wait_ready(&mut child, &url, &kubeconfig, &log_file).await {
            Ok(()) => {
                let started = Started {
                    dir: root,
                    url,
                    token,
                    kubeconfig,
                    ca_cert: pki.ca_cert,
                    apiserver_log: log_file,
                    etcd_url,
                    apiserver_pid: child.pid(),
                    etcd_pid,
                    kubectl,
                };
                let processes = Processes {
                    _apiserver: child,
                    _etcd: etcd,
                    _dir: dir,
                };
                return Ok((processes, started));
            }
            // Someone took the port between our probe and the apiserver's bind: another one.
            Err(e) if e.is_port_clash() && attempt < START_ATTEMPTS => {
                drop(child);
                let _ = fs::rename(
                    &log_file,
                    root.join(format!("kube-apiserver.{attempt}.log")),
                );
            }
            Err(e) => return Err(e),
        }
    }
}

/// Deletes the directories (etcd data with its preallocated WAL: tens of MB each) of servers
/// whose test process was killed (SIGKILL, Ctrl-C) and so never cleaned up; their processes
/// died with it. Only directories whose recorded owner process is gone are touched.
fn sweep_stale_dirs(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = entry.path();
        let owner = fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        if let Some(pid) = owner
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn spawn_apiserver(
    binary: &Path,
    root: &Path,
    pki: &Pki,
    etcd_url: &str,
    port: u16,
    log_file: &Path,
) -> Result<ChildGuard, KubeApiServerError> {
    let log = fs::File::create(log_file).map_err(KubeApiServerError::files(log_file))?;
    let log_err = log
        .try_clone()
        .map_err(KubeApiServerError::files(log_file))?;
    let path = |p: &Path| p.display().to_string();
    let args = [
        "--advertise-address=127.0.0.1".to_string(),
        "--bind-address=127.0.0.1".to_string(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", path(&root.join("certs"))),
        // No other apiserver and no kubelet: no endpoints to reconcile.
        "--endpoint-reconciler-type=none".to_string(),
        format!("--etcd-servers={etcd_url}"),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--authorization-mode=RBAC".to_string(),
        "--allow-privileged=true".to_string(),
        format!("--tls-cert-file={}", path(&pki.serving_cert)),
        format!("--tls-private-key-file={}", path(&pki.serving_key)),
        format!("--token-auth-file={}", path(&pki.tokens)),
        format!(
            "--service-account-key-file={}",
            path(&pki.service_account_pub)
        ),
        format!(
            "--service-account-signing-key-file={}",
            path(&pki.service_account_key)
        ),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        format!("--api-audiences={SERVICE_ACCOUNT_ISSUER}"),
        "--profiling=false".to_string(),
        "--v=1".to_string(),
    ];
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Nothing from the caller's environment (KUBECONFIG, proxies) may change the server.
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root);
    ChildGuard::spawn(&mut cmd).map_err(|source| KubeApiServerError::Spawn {
        binary: binary.to_path_buf(),
        source,
    })
}

/// Polls `/readyz` until it answers `ok`; fails early when the apiserver exits.
async fn wait_ready(
    child: &mut ChildGuard,
    url: &str,
    kubeconfig: &Path,
    log_file: &Path,
) -> Result<(), KubeApiServerError> {
    let not_ready = |reason: String| KubeApiServerError::NotReady {
        url: url.to_string(),
        reason,
        log_file: log_file.to_path_buf(),
        log_tail: tail(log_file, 30),
    };
    let client = client_from_kubeconfig(kubeconfig).await?;
    let request = kube::core::Request::new("")
        .get("readyz", &Default::default())
        .map_err(|e| not_ready(format!("cannot build the /readyz request: {e}")))?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(not_ready(format!("exited during start with {status}")));
        }
        let probe =
            tokio::time::timeout(Duration::from_secs(5), client.request_text(request.clone()))
                .await;
        let last = match probe {
            Ok(Ok(body)) if body.trim() == "ok" => return Ok(()),
            Ok(Ok(body)) => format!("answered {body:?}"),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 5s".to_string(),
        };
        if Instant::now() >= deadline {
            return Err(not_ready(format!(
                "not ready after {READY_TIMEOUT:?} (last /readyz probe: {last})"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A CA, the apiserver's serving certificate (127.0.0.1, localhost and the in-cluster names),
/// a service-account signing key and the static token file naming the admin user.
fn write_pki(dir: &Path, token: &str) -> Result<Pki, KubeApiServerError> {
    fs::create_dir_all(dir).map_err(KubeApiServerError::files(dir))?;
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "quorate test kubernetes CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let serving_key = KeyPair::generate()?;
    let sans = [
        "127.0.0.1",
        "localhost",
        "10.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = params.signed_by(&serving_key, &ca)?;
    let service_account_key = KeyPair::generate()?;

    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        service_account_key: dir.join("sa.key"),
        service_account_pub: dir.join("sa.pub"),
        tokens: dir.join("tokens.csv"),
    };
    let files = [
        (&pki.ca_cert, ca.pem()),
        (&pki.serving_cert, serving_cert.pem()),
        (&pki.serving_key, serving_key.serialize_pem()),
        (
            &pki.service_account_key,
            service_account_key.serialize_pem(),
        ),
        (
            &pki.service_account_pub,
            service_account_key.public_key_pem(),
        ),
        // token,user,uid,"group1,group2"
        (
            &pki.tokens,
            format!("{token},{ADMIN_USER},{ADMIN_USER},system:masters\n"),
        ),
    ];
    for (path, content) in files {
        fs::write(path, content).map_err(KubeApiServerError::files(path))?;
    }
    Ok(pki)
}

/// The admin kubeconfig, as JSON (a kubeconfig is YAML, and JSON is YAML). Rewritten when a
/// start attempt moves to another port.
fn write_kubeconfig(
    path: &Path,
    url: &str,
    ca_cert: &Path,
    token: &str,
) -> Result<(), KubeApiServerError> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "quorate-test",
            "cluster": { "server": url, "certificate-authority": ca_cert },
        }],
        "users": [{ "name": ADMIN_USER, "user": { "token": token } }],
        "contexts": [{
            "name": "quorate-test",
            "context": { "cluster": "quorate-test", "user": ADMIN_USER, "namespace": "default" },
        }],
        "current-context": "quorate-test",
    });
    let text = serde_json::to_string_pretty(&config).map_err(|e| KubeApiServerError::Files {
        path: path.to_path_buf(),
        source: io::Error::other(e),
    })?;
    fs::write(path, text).map_err(KubeApiServerError::files(path))
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read log: {e})"),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panicked".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_script_to_run() {
        let e = KubeApiServerError::BinariesMissing {
            binary: PathBuf::from("/nowhere/bin/kube-apiserver"),
            bin_dir: PathBuf::from("/nowhere/bin"),
        };
        assert!(e.is_missing_binaries());
        assert!(e.to_string().contains("scripts/install-deps.sh"), "{e}");
    }

    #[test]
    fn sweeps_only_directories_whose_owner_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |name: &str, owner: Option<&str>| {
            let dir = tmp.path().join(name);
            fs::create_dir(&dir).unwrap();
            if let Some(owner) = owner {
                fs::write(dir.join(OWNER_FILE), owner).unwrap();
            }
            dir
        };
        // Above the kernel's largest pid (2^22), so never a live process.
        let dead = make(&format!("{DIR_PREFIX}dead"), Some("4194305"));
        let alive = make(
            &format!("{DIR_PREFIX}alive"),
            Some(&std::process::id().to_string()),
        );
        let starting = make(&format!("{DIR_PREFIX}starting"), None);
        let other = make("someone-else", Some("4194305"));
        sweep_stale_dirs(tmp.path());
        assert!(!dead.exists());
        assert!(alive.exists() && starting.exists() && other.exists());
    }

    #[test]
    fn pki_files_are_pem() {
        let dir = tempfile::tempdir().unwrap();
        let pki = write_pki(dir.path(), "t0k3n").unwrap();
        let ca = fs::read_to_string(&pki.ca_cert).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            fs::read_to_string(&pki.service_account_pub)
                .unwrap()
                .contains("PUBLIC KEY")
        );
        let tokens = fs::read_to_string(&pki.tokens).unwrap();
        assert!(tokens.starts_with("t0k3n,"), "{tokens}");
        assert!(tokens.trim_end().ends_with(",system:masters"), "{tokens}");
    }
}
