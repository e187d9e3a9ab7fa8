//! TLS on the server's one port (`--tls-cert`, `--tls-key`): rustls offering HTTP/2 and HTTP/1.1
//! (gRPC and the API share the port), handshakes done beside the accept loop so a slow client
//! delays nobody, and the certificate read again when its files change (a renewed certificate
//! takes effect without a restart).
//!
//! With `--tls-client-ca`, clients are asked for a certificate and one they present must chain
//! to that CA (read again when it changes too). A client without one still connects (browsers,
//! `curl` with a token); what it may do is the caller's to decide: ingest takes writes only from
//! an agent whose certificate names its node ([`crate::serve::Peer::certified_for`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The certificate chain and key files (PEM), and the CA that signs client certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// PEM certificates of the CA client certificates must chain to; `None`: none are asked for.
    pub client_ca: Option<PathBuf>,
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
pub struct Acceptor(TlsAcceptor, Option<ClientTrust>);

impl Acceptor {
    /// The TLS handshake of a connection, within the time a client may take for it: `None`
    /// when it timed out.
    pub(crate) async fn handshake(&self, stream: TcpStream) -> Option<std::io::Result<TlsStream<TcpStream>>> {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, self.0.accept(stream))
            .await
            .ok()
    }

    /// The client CA in force, where clients are asked for certificates.
    pub fn client_trust(&self) -> Option<ClientTrust> {
        self.1.clone()
    }
}

/// The client CA in force, to verify a connection's certificate again after the CA changed:
/// a certificate the handshake let in stays in force for its connection only as long as the CA
/// that signed it does.
#[derive(Clone, Debug)]
pub struct ClientTrust(Arc<ClientCa>);

impl ClientTrust {
    /// Changes each time another CA takes effect.
    pub fn version(&self) -> u64 {
        self.0.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the CA in force verifies `certificate` with `intermediates` now.
    pub fn verifies(&self, certificate: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> bool {
        self.0
            .get()
            .verify_client_cert(certificate, intermediates, UnixTime::now())
            .is_ok()
    }
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// A TLS acceptor for `files`, its certificate (and client CA) reloaded while the server runs.
pub fn acceptor(files: &TlsFiles) -> Result<Acceptor, String> {
    let key = load(files)?;
    let reloading = Arc::new(Reloading {
        files: files.clone(),
        current: RwLock::new((Arc::new(key), [None, None])),
    });
    reloading.current.write().unwrap_or_else(|p| p.into_inner()).1 = reloading.stamps();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let client_ca = match &files.client_ca {
        Some(path) => Some(Arc::new(ClientCa::load(path)?)),
        None => None,
    };
    let mut config = match &client_ca {
        Some(ca) => builder.with_client_cert_verifier(ca.clone()),
        None => builder.with_no_client_auth(),
    }
    .with_cert_resolver(reloading.clone());
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let (weak, weak_ca) = (Arc::downgrade(&reloading), client_ca.as_ref().map(Arc::downgrade));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RELOAD_EVERY).await;
            let Some(r) = weak.upgrade() else { return };
            r.reload_if_changed();
            if let Some(ca) = weak_ca.as_ref().and_then(std::sync::Weak::upgrade) {
                ca.reload_if_changed();
            }
        }
    });
    Ok(Acceptor(
        TlsAcceptor::from(Arc::new(config)),
        client_ca.map(ClientTrust),
    ))
}

/// The verifier of client certificates: rustls's, over the CA file in force, rebuilt when the
/// file changes. Clients without a certificate are let through the handshake.
#[derive(Debug)]
struct ClientCa {
    path: PathBuf,
    current: RwLock<(Arc<dyn ClientCertVerifier>, Option<SystemTime>)>,
    /// Bumped each time another CA takes effect.
    version: std::sync::atomic::AtomicU64,
}

impl ClientCa {
    fn load(path: &Path) -> Result<ClientCa, String> {
        Ok(ClientCa {
            path: path.to_owned(),
            current: RwLock::new((Self::verifier(path)?, modified(path))),
            version: Default::default(),
        })
    }

    fn verifier(path: &Path) -> Result<Arc<dyn ClientCertVerifier>, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read the client CA from {}: {e}", path.display()))?
        {
            roots
                .add(cert)
                .map_err(|e| format!("{} holds a certificate that is not a CA: {e}", path.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("{} holds no certificate", path.display()));
        }
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("cannot check client certificates against {}: {e}", path.display()))
    }

    fn reload_if_changed(&self) {
        let stamp = modified(&self.path);
        if self.current.read().unwrap_or_else(|p| p.into_inner()).1 == stamp {
            return;
        }
        match Self::verifier(&self.path) {
            Ok(v) => {
                tracing::info!(client_ca = %self.path.display(), "TLS client CA read again");
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = (v, stamp);
                self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "the changed client CA cannot be used; the one in force stays"),
        }
    }

    fn get(&self) -> Arc<dyn ClientCertVerifier> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).0.clone()
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // No hints (they would borrow from a verifier that may be replaced): a client sends
        // the certificate it has.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.get().verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.get().supported_verify_schemes()
    }
}
