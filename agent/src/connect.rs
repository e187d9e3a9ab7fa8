//! How the agent reaches the server: its URL and the token it presents. A token file is read
//! again at every connection, so a rotated token (a Kubernetes Secret updated in place) takes
//! effect without a restart.

use std::path::PathBuf;

use anyhow::Context;
use bimodal_proto::bearer::{self, Bearer};
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
}

pub type Ingest = IngestClient<InterceptedService<Channel, Bearer>>;
pub type Debuginfo = DebuginfoClient<InterceptedService<Channel, Bearer>>;

impl ServerAddress {
    pub fn new(url: impl Into<String>, token: Option<Token>) -> ServerAddress {
        ServerAddress { url: url.into(), token }
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
        let channel = bearer::channel(&self.url)
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

    /// An https:// server is refused, not spoken to in plain text (this build has no TLS).
    #[tokio::test]
    async fn https_is_refused_not_downgraded() {
        let e = ServerAddress::new("https://127.0.0.1:1", Some(Token::Value("t".into())))
            .ingest()
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("speaks no TLS"), "{e:#}");
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
