//! A real OpenStack Swift, all in one temporary directory: Debian's `swift-proxy-server`,
//! `swift-account-server`, `swift-container-server` and `swift-object-server` (installed by
//! `scripts/install-swift.sh`) with one-replica rings on free loopback ports and memcached,
//! authenticating either with tempauth (v1 auth) or with a real Keystone v3 (Debian's
//! `python3-keystone` on SQLite, `keystone-wsgi-public`; the proxy checks tokens with
//! keystonemiddleware). Every process dies with the guard.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{ChildGuard, PortBlock};

/// The tempauth account (druid's `tenantName`).
pub const SWIFT_ACCOUNT: &str = "test";
/// The tempauth user (druid's `username`).
pub const SWIFT_USER: &str = "tester";
/// The tempauth user's key (druid's `password`).
pub const SWIFT_KEY: &str = "testing";

/// Where Debian puts Swift's servers (`$QUORATE_SWIFT_BIN`, else `/usr/bin`).
pub fn swift_bin_dir() -> PathBuf {
    std::env::var_os("QUORATE_SWIFT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin"))
}

/// Keystone's project that holds the test container (druid's `tenantName`).
pub const KEYSTONE_PROJECT: &str = "backups";
/// Keystone's test user (druid's `username`), a `member` of [`KEYSTONE_PROJECT`].
pub const KEYSTONE_USER: &str = "etcd";
/// Its password.
pub const KEYSTONE_PASSWORD: &str = "etcd-password";
/// Keystone's admin password (the proxy's service user is the admin).
const KEYSTONE_ADMIN_PASSWORD: &str = "admin-password";
/// The Keystone region the object-store endpoint is in.
pub const KEYSTONE_REGION: &str = "RegionOne";

/// An application credential of [`KEYSTONE_USER`], scoped to [`KEYSTONE_PROJECT`].
#[derive(Clone, Debug)]
pub struct ApplicationCredential {
    /// Its ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its secret.
    pub secret: String,
}

/// How the Swift proxy authenticates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Auth {
    TempAuth,
    Keystone,
}

/// A running all-in-one Swift with one container; every process is killed when dropped.
pub struct SwiftServer {
    /// The auth URL: `http://127.0.0.1:<port>/auth/v1.0` (tempauth) or Keystone's
    /// `http://127.0.0.1:<port>/v3`.
    pub auth_url: String,
    /// With Keystone, an application credential of the test user.
    pub application_credential: Option<ApplicationCredential>,
    /// The container created at start.
    pub container: String,
    /// `X-Storage-Url` of the test account, for requests the tests make themselves.
    pub storage_url: String,
    /// A valid token for those requests.
    pub token: String,
    /// memcached's port (tempauth's tokens live there).
    memcache_port: u16,
    // Dropped before the directory: servers first.
    _children: Vec<ChildGuard>,
    dir: TempDir,
}

impl std::fmt::Debug for SwiftServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwiftServer")
            .field("auth_url", &self.auth_url)
            .field("container", &self.container)
            .finish()
    }
}

impl SwiftServer {
    /// Starts Swift with tempauth and container `container`. `None` (after printing why) when
    /// Swift is not installed and `CI` is not set; panics when it is.
    pub fn start(container: &str) -> Option<SwiftServer> {
        Self::start_with(container, Auth::TempAuth)
    }

    /// Starts Swift behind a real Keystone v3 with container `container` in project
    /// [`KEYSTONE_PROJECT`]; `None` or a panic as [`SwiftServer::start`].
    pub fn start_with_keystone(container: &str) -> Option<SwiftServer> {
        Self::start_with(container, Auth::Keystone)
    }

