//! Readiness of a member as its agent reports it (`GET /healthz`), the local stand-in for a
//! pod's `ContainersReady`.

use quorate_core::cluster_config::TlsFiles;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Whether the agent on `127.0.0.1:port` answers `/healthz` with 200 within `timeout`, over
/// HTTPS trusting the agents' CA when they serve TLS (`tls`).
pub async fn agent_ready(port: u16, tls: Option<&TlsFiles>, timeout: Duration) -> bool {
    let status = match tls {
        None => tokio::time::timeout(timeout, get_status(port, "/healthz"))
            .await
            .ok()
            .flatten(),
        Some(files) => https_status(port, files, timeout).await,
    };
    status == Some(200)
}

/// Whether the agent on `127.0.0.1:port` answers HTTP at all (any status) within `timeout`:
/// it runs and serves, ready or not.
pub async fn agent_answers(port: u16, tls: Option<&TlsFiles>, timeout: Duration) -> bool {
    match tls {
        None => tokio::time::timeout(timeout, get_status(port, "/healthz"))
            .await
            .ok()
            .flatten()
            .is_some(),
        Some(files) => https_status(port, files, timeout).await.is_some(),
    }
}

async fn https_status(port: u16, files: &TlsFiles, timeout: Duration) -> Option<u16> {
    let client = quorate_coord::agent_tls::http_client(Some(files)).ok()?;
    let response = client
        .get(format!("https://127.0.0.1:{port}/healthz"))
        .timeout(timeout)
        .send()
        .await
        .ok()?;
    Some(response.status().as_u16())
}

async fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = [0u8; 16];
    let n = stream.read(&mut head).await.ok()?;
    // "HTTP/1.1 200 OK"
    std::str::from_utf8(&head[..n])
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_the_status_code_and_fails_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for reply in [
                "HTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.1 503 Service Unavailable\r\n\r\n",
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf).await;
                s.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        assert!(agent_ready(port, None, Duration::from_secs(2)).await);
        assert!(!agent_ready(port, None, Duration::from_secs(2)).await);
        server.await.unwrap();
        assert!(
            !agent_ready(port, None, Duration::from_millis(200)).await,
            "nothing listens any more"
        );
    }
}
