//! The connections of the server's one port: HTTP/1.1 and HTTP/2 (gRPC) served by hyper, over
//! plain TCP or TLS, with deadlines a slow or silent client cannot stretch, and every request
//! told who is on the other end ([`Peer`]).
//!
//! Deadlines: a client has [`FIRST_BYTES_TIMEOUT`] to send the start of its first request (the
//! HTTP/2 preface, or an HTTP/1.1 request line), an HTTP/1.1 request head must be complete within
//! [`HEADER_READ_TIMEOUT`], an HTTP/2 connection that stops answering pings is closed, and one
//! with no request open for [`Limits::idle`] is closed too (answering pings is not using it).
//!
//! Bounds: open connections, overall and per client address ([`Places`]), so that one address
//! cannot take every place and lock other agents and readers out. Clients on many addresses can
//! still fill the bound with connections that ask nothing: once fewer than a sixteenth of the
//! places are free, each connection that takes one (or finds none) closes the connection that
//! has had nothing under way the longest, [`EVICT_AFTER`] at least, so a newcomer finds room
//! (an agent's ingest stream is always under way: agents are never closed for it).
//!
//! Connections cut off before a request, failed TLS handshakes and connections beyond a bound
//! are counted in `bimodal_connections_refused_total{reason}`.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

/// How long a new connection may take to send its first bytes.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an HTTP/1.1 request head may take.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 connections are pinged this often when idle, and closed when a ping is not answered
/// within [`KEEP_ALIVE_TIMEOUT`].
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes a client may send on an HTTP/2 stream (and connection) before the server reads them.
/// What a stream has received and not read is held outside the ingest bound (a stream waiting
/// for admission reads nothing, and its agent goes on sending until the window is full), so
/// this is the memory each agent connection may cost beyond it: 256 KiB, against hyper's 1 MiB
/// (1,000 agents catching up: 256 MiB, not 1 GiB). At 50 ms round trips a stream still moves
/// 5 MB/s, three agent batches a second.
const STREAM_WINDOW: u32 = 256 << 10;
/// The same for all streams of a connection together (hyper's default). Room for every
/// stream's window was tried (50 MiB for 200 streams, so that streams waiting for admission
/// could not hold back the others of their connection): with 10,000 nodes multiplexed onto 200
/// connections, clients then sent batches the server went on to refuse, and the bench's run
/// had twice the retries, 26% more server CPU per sample and 36% more peak memory (BENCHMARKS.md).
/// A full connection window is backpressure that costs nothing.
const CONNECTION_WINDOW: u32 = 1 << 20;
/// Bytes that tell the protocol: the HTTP/2 preface is 24.
const FIRST_BYTES: usize = 24;
/// File descriptors the default connection bound leaves for everything else: ClickHouse
/// connections, uploads arriving, the token and certificate files, the log.
const DESCRIPTORS_KEPT: u64 = 256;

/// Connections served at once by default: what the process's file-descriptor limit (raised to
/// its hard limit) leaves after [`DESCRIPTORS_KEPT`]. Past the limit `accept` would fail for everyone, ClickHouse's
/// connections included; under the bound only the newest clients are turned away.
pub fn default_max_connections() -> usize {
    let soft = raise_open_file_limit();
    soft.min(1 << 20).saturating_sub(DESCRIPTORS_KEPT).max(64) as usize
}

/// Raises the process's soft limit on open files to its hard limit (allowed without privileges;
/// the soft limit is often 1,024, which would leave room for a few hundred agents); returns the
/// soft limit in force.
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    limit.rlim_cur
}

/// How long a connection must have had nothing under way before it may be closed to make room
/// for a newcomer (a reader between two requests keeps its connection).
pub const EVICT_AFTER: Duration = Duration::from_secs(5);

/// How long a connection told to close (idle, or the server stopping) may take to finish what it
/// is doing before it is cut off.
const CLOSE_GRACE: Duration = SHUTDOWN_GRACE;

