//! A server under test and a minimal HTTP client for its API.

use std::net::SocketAddr;

use bimodal_server::{Config, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// A running server with its own managed ClickHouse in a temporary directory.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_on("127.0.0.1:0".parse().unwrap()).await
    }

    /// A server listening on `listen`.
    pub async fn start_on(listen: SocketAddr) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            listen,
            clickhouse_url: None,
            clickhouse_database: "bimodal".into(),
            data_dir: dir.path().to_owned(),
            retention_days: 30,
        };
        let server = Server::bind(&config)
            .await
            .expect("server starts with a managed ClickHouse");
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        TestServer {
            addr,
            stop: Some(stop),
            task: Some(task),
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// GET `path`; returns the status code and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").expect("HTTP response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status code");
        let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(body)
        } else {
            body.to_owned()
        };
        (status, body)
    }

    /// Stops the server and its ClickHouse.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}
