//! How a client (agent, CLI) reaches a bimodal server: over TLS for an `https://` URL (the
//! server's certificate checked against a CA file, or the system's roots), and with the bearer
//! token it presents to a server that has tokens. One place for every gRPC client of bimodal.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::v1::debuginfo_client::DebuginfoClient;
use crate::v1::ingest_client::IngestClient;

/// Adds `authorization: Bearer TOKEN` to every call; nothing without a token.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl Bearer {
    /// `None` or an empty token: no header. A token with characters a header cannot carry is
    /// refused.
    pub fn new(token: Option<&str>) -> Result<Bearer, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Bearer(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Bearer(Some(v)))
                .map_err(|_| "the token holds characters an HTTP header cannot carry".to_owned()),
        }
    }

    /// The header value, for HTTP clients.
    pub fn header(&self) -> Option<&str> {
        self.0.as_ref().and_then(|v| v.to_str().ok())
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// A client certificate and its key (PEM files): who the client is, to a server that asks
/// (`bimodal-server --tls-client-ca`). An agent's names its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClientIdentity {
    /// From a command line's certificate and key flags: both or neither.
    pub fn from_flags(cert: &Option<PathBuf>, key: &Option<PathBuf>) -> Option<ClientIdentity> {
        Some(ClientIdentity {
            cert: cert.clone()?,
            key: key.clone()?,
        })
    }
}

/// Whether `url` is https://.
pub fn is_https(url: &str) -> bool {
    url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// A CA file or client certificate (`tls_given`) with a URL that is not https:// is refused: the
/// user meant TLS, and the URL would send the token in plain text. Every client (gRPC and HTTP)
/// holds to this.
pub fn plain_only_without_tls(url: &str, tls_given: bool) -> Result<(), String> {
    match tls_given && !is_https(url) {
        true => Err(format!(
            "`{url}` is not https://: a CA file or client certificate is for TLS, and this URL would send in plain text"
        )),
        false => Ok(()),
    }
}

/// A channel to `url`: plain for `http://`; for `https://`, TLS with the server's certificate
/// checked against the PEM certificates of `ca_file`, or the system's roots without one, and
/// `identity` presented when given. Files are read at every call: rotated ones take effect at the
/// next connection.
pub async fn channel(
    url: &str,
    ca_file: Option<&Path>,
    identity: Option<&ClientIdentity>,
) -> Result<tonic::transport::Channel, Box<dyn std::error::Error + Send + Sync>> {
    let endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())?;
    plain_only_without_tls(url, ca_file.is_some() || identity.is_some())?;
    let endpoint = match (is_https(url), ca_file) {
        (false, _) => endpoint,
        (true, ca) => {
            let tls = tonic::transport::ClientTlsConfig::new();
            let tls = match ca {
                Some(path) => {
                    let pem =
                        std::fs::read(path).map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
                    tls.ca_certificate(tonic::transport::Certificate::from_pem(pem))
                }
                None => tls.with_native_roots(),
            };
            let tls = match identity {
                Some(id) => {
                    let read = |path: &Path, what: &str| {
                        std::fs::read(path)
                            .map_err(|e| format!("cannot read the client {what} {}: {e}", path.display()))
                    };
                    tls.identity(tonic::transport::Identity::from_pem(
                        read(&id.cert, "certificate")?,
                        read(&id.key, "key")?,
                    ))
                }
                None => tls,
            };
            endpoint.tls_config(tls)?
        }
    };
    endpoint.connect().await.map_err(|e| with_sources(&e).into())
}

/// An error and its sources on one line: tonic's transport errors say only "transport error"
/// at the top.
pub fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Where a client's token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Value(String),
    /// A file holding the token (surrounding whitespace ignored).
    File(PathBuf),
}

/// The server and how a client (an agent, `bimodal import`) proves who it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddress {
    /// gRPC URL, e.g. `http://127.0.0.1:7070`.
    pub url: String,
    pub token: Option<Token>,
    /// PEM certificates of the CA that signed the server's certificate (https:// only).
    pub ca_file: Option<PathBuf>,
    /// The client certificate, naming the node written as, for a server that asks for one.
    pub identity: Option<ClientIdentity>,
}

pub type Ingest = IngestClient<InterceptedService<Channel, Bearer>>;
pub type Debuginfo = DebuginfoClient<InterceptedService<Channel, Bearer>>;

impl Token {
    /// From a command line's flags: a token file before a token given as a value.
    pub fn from_flags(file: &Option<PathBuf>, value: &Option<String>) -> Option<Token> {
        match (file, value) {
            (Some(path), _) => Some(Token::File(path.clone())),
            (None, Some(t)) => Some(Token::Value(t.clone())),
            (None, None) => None,
        }
    }
}

impl ServerAddress {
    /// A server at `url`, reached with `token`, trusted by the system's roots for https://.
    pub fn new(url: impl Into<String>, token: Option<Token>) -> ServerAddress {
        ServerAddress {
            url: url.into(),
            token,
            ca_file: None,
            identity: None,
        }
    }

    /// The same, trusting the CA of `ca_file` for https://.
    pub fn with_ca_file(self, ca_file: Option<PathBuf>) -> ServerAddress {
        ServerAddress { ca_file, ..self }
    }

    /// The same, presenting this client certificate.
    pub fn with_identity(self, identity: Option<ClientIdentity>) -> ServerAddress {
        ServerAddress { identity, ..self }
    }

    /// The token to present now.
    pub fn bearer(&self) -> anyhow::Result<Bearer> {
        let token = match &self.token {
            None => None,
            Some(Token::Value(t)) => Some(t.clone()),
            Some(Token::File(path)) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the token file {}", path.display()))?,
            ),
        };
        Bearer::new(token.as_deref()).map_err(|e| anyhow::anyhow!(e))
    }

    async fn channel(&self) -> anyhow::Result<(Channel, Bearer)> {
        let bearer = self.bearer()?;
        let channel = crate::client::channel(&self.url, self.ca_file.as_deref(), self.identity.as_ref())
            .await
            .map_err(|e| anyhow::anyhow!("failed to connect to `{}`: {e}", self.url))?;
        Ok((channel, bearer))
    }

    /// A client of the ingest service.
    pub async fn ingest(&self) -> anyhow::Result<Ingest> {
        let (channel, bearer) = self.channel().await?;
        Ok(IngestClient::with_interceptor(channel, bearer))
    }

    /// A client of the debug-info service.
    pub async fn debuginfo(&self) -> anyhow::Result<Debuginfo> {
        let (channel, bearer) = self.channel().await?;
        Ok(DebuginfoClient::with_interceptor(channel, bearer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA file with an http:// URL is a mistake (it would send in plain text), said so.
    #[tokio::test]
    async fn a_ca_file_needs_https() {
        let e = ServerAddress::new("http://127.0.0.1:1", None)
            .with_ca_file(Some("/etc/ssl/ca.pem".into()))
            .ingest()
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("is not https://"), "{e:#}");
    }

    #[test]
    fn a_token_file_is_read_at_each_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let server = ServerAddress::new("http://127.0.0.1:1", Some(Token::File(path.clone())));
        assert_eq!(server.bearer().unwrap().header(), Some("Bearer first"));
        std::fs::write(&path, "second").unwrap();
        assert_eq!(server.bearer().unwrap().header(), Some("Bearer second"));
        std::fs::remove_file(&path).unwrap();
        assert!(format!("{:#}", server.bearer().unwrap_err()).contains("cannot read the token file"));
    }
}