/// How long a shutdown waits for open connections to finish (an agent's ingest stream or an
/// upload may never end by itself); then they are closed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a connection may stay open with no request under way, by default: an HTTP/2 client
/// that answers pings and asks nothing (0 of 100 such connections were closed in 75 s, issue
/// 49) would otherwise hold its place for good. Agents always have their ingest stream open;
/// a gRPC client whose connection was closed while idle opens another for its next call.
pub const DEFAULT_CONNECTION_IDLE: Duration = Duration::from_secs(60);

/// The bounds of the port's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections at most.
    pub max: usize,
    /// Open connections from one client address at most ([`Limits::per_address_default`]).
    pub per_address: usize,
    /// A connection with no request under way for this long is closed.
    pub idle: Duration,
    /// A connection with no request under way for this long may be closed to make room for a
    /// newcomer once few places are free ([`EVICT_AFTER`]).
    pub evict_after: Duration,
}

impl Limits {
    /// A quarter of `max`: a client that fills its share from one address leaves three
    /// quarters to everyone else. (An agent holds one or two connections; a load balancer or a
    /// NAT in front of the server, where every agent has its address, needs more.)
    pub fn per_address_default(max: usize) -> usize {
        (max / 4).max(1)
    }

    /// `max` connections, a quarter from one address, [`DEFAULT_CONNECTION_IDLE`],
    /// [`EVICT_AFTER`].
    pub fn new(max: usize) -> Limits {
        Limits {
            max,
            per_address: Limits::per_address_default(max),
            idle: DEFAULT_CONNECTION_IDLE,
            evict_after: EVICT_AFTER,
        }
    }
}

/// Places held at once (open connections, agent streams): a bound on all of them and one per
/// client address.
#[derive(Debug)]
pub(crate) struct Places {
    all: Arc<Semaphore>,
    max: usize,
    per_address: usize,
    by_address: std::sync::Mutex<HashMap<IpAddr, usize>>,
    /// The connections being served: the ones that may be closed to make room
    /// ([`Places::make_room`]).
    served: std::sync::Mutex<Served>,
    numbers: std::sync::atomic::AtomicU64,
    evict_after: Duration,
}

/// The connections being served, by their place's number, and where the next look for one to
/// close starts.
#[derive(Debug, Default)]
struct Served {
    by_number: indexmap::IndexMap<u64, Arc<Activity>>,
    next: usize,
}

/// Served connections [`Places::make_room`] looks at per newcomer, in turn round all of them:
/// looking at every one, under the lock, made each connection of a flood cost as much as the
/// connections served (100,000 of them at a large fleet's server).
const EVICTION_LOOKS: usize = 64;

/// Which bound refused a place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every place is taken.
    All,
    /// The client's address holds its share.
    Address,
}

/// The place one connection (or stream) holds until it closes.
#[derive(Debug)]
pub(crate) struct Place {
    _all: OwnedSemaphorePermit,
    places: Arc<Places>,
    ip: IpAddr,
    /// Its number among the served connections, once it is one ([`Place::served`]).
    number: Option<u64>,
}

impl Places {
    /// `max` places, `per_address` of them at most for one client address.
    pub(crate) fn new(max: usize, per_address: usize) -> Arc<Places> {
        Places::evicting_after(max, per_address, EVICT_AFTER)
    }

