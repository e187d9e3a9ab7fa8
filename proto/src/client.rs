//! How a client (agent, CLI) reaches a bimodal server: over TLS for an `https://` URL (the
//! server's certificate checked against a CA file, or the system's roots), and with the bearer
//! token it presents to a server that has tokens. One place for every gRPC client of bimodal.

use std::path::{Path, PathBuf};

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
    let https = url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    let endpoint = match (https, ca_file) {
        (false, None) if identity.is_none() => endpoint,
        (false, _) => {
            return Err(format!(
                "`{url}` is not https://: a CA file or client certificate is for TLS, and this URL would send in plain text"
            )
            .into())
        }
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
                        std::fs::read(path).map_err(|e| format!("cannot read the client {what} {}: {e}", path.display()))
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
