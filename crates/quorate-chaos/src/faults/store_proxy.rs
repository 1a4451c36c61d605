//! A slow or failing object store, for real: a TCP proxy in front of the S3 server that passes
//! bytes through, delays them, refuses connections, cuts them mid-transfer, answers requests
//! itself with S3's own errors (500 InternalError, 503 SlowDown), or acknowledges uploads of
//! snapshots (`200 OK` with an ETag) without passing them on, as the current [`StoreFault`]
//! says. To lose a write it follows the HTTP/1.1 requests in the client's byte stream
//! ([`Framer`]): request heads and `Content-Length` bodies, so it knows where each request
//! starts on a kept-alive connection.

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
    /// A store that loses writes: every single-request upload (`PUT` without a query) of a
    /// snapshot object (`Full-…`, `Incr-…`) is answered `200 OK` by the proxy and never
    /// reaches the store. Other requests (listings, markers, hash records, reads) pass.
    LoseWrites,
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
    lost: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl StoreProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let fault = Arc::new(Mutex::new(StoreFault::None));
        let lost = Arc::new(Mutex::new(Vec::new()));
        let (shared, shared_lost) = (fault.clone(), lost.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let now = *shared.lock().expect("fault lock");
                tokio::spawn(serve(
                    client,
                    upstream,
                    now,
                    shared.clone(),
                    shared_lost.clone(),
                ));
            }
        });
        Ok(Self {
            addr,
            fault,
            lost,
            task,
        })
    }

    /// Sets how new and running connections are treated.
    pub fn set(&self, fault: StoreFault) {
        *self.fault.lock().expect("fault lock") = fault;
    }

    /// The request targets (`/bucket/key`) of the uploads acknowledged and lost so far.
    pub fn lost(&self) -> Vec<String> {
        self.lost.lock().expect("lost lock").clone()
    }
}

/// Where the client's byte stream stands, request by request.
#[derive(Debug)]
enum Framing {
    /// Collecting a request head (up to its empty line).
    Head(Vec<u8>),
    /// Inside a body: `left` bytes to go, passed on or (`lost`: the request's target) dropped.
    Body { left: u64, lost: Option<String> },
    /// Something this framer does not follow (chunked bodies, a malformed or huge head):
    /// the rest of the connection passes untouched.
    Blind,
}

/// What to do with the bytes a [`Framer`] was fed.
#[derive(Debug, PartialEq, Eq)]
enum Piece {
    /// Pass these on to the store.
    Forward(Vec<u8>),
    /// This upload was read whole and dropped: answer it in the store's place.
    Lost(String),
}

/// Follows HTTP/1.1 requests in a client's byte stream, and drops the uploads of snapshot
/// objects while told to lose writes.
#[derive(Debug)]
struct Framer {
    state: Framing,
}

/// A head longer than this is not followed (S3 request heads are a few KiB).
const MAX_HEAD: usize = 64 * 1024;

impl Framer {
    fn new() -> Self {
        Self {
            state: Framing::Head(Vec::new()),
        }
    }