    fn start_with(container: &str, auth: Auth) -> Option<SwiftServer> {
        let bin = swift_bin_dir();
        let mut needed: Vec<PathBuf> = [
            "swift-proxy-server",
            "swift-account-server",
            "swift-container-server",
            "swift-object-server",
            "swift-ring-builder",
        ]
        .iter()
        .map(|b| bin.join(b))
        .collect();
        needed.push(PathBuf::from("/usr/bin/memcached"));
        if auth == Auth::Keystone {
            needed.push(PathBuf::from("/usr/bin/keystone-manage"));
            needed.push(PathBuf::from("/usr/bin/keystone-wsgi-public"));
            needed.push(PathBuf::from(
                "/usr/lib/python3/dist-packages/keystonemiddleware",
            ));
        }
        let missing: Vec<String> = needed
            .iter()
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            let msg = format!(
                "Swift is not installed ({} missing): run scripts/install-swift.sh",
                missing.join(", ")
            );
            if std::env::var_os("CI").is_some() {
                panic!("{msg}");
            }
            eprintln!("SKIPPED (swift): {msg}");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("quorate-swift-")
            .tempdir()
            .unwrap();
        let etc = dir.path().join("etc");
        let devices = dir.path().join("srv");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(devices.join("d1")).unwrap();
        std::fs::write(
            etc.join("swift.conf"),
            "[swift-hash]\nswift_hash_path_suffix = quorate\nswift_hash_path_prefix = quorate\n\
             [storage-policy:0]\nname = Policy-0\ndefault = yes\n",
        )
        .unwrap();
        let block = PortBlock::reserve(6);
        let [proxy, account, container_port, object, memcache, keystone] = block.ports()[..] else {
            unreachable!("six ports reserved")
        };
        // Swift's servers switch to `user` (by default `swift`); they stay who runs the tests.
        let (user, _) = current_user_and_group();
        let addr: SocketAddr = ([127, 0, 0, 1], proxy).into();
        let keystone_addr: SocketAddr = ([127, 0, 0, 1], keystone).into();
        for (kind, port) in [
            ("account", account),
            ("container", container_port),
            ("object", object),
        ] {
            let builder = etc.join(format!("{kind}.builder"));
            for args in [
                vec!["create", "6", "1", "1"],
                vec!["add", &format!("r1z1-127.0.0.1:{port}/d1"), "1"],
                vec!["rebalance"],
            ] {
                run(Command::new(bin.join("swift-ring-builder"))
                    .arg(&builder)
                    .args(&args));
            }
            std::fs::write(
                etc.join(format!("{kind}-server.conf")),
                format!(
                    "[DEFAULT]\ndevices = {}\nmount_check = false\nbind_ip = 127.0.0.1\n\
                     bind_port = {port}\nworkers = 0\nuser = {user}\nswift_dir = {}\nlog_level = WARNING\n\
                     [pipeline:main]\npipeline = {kind}-server\n\
                     [app:{kind}-server]\nuse = egg:swift#{kind}\n",
                    devices.display(),
                    etc.display()
                ),
            )
            .unwrap();
        }
        let (auth_filters, auth_conf) = match auth {
            Auth::TempAuth => (
                "tempauth",
                format!(
                    "[filter:tempauth]\nuse = egg:swift#tempauth\n\
                     user_{SWIFT_ACCOUNT}_{SWIFT_USER} = {SWIFT_KEY} .admin\n"
                ),
            ),
            Auth::Keystone => (
                "authtoken keystoneauth",
                format!(
                    "[filter:authtoken]\n\
                     paste.filter_factory = keystonemiddleware.auth_token:filter_factory\n\
                     www_authenticate_uri = http://{keystone_addr}/v3\n\
                     auth_url = http://{keystone_addr}/v3\nauth_type = password\n\
                     interface = public\nproject_domain_name = Default\n\
                     user_domain_name = Default\nproject_name = admin\nusername = admin\n\
                     password = {KEYSTONE_ADMIN_PASSWORD}\ndelay_auth_decision = True\n\
                     service_token_roles_required = True\n\
                     memcached_servers = 127.0.0.1:{memcache}\n\
                     [filter:keystoneauth]\nuse = egg:swift#keystoneauth\n\
                     operator_roles = admin, member\n"
                ),
            ),
        };
        // The proxy's default 0.5 s connect and 10 s node timeouts answer 503 when the
        // single-process servers are slow under a loaded CI machine (a CI run failed on it).
        let mut proxy_conf = format!(
            "[DEFAULT]\nbind_ip = 127.0.0.1\nbind_port = {proxy}\nworkers = 0\nuser = {user}\nswift_dir = {}\n\
             log_level = WARNING\n\
             [pipeline:main]\npipeline = catch_errors gatekeeper healthcheck proxy_logging cache \
             listing_formats bulk slo dlo {auth_filters} proxy_logging proxy-server\n\
             [app:proxy-server]\nuse = egg:swift#proxy\naccount_autocreate = true\n\
             conn_timeout = 10\nnode_timeout = 60\nrecoverable_node_timeout = 60\n\
             {auth_conf}\
             [filter:cache]\nuse = egg:swift#memcache\nmemcache_servers = 127.0.0.1:{memcache}\n",
            etc.display()
        );
        for f in [
            "catch_errors",
            "gatekeeper",
            "healthcheck",
            "proxy_logging",
            "listing_formats",
            "bulk",
            "slo",
            "dlo",
        ] {
            proxy_conf.push_str(&format!("[filter:{f}]\nuse = egg:swift#{f}\n"));
        }
        std::fs::write(etc.join("proxy-server.conf"), proxy_conf).unwrap();

        let log =
            |name: &str| std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
        let logs = || {
            [
                "keystone",
                "memcached",
                "account",
                "container",
                "object",
                "proxy",
            ]
            .iter()
            .filter_map(|n| {
                let text = std::fs::read_to_string(dir.path().join(format!("{n}.log"))).ok()?;
                Some(format!("--- {n}:\n{text}"))
            })
            .collect::<Vec<_>>()
            .join("\n")
        };
        let mut children = Vec::new();
        if auth == Auth::Keystone {
            let conf = setup_keystone(dir.path(), keystone_addr);
            block.release();
            let out = log("keystone");
            children.push(
                ChildGuard::spawn(
                    Command::new("/usr/bin/keystone-wsgi-public")
                        .args(["--host", "127.0.0.1", "--port"])
                        .arg(keystone.to_string())
                        .env("OS_KEYSTONE_CONFIG_FILES", &conf)
                        .stdin(Stdio::null())
                        .stdout(out.try_clone().unwrap())
                        .stderr(out),
                )
                .unwrap_or_else(|e| panic!("cannot start keystone-wsgi-public: {e}")),
            );
        } else {
            block.release();
        }
        let memcached_log = log("memcached");
        children.push(
            ChildGuard::spawn(
                Command::new("/usr/bin/memcached")
                    // `-u root` is required as root and ignored otherwise.
                    .args(["-u", "root", "-l", "127.0.0.1", "-U", "0", "-p"])
                    .arg(memcache.to_string())
                    .stdin(Stdio::null())
                    .stdout(memcached_log.try_clone().unwrap())
                    .stderr(memcached_log),
            )
            .unwrap_or_else(|e| panic!("cannot start memcached: {e}")),
        );
        for kind in ["account", "container", "object", "proxy"] {
            let out = log(kind);
            let mut cmd = Command::new(bin.join(format!("swift-{kind}-server")));
            cmd.arg(etc.join(format!("{kind}-server.conf")));
            if kind == "proxy" {
                // Also log to the console (the log file): there is no syslog here.
                cmd.arg("-v");
            }
            children.push(
                ChildGuard::spawn(
                    cmd.stdin(Stdio::null())
                        .stdout(out.try_clone().unwrap())
                        .stderr(out),
                )
                .unwrap_or_else(|e| panic!("cannot start swift-{kind}-server: {e}")),
            );
        }
        // Swift's servers (and Keystone) take a few seconds to import; authenticating and
        // creating the container (which needs every server) is the readiness check.
        let deadline = Instant::now() + Duration::from_secs(120);
        let retry = |what: &str, r: std::io::Result<Answer>, ok: &dyn Fn(u16) -> bool| match r {
            Ok(a) if ok(a.status) => Some(a),
            Ok(_) | Err(_) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
                None
            }
            Ok(a) => panic!("{what}: {a:?}; logs:\n{}", logs()),
            Err(e) => panic!("{what}: no answer within 120s ({e}); logs:\n{}", logs()),
        };
        let (auth_url, storage_url, token, application_credential) = match auth {
            Auth::TempAuth => {
                let answer = loop {
                    let attempt = request(
                        addr,
                        "GET",
                        "/auth/v1.0",
                        &[
                            ("X-Auth-User", &format!("{SWIFT_ACCOUNT}:{SWIFT_USER}")),
                            ("X-Auth-Key", SWIFT_KEY),
                        ],
                        b"",
                    );
                    if let Some(a) = retry("Swift's tempauth", attempt, &|s| s == 200) {
                        break a;
                    }
                };
                let storage_url = answer
                    .header("x-storage-url")
                    .expect("X-Storage-Url")
                    .to_string();
                let token = answer
                    .header("x-auth-token")
                    .expect("X-Auth-Token")
                    .to_string();
                (format!("http://{addr}/auth/v1.0"), storage_url, token, None)
            }
            Auth::Keystone => {
                loop {
                    let attempt = request(keystone_addr, "GET", "/v3", &[], b"");
                    if retry("Keystone", attempt, &|s| s == 200).is_some() {
                        break;
                    }
                }
                let (storage_url, token, app) = keystone_objects(
                    &dir.path().join("keystone.log"),
                    keystone_addr,
                    &format!("http://{addr}"),
                );
                (
                    format!("http://{keystone_addr}/v3"),
                    storage_url,
                    token,
                    Some(app),
                )
            }
        };
        let account_path = storage_url
            .split_once(&format!("{addr}"))
            .map(|(_, p)| p.to_string())
            .expect("storage URL on the proxy");
        loop {
            let attempt = request(
                addr,
                "PUT",
                &format!("{account_path}/{container}"),
                &[("X-Auth-Token", &token)],
                b"",
            );
            if retry(
                &format!("Swift creating container {container}"),
                attempt,
                &|s| (200..300).contains(&s),
            )
            .is_some()
            {
                break;
            }
        }
        Some(SwiftServer {
            auth_url,
            application_credential,
            container: container.to_string(),
            storage_url,
            token,
            memcache_port: memcache,
            _children: children,
            dir,
        })
    }

    /// A request to object `name` of the container (`""` or `?query`: the container itself) with the test
    /// account's token, outside the code under test: what the bucket really holds.
    pub fn raw(&self, method: &str, name: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let rest = self
            .storage_url
            .strip_prefix("http://")
            .expect("an http storage URL");
        let (host, account_path) = rest.split_once('/').expect("a storage URL with a path");
        let addr: SocketAddr = host.parse().expect("a loopback address");
        let mut path = format!("/{account_path}/{}", self.container);
        if !name.is_empty() && !name.starts_with('?') {
            path.push('/');
        }
        path.push_str(name);
        let mut all = vec![("X-Auth-Token", self.token.as_str())];
        all.extend_from_slice(headers);
        // 503 is Swift's "try again later"; every request here is idempotent.
        let mut attempts = 0;
        loop {
            let answer = request(addr, method, &path, &all, body)
                .unwrap_or_else(|e| panic!("{method} {path} on Swift: {e}"));
            attempts += 1;
            if answer.status != 503 || attempts == 5 {
                return answer;
            }
        }
    }

    /// Every object name in the container under `prefix` (one listing page; tests hold fewer
    /// than Swift's 10000).
    pub fn names(&self, prefix: &str) -> Vec<String> {
        let answer = self.raw("GET", &format!("?format=json&prefix={prefix}"), &[], b"");
        if answer.status == 204 {
            return Vec::new();
        }
        assert_eq!(answer.status, 200, "{answer:?}");
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&answer.body)
            .unwrap_or_else(|e| panic!("Swift's listing is not JSON ({e}): {answer:?}"));
        listed
            .iter()
            .filter_map(|e| e["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Invalidates every tempauth token (empties memcached, where tempauth keeps them): the
    /// next request with an old token is answered 401, as after a token expired.
    pub fn expire_tempauth_tokens(&self) {
        let addr: SocketAddr = ([127, 0, 0, 1], self.memcache_port).into();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("cannot reach memcached at {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"flush_all\r\n").unwrap();
        let mut answer = [0u8; 4];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"OK\r\n", "memcached's answer to flush_all");
    }

    /// The directory holding the configuration, rings, objects and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes druid's Swift Secret for this server into `dir`, one file per key, with
    /// `password` as the password (the right one is [`SWIFT_KEY`] with tempauth,
    /// [`KEYSTONE_PASSWORD`] with Keystone).
    pub fn write_secret(&self, dir: &Path, password: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let (tenant, user) = if self.application_credential.is_some() {
            (KEYSTONE_PROJECT, KEYSTONE_USER)
        } else {
            (SWIFT_ACCOUNT, SWIFT_USER)
        };
        for (key, value) in [
            ("authURL", self.auth_url.as_str()),
            ("domainName", "Default"),
            ("tenantName", tenant),
            ("username", user),
            ("password", password),
        ] {
            std::fs::write(dir.join(key), value).unwrap();
        }
        dir.to_path_buf()
    }
}

/// The names of the user and group running the tests.
fn current_user_and_group() -> (String, String) {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |u| u.name);
    let group = nix::unistd::Group::from_gid(nix::unistd::getgid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |g| g.name);
    (user, group)
}

