//! etcd versions in tests: the version annotation on a manifest, and what a member's etcd
//! answers on `/version`.

use std::io::{Read, Write};
use std::time::Duration;

/// `manifest` with the `quorate.io/etcd-version` annotation.
pub fn versioned(text: &str, version: &str) -> String {
    text.replace(
        "  namespace: default\n",
        &format!(
            "  namespace: default\n  annotations:\n    quorate.io/etcd-version: \"{version}\"\n"
        ),
    )
}

/// etcd's `/version` answer of the member at `client_url`: (server, cluster); `None` while it
/// does not answer (restarting). etcd moves the cluster version once every member runs the
/// new version.
pub fn etcd_versions(client_url: &str) -> Option<(String, String)> {
    let address = client_url.trim_start_matches("http://");
    let mut stream =
        std::net::TcpStream::connect_timeout(&address.parse().ok()?, Duration::from_millis(300))
            .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"GET /version HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let body = answer.split("\r\n\r\n").nth(1)?;
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    Some((
        json["etcdserver"].as_str()?.to_string(),
        json["etcdcluster"].as_str()?.to_string(),
    ))
}