    /// Takes the next bytes from the client; `lose` says whether a request whose head
    /// completes now is an upload to drop (when it is one of a snapshot).
    fn feed(&mut self, mut data: &[u8], lose: bool) -> Vec<Piece> {
        let mut out = Vec::new();
        let forward = |out: &mut Vec<Piece>, bytes: &[u8]| {
            if bytes.is_empty() {
                return;
            }
            match out.last_mut() {
                Some(Piece::Forward(v)) => v.extend_from_slice(bytes),
                _ => out.push(Piece::Forward(bytes.to_vec())),
            }
        };
        while !data.is_empty() {
            match &mut self.state {
                Framing::Blind => {
                    forward(&mut out, data);
                    data = &[];
                }
                Framing::Body { left, lost } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                    if lost.is_none() {
                        forward(&mut out, &data[..take]);
                    }
                    *left -= take as u64;
                    data = &data[take..];
                    if *left == 0 {
                        if let Some(target) = lost.take() {
                            out.push(Piece::Lost(target));
                        }
                        self.state = Framing::Head(Vec::new());
                    }
                }
                Framing::Head(head) => {
                    let before = head.len();
                    head.extend_from_slice(data);
                    let Some(end) = find_end_of_head(head) else {
                        data = &[];
                        if head.len() > MAX_HEAD {
                            let all = std::mem::take(head);
                            forward(&mut out, &all);
                            self.state = Framing::Blind;
                        }
                        continue;
                    };
                    // What of `data` belongs to this head; the rest is its body and after.
                    let used = end - before;
                    data = &data[used..];
                    let head = std::mem::take(head);
                    let Some(request) = RequestHead::parse(&head[..end]) else {
                        forward(&mut out, &head[..end]);
                        self.state = Framing::Blind;
                        continue;
                    };
                    let dropped =
                        (lose && request.is_snapshot_upload()).then(|| request.target.clone());
                    if dropped.is_none() {
                        forward(&mut out, &head[..end]);
                    }
                    match (request.chunked, request.content_length, dropped) {
                        (true, _, _) => self.state = Framing::Blind,
                        (false, 0, Some(target)) => {
                            out.push(Piece::Lost(target));
                            self.state = Framing::Head(Vec::new());
                        }
                        (false, 0, None) => self.state = Framing::Head(Vec::new()),
                        (false, left, lost) => self.state = Framing::Body { left, lost },
                    }
                }
            }
        }
        out
    }
}

/// The end (exclusive) of the first `\r\n\r\n` in `buf`.
fn find_end_of_head(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// What the framer needs of a request head.
#[derive(Debug)]
struct RequestHead {
    method: String,
    target: String,
    content_length: u64,
    chunked: bool,
}

impl RequestHead {
    fn parse(head: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(head).ok()?;
        let mut lines = text.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
        first.next()?.starts_with("HTTP/1.").then_some(())?;
        let mut content_length = 0;
        let mut chunked = false;
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, value) = line.split_once(':')?;
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.parse().ok()?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = true;
            }
        }
        Some(Self {
            method,
            target,
            content_length,
            chunked,
        })
    }

    /// A whole snapshot object in one `PUT` (not a part of a multipart upload, not a marker).
    fn is_snapshot_upload(&self) -> bool {
        let name = self.target.rsplit('/').next().unwrap_or_default();
        self.method == "PUT"
            && !self.target.contains('?')
            && (name.starts_with("Full-") || name.starts_with("Incr-"))
    }
}

/// The store's answer to an upload the proxy dropped.
fn lost_write_answer(target: &str) -> String {
    // Any ETag will do for the client; one derived from the target keeps answers distinct.
    let tag = target.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!(
        "HTTP/1.1 200 OK\r\nETag: \"{tag:016x}{tag:016x}\"\r\nContent-Length: 0\r\n\
         x-amz-request-id: quorate-chaos-lost\r\n\r\n"
    )
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
    lost: Arc<Mutex<Vec<String>>>,
) {
    if at_accept == StoreFault::Refuse {
        return;
    }
    // The request is answered by the proxy alone under the answering faults.
    if let Some(text) = at_accept.http_answer() {
        drain(&mut client).await;
        let _ = client.write_all(text.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, client_write) = client.into_split();
    // Both the store's answers and the proxy's own (to dropped uploads) go to the client; the
    // client waits for one before its next request, so they never interleave.
    let client_write = tokio::sync::Mutex::new(client_write);
    let (mut server_read, mut server_write) = server.into_split();
    let current = || *fault.lock().expect("fault lock");
    let upload = async {
        let mut sent = 0usize;
        let mut framer = Framer::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                // The client is done sending; the answer may still be on its way.
                server_write.shutdown().await?;
                return std::future::pending().await;
            }
            let now = current();
            match now {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::CutAfter(limit) if sent + n > limit => return Ok(None),
                StoreFault::Refuse => return Ok(None),
                f @ (StoreFault::ServerError | StoreFault::Throttle) => return Ok(Some(f)),
                _ => {}
            }
            sent += n;
            for piece in framer.feed(&buf[..n], now == StoreFault::LoseWrites) {
                match piece {
                    Piece::Forward(bytes) => server_write.write_all(&bytes).await?,
                    Piece::Lost(target) => {
                        let answer = lost_write_answer(&target);
                        lost.lock().expect("lost lock").push(target);
                        client_write
                            .lock()
                            .await
                            .write_all(answer.as_bytes())
                            .await?;
                    }
                }
            }
        }
    };
    let download = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return client_write.lock().await.shutdown().await;
            }
            match current() {
                StoreFault::Slow(d) => tokio::time::sleep(d).await,
                StoreFault::Refuse => return Ok(()),
                _ => {}
            }
            client_write.lock().await.write_all(&buf[..n]).await?;
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
        drain(&mut client_read).await;
        let mut client_write = client_write.into_inner();
        let _ = client_write.write_all(text.as_bytes()).await;
        let _ = client_write.shutdown().await;
    }
}