/// Configures a Keystone on SQLite in `dir/keystone` (schema, Fernet keys, the admin, the
/// identity endpoint at `addr`); returns its configuration file.
fn setup_keystone(dir: &Path, addr: SocketAddr) -> PathBuf {
    let home = dir.join("keystone");
    for sub in ["fernet", "credential"] {
        std::fs::create_dir_all(home.join(sub)).unwrap();
    }
    let conf = home.join("keystone.conf");
    std::fs::write(
        &conf,
        format!(
            "[DEFAULT]\nuse_stderr = true\n[database]\nconnection = sqlite:///{h}/keystone.db\n\
             [token]\nprovider = fernet\n[fernet_tokens]\nkey_repository = {h}/fernet\n\
             [fernet_receipts]\nkey_repository = {h}/fernet\n\
             [credential]\nkey_repository = {h}/credential\n",
            h = home.display()
        ),
    )
    .unwrap();
    let manage = |args: &[&str]| {
        run(Command::new("/usr/bin/keystone-manage")
            .arg("--config-file")
            .arg(&conf)
            .args(args))
    };
    manage(&["db_sync"]);
    // The key directories belong to whoever runs the tests.
    let (user, group) = current_user_and_group();
    for setup in ["fernet_setup", "credential_setup"] {
        manage(&[setup, "--keystone-user", &user, "--keystone-group", &group]);
    }
    manage(&[
        "bootstrap",
        "--bootstrap-password",
        KEYSTONE_ADMIN_PASSWORD,
        "--bootstrap-username",
        "admin",
        "--bootstrap-project-name",
        "admin",
        "--bootstrap-role-name",
        "admin",
        "--bootstrap-service-name",
        "keystone",
        "--bootstrap-region-id",
        KEYSTONE_REGION,
        "--bootstrap-public-url",
        &format!("http://{addr}/v3"),
    ]);
    // In SQLite's default journal a reader's open transaction keeps Keystone's next write
    // waiting ("database is locked"); in WAL mode readers do not block the writer.
    run(Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode=WAL')",
        ])
        .arg(home.join("keystone.db")));
    conf
}

