//! A small HTTP server for the outbound tests: it answers by path, and keeps
//! the request line (and body) of every request it got, so a test can tell
//! what reached it and what was refused before a connection.
//!
//! - `/redirect` answers `302` to the cloud metadata address;
//! - `/hang` reads the request and never answers;
//! - `/endless` answers `200` and streams a body that never ends;
//! - `/stall` answers `200` with the headers of a long body, sends none of
//!   it, and notes when the client closes the connection ([`Received::closed`]);
//! - anything else answers `200 hello`.
//!
//! [`serve_routes`] answers the paths a test gives it first, each with its
//! [`Reply`]: a registry's stand-in, say.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server got: each request's line and body, in order; and the
/// lines of the `/stall` requests whose connection the client closed.
#[derive(Debug, Clone, Default)]
pub struct Received(Arc<Mutex<Vec<(String, String)>>>, Arc<Mutex<Vec<String>>>);

impl Received {
    /// How many `/stall` requests whose lines contain `part` had their
    /// connection closed by the client.
    pub fn closed(&self, part: &str) -> usize {
        self.1.lock().unwrap().iter().filter(|line| line.contains(part)).count()
    }

    /// The request lines (`GET /path HTTP/1.1`).
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(line, _)| line.clone()).collect()
    }

    /// The bodies of the requests whose line contains `part`.
    pub fn bodies(&self, part: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(line, _)| line.contains(part))
            .map(|(_, body)| body.clone())
            .collect()
    }

    /// How many requests' lines contain `part`.
    pub fn count(&self, part: &str) -> usize {
        self.lines().iter().filter(|line| line.contains(part)).count()
    }
}

/// A canned answer of [`serve_routes`].
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Set for a body without end: the bytes of it sent so far.
    endless: Option<Arc<AtomicU64>>,
}

impl Reply {
    /// `status`, no headers, no body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            endless: None,
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body (its `content-length` is added; no body to a `HEAD`).
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Makes the body zeros without end (chunked when a
    /// `transfer-encoding: chunked` header is set, raw otherwise), sent until
    /// the client goes; the returned counter says how many bytes went.
    #[must_use]
    pub fn endless(mut self) -> (Self, Arc<AtomicU64>) {
        let sent = Arc::new(AtomicU64::new(0));
        self.endless = Some(Arc::clone(&sent));
        (self, sent)
    }

    async fn send(&self, stream: &mut TcpStream, head_only: bool) {
        let mut head = format!("HTTP/1.1 {} Stand-in\r\nconnection: close\r\n", self.status);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.endless.is_none() {
            head.push_str(&format!("content-length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        if stream.write_all(head.as_bytes()).await.is_err() || head_only {
            return;
        }
        let Some(sent) = &self.endless else {
            let _ = stream.write_all(&self.body).await;
            return;
        };
        let chunked = self
            .headers
            .iter()
            .any(|(name, value)| name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked"));
        let zeros = vec![0u8; 64 * 1024];
        let piece = if chunked {
            [
                format!("{:x}\r\n", zeros.len()).as_bytes(),
                zeros.as_slice(),
                b"\r\n".as_slice(),
            ]
            .concat()
        } else {
            zeros
        };
        while stream.write_all(&piece).await.is_ok() {
            sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Starts the server on a free loopback port.
pub async fn serve() -> (SocketAddr, Received) {
    serve_on("127.0.0.1").await
}

/// Starts the server on a free port of `ip` (any loopback address).
pub async fn serve_on(ip: &str) -> (SocketAddr, Received) {
    serve_routes(ip, Vec::new()).await
}

/// Starts the server on a free port of `ip` (any loopback address),
/// answering a request whose path starts with one of `routes`' with its
/// reply (the first that matches), and any other as [`serve`] does.
pub async fn serve_routes(ip: &str, routes: Vec<(String, Reply)>) -> (SocketAddr, Received) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    let received = Received::default();
    let kept = received.clone();
    let routes = Arc::new(routes);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, kept.clone(), Arc::clone(&routes)));
        }
    });
    (address, received)
}

async fn answer(mut stream: TcpStream, received: Received, routes: Arc<Vec<(String, Reply)>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let line = head.lines().next().unwrap_or_default().to_owned();
    let body = String::from_utf8_lossy(&buffer[head_end..]).to_string();
    received.0.lock().unwrap().push((line.clone(), body));
    let path = line.split(' ').nth(1).unwrap_or("/");
    if let Some((_, reply)) = routes.iter().find(|(prefix, _)| path.starts_with(prefix.as_str())) {
        reply.send(&mut stream, line.starts_with("HEAD ")).await;
    } else if path.starts_with("/hang") {
        // Hold the connection open, answering nothing.
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    } else if path.starts_with("/redirect") {
        let _ = stream
            .write_all(b"HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest/meta-data/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
    } else if path.starts_with("/stall") {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\nconnection: close\r\n\r\n")
            .await;
        // Sends nothing more; waits for the client to go.
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
        }
        received.1.lock().unwrap().push(line);
    } else if path.starts_with("/endless") {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            .await;
        let piece = format!("{:x}\r\n{}\r\n", 4096, "x".repeat(4096));
        while stream.write_all(piece.as_bytes()).await.is_ok() {}
    } else {
        let _ = stream
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
            )
            .await;
    }
}