    /// [`Places::new`] whose connections may be closed to make room after `evict_after` with
    /// nothing under way.
    fn evicting_after(max: usize, per_address: usize, evict_after: Duration) -> Arc<Places> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Arc::new(Places {
            all: Arc::new(Semaphore::new(max)),
            max,
            per_address: per_address.max(1),
            by_address: Default::default(),
            served: Default::default(),
            numbers: Default::default(),
            evict_after,
        })
    }

    /// The most places one address may hold.
    pub(crate) fn per_address(&self) -> usize {
        self.per_address
    }

    /// A place for the client at `ip`, or the bound that refused it.
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Place, Full> {
        let ip = ip.to_canonical();
        let Ok(all) = self.all.clone().try_acquire_owned() else {
            return Err(Full::All);
        };
        let mut by_address = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        let held = by_address.entry(ip).or_insert(0);
        if *held >= self.per_address {
            return Err(Full::Address);
        }
        *held += 1;
        Ok(Place {
            _all: all,
            places: self.clone(),
            ip,
            number: None,
        })
    }

    /// Once fewer than a sixteenth of the places are free (one, of fewer than 16), closes the
    /// served connection that has had nothing under way the longest, if that is
    /// `evict_after` ([`EVICT_AFTER`]) or more: its place is free once it has closed. Of the
    /// next [`EVICTION_LOOKS`] served connections, in turn round all of them: a flood of idle
    /// connections fills most places, so a few looks find one.
    fn make_room(&self) {
        if self.all.available_permits() >= (self.max / 16).max(1) {
            return;
        }
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        let n = served.by_number.len();
        let from = if n == 0 { 0 } else { served.next % n };
        let looks = n.min(EVICTION_LOOKS);
        served.next = from + looks;
        let idlest = (0..looks)
            .filter_map(|k| served.by_number.get_index((from + k) % n).map(|(_, a)| a))
            .filter_map(|a| Some((a.quiet_for()?, a)))
            .filter(|(quiet, a)| *quiet >= self.evict_after && !a.evicted.load(Ordering::Acquire))
            .max_by_key(|(quiet, _)| *quiet);
        if let Some((quiet, activity)) = idlest {
            activity.evicted.store(true, Ordering::Release);
            activity.evict.notify_one();
            tracing::debug!(?quiet, "closing the idlest connection to make room for a new one");
        }
    }

    /// A place for a connection from `addr`, or none: the connection is to be closed, and is
    /// counted as `too_many_connections` (every place is taken) or `too_many_from_address`
    /// (its address holds its share).
    fn connection(self: &Arc<Self>, addr: SocketAddr) -> Option<Place> {
        match self.take(addr.ip()) {
            Ok(place) => {
                self.make_room();
                Some(place)
            }
            Err(Full::All) => {
                self.make_room();
                count_refused_connection("too_many_connections");
                tracing::debug!(%addr, "closed a connection beyond the bound on open connections");
                None
            }
            Err(Full::Address) => {
                count_refused_connection("too_many_from_address");
                tracing::debug!(%addr, per_address = self.per_address, "closed a connection beyond its address's share");
                None
            }
        }
    }

    fn release(&self, ip: IpAddr) {
        let mut by_address = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = by_address.get_mut(&ip) {
            *held -= 1;
            if *held == 0 {
                by_address.remove(&ip);
            }
        }
    }

    /// Waits until every place is free: every connection closed.
    async fn all_free(&self) {
        let _ = self.all.acquire_many(self.max as u32).await;
    }
}

impl Place {
    /// Counts this place's connection among the served ones, which may be closed to make room
    /// when it has nothing under way (`activity`).
    fn served(&mut self, activity: Arc<Activity>) {
        let number = self.places.numbers.fetch_add(1, Ordering::Relaxed);
        self.places
            .served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_number
            .insert(number, activity);
        self.number = Some(number);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(number) = self.number {
            self.places
                .served
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .by_number
                .swap_remove(&number);
        }
        self.places.release(self.ip);
    }
}

/// Whether a connection has requests under way, and since when it has had none.
#[derive(Debug)]
struct Activity {
    open: AtomicUsize,
    /// When the last request ended (or the connection opened).
    quiet_since: std::sync::Mutex<Instant>,
    /// Told to close to make room for a newcomer ([`Places::make_room`]).
    evict: tokio::sync::Notify,
    evicted: AtomicBool,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            quiet_since: std::sync::Mutex::new(Instant::now()),
            evict: tokio::sync::Notify::new(),
            evicted: AtomicBool::new(false),
        })
    }

    /// How long nothing has been under way; `None` while something is.
    fn quiet_for(&self) -> Option<Duration> {
        let quiet_since = *self.quiet_since.lock().unwrap_or_else(|e| e.into_inner());
        (self.open.load(Ordering::Acquire) == 0).then(|| quiet_since.elapsed())
    }

    /// Counts a request under way until the guard is dropped.
    fn start(self: &Arc<Self>) -> Underway {
        self.open.fetch_add(1, Ordering::AcqRel);
        Underway(self.clone())
    }

    /// Returns once no request has been under way for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let quiet_since = *self.quiet_since.lock().unwrap_or_else(|e| e.into_inner());
            let wait = match self.open.load(Ordering::Acquire) {
                0 => idle.saturating_sub(quiet_since.elapsed()),
                _ => idle,
            };
            if wait.is_zero() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