/// A Keystone password token: `(token, the token's JSON)`.
fn keystone_token(
    log: &Path,
    addr: SocketAddr,
    user: &str,
    password: &str,
    project: &str,
) -> (String, serde_json::Value) {
    let body = serde_json::json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"name": "Default"}, "password": password}}},
        "scope": {"project": {"name": project, "domain": {"name": "Default"}}},
    }});
    let answer = keystone_call(log, addr, "POST", "/v3/auth/tokens", None, &body);
    let token = answer
        .0
        .header("x-subject-token")
        .expect("X-Subject-Token")
        .to_string();
    (token, answer.1)
}

/// A Keystone API call with a JSON body; panics unless it succeeds.
fn keystone_call(
    log: &Path,
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &serde_json::Value,
) -> (Answer, serde_json::Value) {
    let text = body.to_string();
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(t) = token {
        headers.push(("X-Auth-Token", t));
    }
    let body = if body.is_null() {
        &b""[..]
    } else {
        text.as_bytes()
    };
    let answer = request(addr, method, path, &headers, body)
        .unwrap_or_else(|e| panic!("{method} {path} on Keystone: {e}"));
    assert!(
        (200..300).contains(&answer.status),
        "{method} {path} on Keystone: {} {}; Keystone's log:\n{}",
        answer.head,
        String::from_utf8_lossy(&answer.body),
        std::fs::read_to_string(log).unwrap_or_default()
    );
    let json = serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
    (answer, json)
}

