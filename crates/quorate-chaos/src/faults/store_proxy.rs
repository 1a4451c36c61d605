//! A slow or failing object store, for real: a TCP proxy in front of the S3 server that passes
//! bytes through, delays them, refuses connections, cuts them mid-transfer, or answers requests
//! itself with S3's own errors (500 InternalError, 503 SlowDown), as the current [`StoreFault`]
//! says.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the proxy treats connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum StoreFault {
    /// Bytes pass through.
    #[default]
    None,
    /// Every chunk waits this long in each direction.
    Slow(Duration),
    /// Connections are closed as soon as they are accepted.
    Refuse,
    /// Connections are cut after this many bytes from the client (mid-upload).
    CutAfter(usize),
    /// Every request is answered `500 Internal Server Error` (S3 `InternalError`) by the
    /// proxy; the store never sees it.
    ServerError,
    /// Every request is answered `503 Slow Down` (S3 `SlowDown`, throttling) by the proxy.
    Throttle,
}

impl StoreFault {
    /// The HTTP answer the proxy gives in place of the store, for the faults that answer.
    fn http_answer(self) -> Option<String> {
        let (status, code) = match self {
            StoreFault::ServerError => ("500 Internal Server Error", "InternalError"),
            StoreFault::Throttle => ("503 Slow Down", "SlowDown"),
            _ => return None,
        };
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>injected by quorate-chaos</Message></Error>"
        );
        Some(format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ))
    }
}

/// The running proxy; stops when dropped.
pub struct StoreProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    fault: Arc<Mutex<StoreFault>>,
    task: tokio::task::JoinHandle<()>,
}

impl StoreProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fault = Arc::new(Mutex::new(StoreFault::None));
        let shared = fault.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let now = *shared.lock().expect("fault lock");
                tokio::spawn(serve(client, upstream, now, shared.clone()));
            }
        });
        Ok(Self { addr, fault, task })
    }

    /// Sets how new and running connections are treated.
    pub fn set(&self, fault: StoreFault) {
        *self.fault.lock().expect("fault lock") = fault;
    }
}

impl Drop for StoreProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    at_accept: StoreFault,
    fault: Arc<Mutex<StoreFault>>,
) {
    if at_accept == StoreFault::Refuse {
        return;
    }
    // The request is answered by the proxy alone under the answering faults.
    if let Some(text) = at_accept.http_answer() {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
        }
        let _ = client.write_all(text.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let current = || *fault.lock().expect("fault lock");
    let upload = async {
        let mut sent = 0usize;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                // The client is done sending; the answer may still be on its way.
                server_write.shutdown().await?;
                return std::future::pending().await;
            }
            match current() {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::CutAfter(limit) if sent + n > limit => return Ok(None),
                StoreFault::Refuse => return Ok(None),
                f @ (StoreFault::ServerError | StoreFault::Throttle) => return Ok(Some(f)),
                _ => {}
            }
            sent += n;
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let download = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return client_write.shutdown().await;
            }
            match current() {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::Refuse => return Ok(()),
                _ => {}
            }
            client_write.write_all(&buf[..n]).await?;
        }
    };
    // Either direction ending (or being cut) ends the connection.
    let answer: std::io::Result<Option<StoreFault>> = tokio::select! {
        r = upload => r,
        r = download => r.map(|()| None),
    };
    if let Ok(Some(fault)) = answer
        && let Some(text) = fault.http_answer()
    {
        // Take in the rest of the request first, so the client reads the answer instead of a
        // reset; then answer in the store's place and close.
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
        }
        let _ = client.write_all(text.as_bytes()).await;
        let _ = client.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request through the proxy under each answering fault gets S3's error from the proxy,
    /// on a new connection and on one opened before the fault; without a fault the upstream
    /// answers.
    #[tokio::test]
    async fn answering_faults_answer_in_the_stores_place() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                        if s.write_all(ok.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = StoreProxy::start(upstream_addr).await.unwrap();
        let request = b"PUT /b/k HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
        let status = |s: &str| s.lines().next().unwrap_or_default().to_owned();
        let mut early = TcpStream::connect(proxy.addr).await.unwrap();
        early.write_all(request).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = early.read(&mut buf).await.unwrap();
        assert_eq!(
            status(&String::from_utf8_lossy(&buf[..n])),
            "HTTP/1.1 200 OK"
        );

        for (fault, want, code) in [
            (
                StoreFault::ServerError,
                "HTTP/1.1 500 Internal Server Error",
                "InternalError",
            ),
            (StoreFault::Throttle, "HTTP/1.1 503 Slow Down", "SlowDown"),
        ] {
            proxy.set(fault);
            let mut fresh = TcpStream::connect(proxy.addr).await.unwrap();
            fresh.write_all(request).await.unwrap();
            let mut answer = String::new();
            fresh.read_to_string(&mut answer).await.unwrap();
            assert_eq!(status(&answer), want, "{answer}");
            assert!(answer.contains(code), "{answer}");
        }
        // The connection opened before the fault is answered by the proxy too.
        early.write_all(request).await.unwrap();
        let mut answer = String::new();
        early.read_to_string(&mut answer).await.unwrap();
        assert_eq!(status(&answer), "HTTP/1.1 503 Slow Down", "{answer}");
    }
}