/// A request under way, until its response's body is done.
struct Underway(Arc<Activity>);

impl Drop for Underway {
    fn drop(&mut self) {
        *self.0.quiet_since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's [`Underway`] until it is done or dropped: a gRPC
/// stream's response is its whole life.
struct UnderwayBody {
    body: axum::body::Body,
    _underway: Underway,
}

impl http_body::Body for UnderwayBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.body)
    }
}

/// Who sent a request: the connection's address and, over TLS, the client certificate it
/// presented (verified against `--tls-client-ca` during the handshake).
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    pub certificate: Option<CertificateDer<'static>>,
    /// The rest of the chain the client presented with its certificate (to verify it again
    /// when the client CA changes).
    pub intermediates: Vec<CertificateDer<'static>>,
}

impl Peer {
    /// Whether the client certificate names `node` (a DNS name of its subject alternative names,
    /// wildcards as TLS matches them). False without a certificate, and for a node name that is
    /// not a DNS name.
    pub fn certified_for(&self, node: &str) -> bool {
        let Some(der) = &self.certificate else { return false };
        let Ok(name) = ServerName::try_from(node) else {
            return false;
        };
        let Ok(cert) = rustls::server::ParsedCertificate::try_from(der) else {
            return false;
        };
        rustls::client::verify_server_name(&cert, &name).is_ok()
    }
}