/// Registers Swift (at `proxy_url`) in Keystone's catalog and creates the test project, its
/// member user and an application credential; returns the user's storage URL and token.
fn keystone_objects(
    log: &Path,
    addr: SocketAddr,
    proxy_url: &str,
) -> (String, String, ApplicationCredential) {
    let (admin, _) = keystone_token(log, addr, "admin", KEYSTONE_ADMIN_PASSWORD, "admin");
    let admin = Some(admin.as_str());
    let id = |v: &serde_json::Value, kind: &str| v[kind]["id"].as_str().expect("an id").to_string();
    let (_, service) = keystone_call(
        log,
        addr,
        "POST",
        "/v3/services",
        admin,
        &serde_json::json!({"service": {"type": "object-store", "name": "swift"}}),
    );
    keystone_call(
        log,
        addr,
        "POST",
        "/v3/endpoints",
        admin,
        &serde_json::json!({"endpoint": {
            "service_id": id(&service, "service"), "interface": "public",
            "region_id": KEYSTONE_REGION, "url": format!("{proxy_url}/v1/AUTH_%(project_id)s"),
        }}),
    );
    let (_, project) = keystone_call(
        log,
        addr,
        "POST",
        "/v3/projects",
        admin,
        &serde_json::json!({"project": {"name": KEYSTONE_PROJECT, "domain_id": "default"}}),
    );
    let (_, user) = keystone_call(
        log,
        addr,
        "POST",
        "/v3/users",
        admin,
        &serde_json::json!({"user": {
            "name": KEYSTONE_USER, "password": KEYSTONE_PASSWORD, "domain_id": "default"}}),
    );
    let (_, roles) = keystone_call(
        log,
        addr,
        "GET",
        "/v3/roles?name=member",
        admin,
        &serde_json::Value::Null,
    );
    let role = roles["roles"][0]["id"]
        .as_str()
        .expect("the member role")
        .to_string();
    let user_id = id(&user, "user");
    keystone_call(
        log,
        addr,
        "PUT",
        &format!(
            "/v3/projects/{}/users/{user_id}/roles/{role}",
            id(&project, "project")
        ),
        admin,
        &serde_json::Value::Null,
    );
    let (token, scoped) = keystone_token(
        log,
        addr,
        KEYSTONE_USER,
        KEYSTONE_PASSWORD,
        KEYSTONE_PROJECT,
    );
    let storage_url = scoped["token"]["catalog"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "object-store")
        .flat_map(|e| e["endpoints"].as_array().into_iter().flatten())
        .find(|e| e["interface"] == "public")
        .and_then(|e| e["url"].as_str())
        .expect("the object-store endpoint in the user's catalog")
        .to_string();
    let (_, app) = keystone_call(
        log,
        addr,
        "POST",
        &format!("/v3/users/{user_id}/application_credentials"),
        Some(&token),
        &serde_json::json!({"application_credential": {"name": "quorate-backups"}}),
    );
    let app = &app["application_credential"];
    let application_credential = ApplicationCredential {
        id: app["id"].as_str().expect("an id").to_string(),
        name: app["name"].as_str().expect("a name").to_string(),
        secret: app["secret"].as_str().expect("a secret").to_string(),
    };
    (storage_url, token, application_credential)
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A plain HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The status line and headers.
    pub head: String,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// One HTTP/1.1 request.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Answer> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    s.write_all(text.as_bytes())?;
    s.write_all(body)?;
    let mut response = Vec::new();
    s.read_to_end(&mut response)?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("an HTTP answer without the end of its head"))?;
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let mut body = response[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))?;
    Ok(Answer { status, head, body })
}

/// The data of a chunked HTTP body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
    out
}
