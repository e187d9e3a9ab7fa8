//! TLS on the server's one port (`--tls-cert`, `--tls-key`): rustls offering HTTP/2 and HTTP/1.1
//! (gRPC and the API share the port), handshakes done beside the accept loop so a slow client
//! delays nobody, and the certificate read again when its files change (a renewed certificate
//! takes effect without a restart).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The certificate chain and key files (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certified key of `files`, or what is wrong with them.
fn load(files: &TlsFiles) -> Result<CertifiedKey, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("cannot read a private key from {}: {e}", files.key.display()))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the key in {} cannot sign: {e}", files.key.display()))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "{} and {} do not belong together: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    Ok(certified)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The certificate in force, replaced when its files change.
#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    current: RwLock<(Arc<CertifiedKey>, [Option<SystemTime>; 2])>,
}

impl Reloading {
    fn stamps(&self) -> [Option<SystemTime>; 2] {
        [modified(&self.files.cert), modified(&self.files.key)]
    }

    fn reload_if_changed(&self) {
        let stamps = self.stamps();
        if self.current.read().unwrap_or_else(|p| p.into_inner()).1 == stamps {
            return;
        }
        match load(&self.files) {
            Ok(key) => {
                tracing::info!(cert = %self.files.cert.display(), "TLS certificate read again");
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(key), stamps);
            }
            // A certificate and key written one after the other may not match for a moment.
            Err(e) => {
                tracing::warn!(error = %e, "the changed TLS files cannot be used yet; the certificate in force stays")
            }
        }
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap_or_else(|p| p.into_inner()).0.clone())
    }
}

/// The server's TLS: accepts handshakes with the certificate in force.
#[derive(Clone)]
pub struct Acceptor(TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// A TLS acceptor for `files`, its certificate reloaded while the server runs.
pub fn acceptor(files: &TlsFiles) -> Result<Acceptor, String> {
    let key = load(files)?;
    let reloading = Arc::new(Reloading {
        files: files.clone(),
        current: RwLock::new((Arc::new(key), [None, None])),
    });
    reloading.current.write().unwrap_or_else(|p| p.into_inner()).1 = reloading.stamps();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(reloading.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let weak = Arc::downgrade(&reloading);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            let Some(r) = weak.upgrade() else { return };
            r.reload_if_changed();
        }
    });
    Ok(Acceptor(TlsAcceptor::from(Arc::new(config))))
}

/// Accepted connections after their TLS handshake, for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: Acceptor) -> std::io::Result<TlsListener> {
        let acceptor = acceptor.0;
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, then go on.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (ready, acceptor) = (tx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = ready.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