/// Where connections come from.
#[derive(Debug)]
pub enum Incoming {
    Plain(TcpListener),
    Tls(TlsListener),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

impl Incoming {
    /// The next connection, its peer, and the place it holds in `places`; connections that find
    /// no place are closed at once (over TLS, before their handshake).
    async fn accept(&mut self, places: &Arc<Places>) -> (Box<dyn Io>, Peer, Place) {
        match self {
            Incoming::Plain(listener) => loop {
                match listener.accept().await {
                    Ok((stream, addr)) => {
                        let Some(place) = places.connection(addr) else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        let peer = Peer {
                            addr,
                            certificate: None,
                            intermediates: Vec::new(),
                        };
                        return (Box::new(stream), peer, place);
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait, then go on.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            },
            Incoming::Tls(listener) => {
                let (stream, addr, place) = listener.accept(places).await;
                let chain: Vec<CertificateDer<'static>> = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .unwrap_or_default()
                    .iter()
                    .map(|c| c.clone().into_owned())
                    .collect();
                let mut chain = chain.into_iter();
                let peer = Peer {
                    addr,
                    certificate: chain.next(),
                    intermediates: chain.collect(),
                };
                (Box::new(stream), peer, place)
            }
        }
    }
}

/// Serves `app` on every connection of `incoming` within `limits` (a connection beyond them is
/// closed at once and counted), closing connections idle for `limits.idle`, until `shutdown`
/// completes; then stops accepting, lets open connections finish what they are doing (HTTP/2
/// streams are told to go away) for [`SHUTDOWN_GRACE`], and returns.
pub async fn serve(mut incoming: Incoming, app: Router, limits: Limits, shutdown: impl Future<Output = ()> + Send) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW);
    let builder = Arc::new(builder);
    let places = Places::evicting_after(limits.max, limits.per_address, limits.evict_after);
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (io, peer, mut place) = tokio::select! {
            accepted = incoming.accept(&places) => accepted,
            () = &mut shutdown => break,
        };
        let addr = peer.addr;
        // Whether the connection got as far as a request: a timeout after one is an idle
        // keep-alive connection closing (hyper arms the header timeout again while it waits for
        // the next request), not a slow client.
        let served = Arc::new(AtomicBool::new(false));
        let activity = Activity::new();
        place.served(activity.clone());
        let service = hyper::service::service_fn({
            let app = app.clone();
            let served = served.clone();
            let activity = activity.clone();
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                served.store(true, Ordering::Relaxed);
                let underway = activity.start();
                request.extensions_mut().insert(peer.clone());
                let response = tower::ServiceExt::oneshot(app.clone(), request);
                async move {
                    let response = response.await?;
                    Ok::<_, std::convert::Infallible>(response.map(|body| {
                        axum::body::Body::new(UnderwayBody {
                            body,
                            _underway: underway,
                        })
                    }))
                }
            }
        });
        let builder = builder.clone();
        let mut stopping = stopping.clone();
        tokio::spawn(async move {
            let _place = place;
            let io = TokioIo::new(FirstBytes::new(io, FIRST_BYTES_TIMEOUT));
            let connection = builder.serve_connection_with_upgrades(io, service);
            tokio::pin!(connection);
            // Once told to go away, the client has CLOSE_GRACE to finish; then it is cut off
            // (an HTTP/2 client that does not answer the server's GOAWAY ping would otherwise
            // keep its place until the keep-alive gives up on it).
            let mut closing: Option<tokio::time::Instant> = None;
            let ended = loop {
                let cut_off = closing.unwrap_or_else(|| tokio::time::Instant::now() + CLOSE_GRACE);
                tokio::select! {
                    ended = connection.as_mut() => break Some(ended),
                    () = activity.idle_for(limits.idle), if closing.is_none() => {
                        if !served.load(Ordering::Relaxed) {
                            count_refused_connection("idle");
                        }
                        tracing::debug!(%addr, idle = ?limits.idle, "closing a connection with no request under way");
                        connection.as_mut().graceful_shutdown();
                        closing = Some(cut_off);
                    }
                    () = activity.evict.notified(), if closing.is_none() => {
                        if !served.load(Ordering::Relaxed) {
                            count_refused_connection("evicted_idle");
                        }
                        tracing::debug!(%addr, "closing an idle connection to make room");
                        connection.as_mut().graceful_shutdown();
                        closing = Some(cut_off);
                    }
                    _ = stopping.wait_for(|&stop| stop), if closing.is_none() => {
                        connection.as_mut().graceful_shutdown();
                        closing = Some(cut_off);
                    }
                    () = tokio::time::sleep_until(cut_off), if closing.is_some() => break None,
                }
            };
            if let Some(Err(e)) = ended {
                // A timeout before any request: an HTTP/1.1 request head that did not arrive in
                // time (or an HTTP/2 connection that never asked anything and stopped answering
                // pings).
                let timed_out = e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout);
                if timed_out && !served.load(Ordering::Relaxed) {
                    count_refused_connection("slow_headers");
                }
                tracing::debug!(%addr, error = %e, "connection ended");
            }
        });
    }
    drop(incoming);
    let _ = stop.send(true);
    if tokio::time::timeout(SHUTDOWN_GRACE, places.all_free()).await.is_err() {
        tracing::info!(grace = ?SHUTDOWN_GRACE, "connections still open at shutdown are closed");
    }
}

/// Counts a connection closed before any request was served, under `reason`
/// (`bimodal_connections_refused_total`): tls_handshake, tls_timeout, silent, slow_headers, idle,
/// evicted_idle (asked nothing, and closed to make room for a newcomer),
/// too_many_connections, too_many_from_address.
pub(crate) fn count_refused_connection(reason: &'static str) {
    crate::metrics::metrics()
        .connections_refused
        .get_or_create(&crate::metrics::label("reason", reason))
        .inc();
}

/// A stream whose first [`FIRST_BYTES`] must arrive before a deadline: a client that connects
/// and sends nothing (or too little to tell its protocol) is cut off, and counted as `silent`,
/// instead of holding a connection and its task forever.
struct FirstBytes<T> {
    inner: T,
    deadline: Option<Pin<Box<Sleep>>>,
    missing: usize,
    /// The deadline passed: every read fails (and the cut-off was counted once).
    cut_off: bool,
}