/// Reads what the client still sends, until it pauses for 100 ms or closes.
async fn drain(client: &mut (impl AsyncReadExt + Unpin)) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
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

    /// Every way of cutting a kept-alive stream into reads: the framer passes on exactly the
    /// requests it does not drop, drops a snapshot upload whole (head and body), and leaves
    /// everything alone when not told to lose writes.
    #[test]
    fn the_framer_drops_exactly_the_snapshot_uploads() {
        let list = "GET /b?list-type=2&prefix=p HTTP/1.1\r\nHost: x\r\n\r\n";
        let upload = "PUT /b/p/v2/Incr-00000011-00000020-1764320000.gz HTTP/1.1\r\n\
                      Host: x\r\ncontent-length: 5\r\n\r\nhello";
        let marker = "PUT /b/p.owner HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nid";
        let part = "PUT /b/p/v2/Full-00000000-00000010-1764320000?partNumber=1&uploadId=u \
                    HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        let stream = [list, upload, marker, part].concat();
        for chunk in 1..=stream.len() {
            for lose in [false, true] {
                let mut framer = Framer::new();
                let mut forwarded = Vec::new();
                let mut lost = Vec::new();
                for piece in stream
                    .as_bytes()
                    .chunks(chunk)
                    .flat_map(|c| framer.feed(c, lose))
                {
                    match piece {
                        Piece::Forward(b) => forwarded.extend(b),
                        Piece::Lost(t) => lost.push(t),
                    }
                }
                let forwarded = String::from_utf8(forwarded).unwrap();
                if lose {
                    assert_eq!(forwarded, [list, marker, part].concat(), "chunk {chunk}");
                    assert_eq!(
                        lost,
                        ["/b/p/v2/Incr-00000011-00000020-1764320000.gz"],
                        "chunk {chunk}"
                    );
                } else {
                    assert_eq!(forwarded, stream, "chunk {chunk}");
                    assert!(lost.is_empty());
                }
            }
        }
    }

    /// A chunked body is not followed: the rest of the connection passes untouched.
    #[test]
    fn the_framer_passes_what_it_does_not_follow() {
        let chunked = "PUT /b/p/v2/Incr-1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n0\r\n\r\nPUT /b/p/v2/Full-2 HTTP/1.1\r\n\r\n";
        let mut framer = Framer::new();
        assert_eq!(
            framer.feed(chunked.as_bytes(), false),
            [Piece::Forward(chunked.as_bytes().to_vec())]
        );
        assert_eq!(
            framer.feed(b"more", true),
            [Piece::Forward(b"more".to_vec())]
        );
        let mut framer = Framer::new();
        assert_eq!(
            framer.feed(b"garbage\r\n\r\nPUT /b/Full-1 HTTP/1.1\r\n\r\n", true),
            [Piece::Forward(
                b"garbage\r\n\r\nPUT /b/Full-1 HTTP/1.1\r\n\r\n".to_vec()
            )]
        );
    }
}
