//! moto's S3 server (from PyPI, installed by `scripts/install-deps.sh` into a venv) as a child
//! process with one bucket: the second, out-of-process S3 implementation the tests use.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::{ChildGuard, free_port};

/// Where `scripts/install-deps.sh` puts moto's server (`$QUORATE_VENV`, else
/// `~/.cache/quorate/venv`).
pub fn moto_binary() -> PathBuf {
    let venv = std::env::var_os("QUORATE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quorate/venv")
        });
    venv.join("bin/moto_server")
}

/// A running moto S3 server holding one bucket; killed when dropped.
pub struct MotoServer {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The bucket created at start.
    pub bucket: String,
    _child: ChildGuard,
    _log_dir: TempDir,
}

impl MotoServer {
    /// Starts moto with one bucket. `None` (after printing why) when moto is not installed
    /// and `CI` is not set; panics when it is.
    pub fn start(bucket: &str) -> Option<MotoServer> {
        let binary = moto_binary();
        if !binary.exists() {
            let msg = format!(
                "moto_server not found at {}: run scripts/install-deps.sh to install it",
                binary.display()
            );
            if std::env::var_os("CI").is_some() {
                panic!("{msg}");
            }
            eprintln!("SKIPPED (moto): {msg}");
            return None;
        }
        let log_dir = tempfile::Builder::new()
            .prefix("quorate-moto-")
            .tempdir()
            .unwrap();
        let log_path = log_dir.path().join("moto.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let port = free_port();
        let child = ChildGuard::spawn(
            Command::new(&binary)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log),
        )
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        // moto takes a second or two to import; creating the bucket doubles as readiness check.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match http_request(addr, "PUT", &format!("/{bucket}")) {
                Ok(status) if (200..300).contains(&status) => break,
                Ok(status) => panic!(
                    "moto refused to create bucket {bucket}: HTTP {status}; log:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!(
                    "moto did not answer on {addr} within 60s ({e}); log:\n{}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ),
            }
        }
        Some(MotoServer {
            endpoint: format!("http://{addr}"),
            bucket: bucket.to_string(),
            _child: child,
            _log_dir: log_dir,
        })
    }
}

/// One unsigned HTTP/1.1 request without a body; returns the status code.
fn http_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {response:?}")))
}