impl<T> FirstBytes<T> {
    fn new(inner: T, within: Duration) -> FirstBytes<T> {
        FirstBytes {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            missing: FIRST_BYTES,
            cut_off: false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstBytes<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let silent = || std::io::Error::new(std::io::ErrorKind::TimedOut, "the client sent no request in time");
        let before = buf.filled().len();
        let this = &mut *self;
        if this.cut_off {
            return Poll::Ready(Err(silent()));
        }
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let read = buf.filled().len() - before;
                this.missing = this.missing.saturating_sub(read);
                if this.missing == 0 || read == 0 {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let expired = this.deadline.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if expired {
                    this.cut_off = true;
                    count_refused_connection("silent");
                    Poll::Ready(Err(silent()))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FirstBytes<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// How long a message admitted on the port may take to arrive after its first bytes: 10 s, and a
/// second per MiB (64 MiB, the largest batch, in 74 s; a 2 MB batch over a link of 1 MB/s needs
/// 2 s). A stream's Hello has the time of its largest size, counted from the stream's opening;
/// an upload of a debug file the time of its stated size.
pub(crate) fn time_to_receive(bytes: usize) -> std::time::Duration {
    std::time::Duration::from_secs(10 + (bytes as u64 >> 20))
}

/// Connections accepted over TCP and handed on once their TLS handshake is done. The handshakes
/// run beside the accept loop, each holding the connection's place under the server's bound on
/// open connections from its first byte: a flood of clients that never finish a handshake is
/// refused at the bound like any other, instead of holding descriptors beside it.
#[derive(Debug)]
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: crate::tls::Acceptor,
    done: mpsc::Sender<Handshaken>,
    ready: mpsc::Receiver<Handshaken>,
}

/// A connection whose handshake is done, its client's address, and its place.
type Handshaken = (TlsStream<TcpStream>, SocketAddr, Place);

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: crate::tls::Acceptor) -> TlsListener {
        let (done, ready) = mpsc::channel(64);
        TlsListener {
            tcp,
            acceptor,
            done,
            ready,
        }
    }

    /// The next connection whose handshake is done, the client's address and the place it holds
    /// in `places`. A connection that finds no place is closed before its handshake and counted
    /// as `too_many_connections`. Cancel-safe: a handshake under way goes on and is handed out
    /// by a later call.
    pub(crate) async fn accept(&mut self, places: &Arc<Places>) -> Handshaken {
        loop {
            tokio::select! {
                Some(handshaken) = self.ready.recv() => return handshaken,
                accepted = self.tcp.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of file descriptors and the like: wait, then go on.
                            tracing::warn!(error = %e, "accepting a connection failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let Some(place) = places.connection(peer) else { continue };
                    let (done, acceptor) = (self.done.clone(), self.acceptor.clone());
                    tokio::spawn(async move {
                        match acceptor.handshake(stream).await {
                            Some(Ok(tls)) => {
                                let _ = done.send((tls, peer, place)).await;
                            }
                            // Counted whatever the cause: a client that does not speak TLS, trusts
                            // another CA, presents a certificate of another CA, or closes before a
                            // handshake (a TCP health check).
                            Some(Err(e)) => {
                                count_refused_connection("tls_handshake");
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            }
                            None => {
                                count_refused_connection("tls_timeout");
                                tracing::debug!(%peer, "TLS handshake timed out");
                            }
                        }
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_client_is_cut_off_and_a_talking_one_is_not() {
        let silent = || {
            crate::metrics::metrics()
                .connections_refused
                .get_or_create(&crate::metrics::label("reason", "silent"))
                .get()
        };
        let within = Duration::from_millis(200);
        let (client, server) = tokio::io::duplex(64);
        let mut stream = FirstBytes::new(server, within);
        let mut buf = [0u8; 64];
        let before = silent();
        let err = stream.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        // Every later read fails too. (Other tests of the process may count as well: the count
        // must have risen.)
        assert_eq!(
            stream.read(&mut buf).await.unwrap_err().kind(),
            std::io::ErrorKind::TimedOut
        );
        assert!(silent() > before, "the cut-off is not counted");
        drop(client);

        let (mut client, server) = tokio::io::duplex(64);
        let mut stream = FirstBytes::new(server, within);
        client.write_all(&[b'x'; FIRST_BYTES]).await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), FIRST_BYTES);
        // Past its first bytes a connection is the protocol's to time out.
        tokio::time::sleep(within * 2).await;
        client.write_all(b"late").await.unwrap();
        assert_eq!(stream.read(&mut buf).await.unwrap(), 4);
    }

    /// An HTTP/1.1 keep-alive GET on `stream`; true when it was answered.
    async fn answered(stream: &mut tokio::net::TcpStream) -> bool {
        if stream.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n").await.is_err() {
            return false;
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"ok") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        true
    }

    /// A connection is closed once no request has been under way on it for the idle bound, not
    /// while one is: a request (or a gRPC stream) longer than the bound is served whole.
    #[tokio::test]
    async fn only_connections_with_nothing_under_way_are_closed_as_idle() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route(
            "/",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                "ok"
            }),
        );
        let limits = Limits {
            idle: Duration::from_millis(200),
            ..Limits::new(8)
        };
        tokio::spawn(serve(Incoming::Plain(listener), app, limits, std::future::pending()));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            answered(&mut stream).await,
            "a request longer than the idle bound was cut off"
        );
        // Then nothing is under way: the connection is closed (well before hyper's own 10 s
        // keep-alive bound).
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "an idle connection stayed open");
    }

