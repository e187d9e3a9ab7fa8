//! How the agent reaches the server: its URL (https:// for TLS, checked against a CA file or the
//! system's roots) and the token it presents. The token and CA files are read again at every
//! connection, so a rotated Secret (updated in place by Kubernetes) takes effect without a
//! restart.

use std::path::PathBuf;

use anyhow::Context;
use bimodal_proto::client::{self, Bearer, ClientIdentity};
use bimodal_proto::v1::debuginfo_client::DebuginfoClient;
use bimodal_proto::v1::ingest_client::IngestClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Where the agent's token comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token {
    Value(String),
    /// A file holding the token (surrounding whitespace ignored).
    File(PathBuf),
}

/// The server and how to prove who the agent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddress {
    /// gRPC URL, e.g. `http://127.0.0.1:7070`.
    pub url: String,
    pub token: Option<Token>,
    /// PEM certificates of the CA that signed the server's certificate (https:// only).
    pub ca_file: Option<PathBuf>,
    /// The agent's client certificate, naming its node, for a server that asks for one.
    pub identity: Option<ClientIdentity>,
}

pub type Ingest = IngestClient<InterceptedService<Channel, Bearer>>;
pub type Debuginfo = DebuginfoClient<InterceptedService<Channel, Bearer>>;

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
        let channel = client::channel(&self.url, self.ca_file.as_deref(), self.identity.as_ref())
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
