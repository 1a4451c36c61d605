//! A real OpenStack Swift, all in one temporary directory: Debian's `swift-proxy-server`,
//! `swift-account-server`, `swift-container-server` and `swift-object-server` (installed by
//! `scripts/install-swift.sh`) with one-replica rings on free loopback ports, tempauth (v1 auth)
//! and the memcached tempauth keeps its tokens in. Every process dies with the guard.

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

/// A running all-in-one Swift with one container; every process is killed when dropped.
pub struct SwiftServer {
    /// The v1 auth URL, `http://127.0.0.1:<port>/auth/v1.0`.
    pub auth_url: String,
    /// The container created at start.
    pub container: String,
    /// `X-Storage-Url` of the test account, for requests the tests make themselves.
    pub storage_url: String,
    /// A valid token for those requests.
    pub token: String,
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
    /// Starts Swift with container `container`. `None` (after printing why) when Swift is not
    /// installed and `CI` is not set; panics when it is.
    pub fn start(container: &str) -> Option<SwiftServer> {
        let bin = swift_bin_dir();
        let missing: Vec<String> = [
            "swift-proxy-server",
            "swift-account-server",
            "swift-container-server",
            "swift-object-server",
            "swift-ring-builder",
        ]
        .iter()
        .map(|b| bin.join(b))
        .chain(std::iter::once(PathBuf::from("/usr/bin/memcached")))
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
        let block = PortBlock::reserve(5);
        let [proxy, account, container_port, object, memcache] = block.ports()[..] else {
            unreachable!("five ports reserved")
        };
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
                     bind_port = {port}\nworkers = 0\nswift_dir = {}\nlog_level = WARNING\n\
                     [pipeline:main]\npipeline = {kind}-server\n\
                     [app:{kind}-server]\nuse = egg:swift#{kind}\n",
                    devices.display(),
                    etc.display()
                ),
            )
            .unwrap();
        }
        let filters = [
            "catch_errors",
            "gatekeeper",
            "healthcheck",
            "proxy_logging",
            "listing_formats",
            "bulk",
            "slo",
            "dlo",
        ];
        let mut proxy_conf = format!(
            "[DEFAULT]\nbind_ip = 127.0.0.1\nbind_port = {proxy}\nworkers = 0\nswift_dir = {}\n\
             log_level = WARNING\n\
             [pipeline:main]\npipeline = catch_errors gatekeeper healthcheck proxy_logging cache \
             listing_formats bulk slo dlo tempauth proxy_logging proxy-server\n\
             [app:proxy-server]\nuse = egg:swift#proxy\naccount_autocreate = true\n\
             [filter:tempauth]\nuse = egg:swift#tempauth\nuser_{SWIFT_ACCOUNT}_{SWIFT_USER} = {SWIFT_KEY} .admin\n\
             [filter:cache]\nuse = egg:swift#memcache\nmemcache_servers = 127.0.0.1:{memcache}\n",
            etc.display()
        );
        for f in filters {
            proxy_conf.push_str(&format!("[filter:{f}]\nuse = egg:swift#{f}\n"));
        }
        std::fs::write(etc.join("proxy-server.conf"), proxy_conf).unwrap();

        block.release();
        let log =
            |name: &str| std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
        let mut children = Vec::new();
        let memcached_log = log("memcached");
        children.push(
            ChildGuard::spawn(
                Command::new("/usr/bin/memcached")
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
            children.push(
                ChildGuard::spawn(
                    Command::new(bin.join(format!("swift-{kind}-server")))
                        .arg(etc.join(format!("{kind}-server.conf")))
                        .stdin(Stdio::null())
                        .stdout(out.try_clone().unwrap())
                        .stderr(out),
                )
                .unwrap_or_else(|e| panic!("cannot start swift-{kind}-server: {e}")),
            );
        }
        let addr: SocketAddr = ([127, 0, 0, 1], proxy).into();
        let logs = || {
            ["memcached", "account", "container", "object", "proxy"]
                .iter()
                .map(|n| {
                    format!(
                        "--- {n}:\n{}",
                        std::fs::read_to_string(dir.path().join(format!("{n}.log")))
                            .unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        // Swift's servers take a few seconds to import; authenticating and creating the container
        // (which needs the account and container servers) is the readiness check.
        let deadline = Instant::now() + Duration::from_secs(90);
        let auth = loop {
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
            match attempt {
                Ok(r) if r.status == 200 => break r,
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Ok(r) => panic!("Swift's tempauth answered {}; logs:\n{}", r.status, logs()),
                Err(e) => panic!(
                    "Swift did not answer on {addr} within 90s ({e}); logs:\n{}",
                    logs()
                ),
            }
        };
        let storage_url = auth
            .header("x-storage-url")
            .expect("X-Storage-Url")
            .to_string();
        let token = auth
            .header("x-auth-token")
            .expect("X-Auth-Token")
            .to_string();
        let account_path = storage_url
            .split_once(&format!("{addr}"))
            .map(|(_, p)| p.to_string())
            .expect("storage URL on the proxy");
        loop {
            match request(
                addr,
                "PUT",
                &format!("{account_path}/{container}"),
                &[("X-Auth-Token", &token)],
                b"",
            ) {
                Ok(r) if (200..300).contains(&r.status) => break,
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Ok(r) => panic!(
                    "Swift refused to create container {container}: {}; logs:\n{}",
                    r.status,
                    logs()
                ),
                Err(e) => panic!(
                    "Swift did not create container {container} ({e}); logs:\n{}",
                    logs()
                ),
            }
        }
        Some(SwiftServer {
            auth_url: format!("http://{addr}/auth/v1.0"),
            container: container.to_string(),
            storage_url,
            token,
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
        request(addr, method, &path, &all, body)
            .unwrap_or_else(|e| panic!("{method} {path} on Swift: {e}"))
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

    /// The directory holding the configuration, rings, objects and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes druid's Swift Secret for this server into `dir`, one file per key, with
    /// `password` as the password (the right one is [`SWIFT_KEY`]).
    pub fn write_secret(&self, dir: &Path, password: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        for (key, value) in [
            ("authURL", self.auth_url.as_str()),
            ("domainName", "default"),
            ("tenantName", SWIFT_ACCOUNT),
            ("username", SWIFT_USER),
            ("password", password),
        ] {
            std::fs::write(dir.join(key), value).unwrap();
        }
        dir.to_path_buf()
    }
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