    /// One address gets its share of the places; another address still finds one.
    #[tokio::test]
    async fn an_address_holds_its_share_of_the_places_and_no_more() {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let limits = Limits {
            per_address: 2,
            ..Limits::new(4)
        };
        tokio::spawn(serve(Incoming::Plain(listener), app, limits, std::future::pending()));
        let from = |ip: &str| {
            let ip: IpAddr = ip.parse().unwrap();
            async move {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind(SocketAddr::new(ip, 0)).unwrap();
                socket.connect(SocketAddr::new(ip, port)).await.unwrap()
            }
        };
        let mut first = from("127.0.0.2").await;
        let mut second = from("127.0.0.2").await;
        assert!(answered(&mut first).await && answered(&mut second).await);
        let mut third = from("127.0.0.2").await;
        assert!(!answered(&mut third).await, "an address took more than its share");
        let mut other = from("127.0.0.3").await;
        assert!(answered(&mut other).await, "another address found no place");
        // A place given back is the address's again.
        drop(first);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut next = from("127.0.0.2").await;
            if answered(&mut next).await {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the address's place was not freed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Making room looks at [`EVICTION_LOOKS`] served connections per newcomer, in turn round
    /// all of them: an idle one past the first looks is found by a later newcomer, and one with
    /// a request under way is never closed.
    #[test]
    fn room_is_looked_for_a_few_connections_at_a_time_round_all_of_them() {
        let places = Places::evicting_after(200, 200, Duration::ZERO);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (mut held, mut busy, mut activities) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..200 {
            let mut place = places.take(ip).unwrap();
            let activity = Activity::new();
            if i != 150 {
                busy.push(activity.start());
            }
            place.served(activity.clone());
            held.push(place);
            activities.push(activity);
        }
        let evicted = |i: usize| activities[i].evicted.load(Ordering::Acquire);
        places.make_room();
        assert!(
            !evicted(150),
            "the first newcomer looked past its {EVICTION_LOOKS} connections"
        );
        for _ in 0..3 {
            places.make_room();
        }
        assert!(evicted(150), "the idle connection was never found");
        assert_eq!(
            (0..200).filter(|&i| evicted(i)).count(),
            1,
            "a busy connection was closed"
        );
    }

    /// Clients on many addresses that fill the bound and then ask nothing do not lock a
    /// newcomer out: once few places are free, the connection idle the longest is closed to
    /// make room, and one with a request under way never is.
    #[tokio::test]
    async fn the_idlest_connection_makes_room_for_a_newcomer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" })).route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                "ok"
            }),
        );
        let limits = Limits {
            per_address: 4,
            evict_after: Duration::from_millis(200),
            ..Limits::new(4)
        };
        tokio::spawn(serve(Incoming::Plain(listener), app, limits, std::future::pending()));
        // The oldest connection has a request under way the whole time.
        let mut busy = tokio::net::TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut idle = Vec::new();
        for _ in 0..3 {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            assert!(answered(&mut stream).await);
            idle.push(stream);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Every place is taken (a newcomer is turned away while the connection idle the longest
        // closes) and then the newcomer is served: within 3 s, well before hyper's own 10 s
        // bound on an HTTP/1.1 connection waiting for its next request would free a place.
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        loop {
            let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
            if answered(&mut next).await {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no room was made");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The room was the idlest connection's.
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(1), idle[0].read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "the idlest connection stayed open");
        // The connection with its request under way was not closed: it gets its answer.
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"ok") {
            match tokio::time::timeout(Duration::from_secs(5), busy.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                other => panic!("the connection with a request under way was closed: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_closed_and_counted() {
        let refused = || {
            crate::metrics::metrics()
                .connections_refused
                .get_or_create(&crate::metrics::label("reason", "too_many_connections"))
                .get()
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(
            Incoming::Plain(listener),
            app,
            Limits {
                per_address: 2,
                ..Limits::new(2)
            },
            std::future::pending(),
        ));

        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(answered(&mut first).await && answered(&mut second).await);
        let before = refused();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(!answered(&mut third).await, "a third connection is served");
        assert!(refused() > before, "the refusal is not counted");
        // The two keep being served; once one closes, its place is free again.
        assert!(answered(&mut first).await);
        drop(second);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut next = tokio::net::TcpStream::connect(addr).await.unwrap();
            if answered(&mut next).await {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the closed connection's place was not freed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
#[path = "../../testdata/fixtures/pki.rs"]
mod pki;

#[cfg(test)]
mod tls_tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// The TLS files of a server for 127.0.0.1, and a client config trusting its CA.
    fn certificates(dir: &std::path::Path) -> (crate::tls::TlsFiles, rustls::ClientConfig) {
        let ca = super::pki::Ca::new();
        let files = crate::tls::TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_ca: None,
        };
        ca.sign(&["127.0.0.1"], &files.cert, &files.key);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        (files, client)
    }

    /// Whether the server closes `stream` within a second (it holds no place for it).
    async fn closed_at_once(stream: &mut tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 16];
        matches!(
            tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    /// Over TLS a connection takes its place before its handshake: clients that connect and
    /// never start one fill the bound, and the next is closed at once, not left to hold a
    /// descriptor for the handshake's 10 s.
    #[tokio::test]
    async fn connections_waiting_for_their_handshake_count_against_the_bound() {
        let refused = || {
            crate::metrics::metrics()
                .connections_refused
                .get_or_create(&crate::metrics::label("reason", "too_many_connections"))
                .get()
        };
        let dir = tempfile::tempdir().unwrap();
        let (files, client) = certificates(dir.path());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = Incoming::Tls(TlsListener::new(listener, crate::tls::acceptor(&files).unwrap()));
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(
            incoming,
            app,
            Limits {
                per_address: 2,
                ..Limits::new(2)
            },
            std::future::pending(),
        ));

        let first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            !closed_at_once(&mut second).await,
            "a connection within the bound is closed"
        );
        let before = refused();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(
            closed_at_once(&mut third).await,
            "a third connection waits for its handshake"
        );
        assert!(refused() > before, "the refusal is not counted");
        // Once a silent client leaves, its place serves a real handshake.
        drop(first);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = ServerName::try_from("127.0.0.1").unwrap();
            if connector.connect(name, tcp).await.is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the place of the closed connection was not freed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
