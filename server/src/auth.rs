//! Who may do what: bearer tokens from a file (`--token-file`), each with scopes (`read`: the HTTP
//! API and `/metrics`; `write`: ingest and uploads of executables; `symbols`: uploads of separate
//! debug files, which name frames in place of their executables) and, for agents, the node names
//! it may write as. The file holds SHA-256 digests, never tokens (`bimodal-server token` prints a new
//! token and its entry); it is read again when it changes, so tokens are added and revoked without
//! a restart.
//!
//! ```yaml
//! tokens:
//!   - name: agents-zone-a          # shown in logs
//!     sha256: 9f86d08188…          # hex SHA-256 of the token
//!     scopes: [write, symbols]
//!     nodes: 'web-.*'              # optional: node names it may write as (anchored regex)
//!   - name: dashboards
//!     sha256: 60303ae22b…
//!     scopes: [read]
//! ```
//!
//! Without a token file every request is allowed; the server then listens on loopback only
//! unless told `--allow-unauthenticated`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::serve::Peer;
use crate::yaml::{self, Mistakes, Node, Reader, Value};

/// What a token allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The HTTP API (profiles, compare, alerts) and `/metrics`.
    Read,
    /// Ingest streams and uploads of executables.
    Write,
    /// Uploads of separate debug files: a debug file names a build id's frames in place of its
    /// executable's symbols, so whoever may upload one may name the frames of every node that
    /// runs it (issue 49).
    Symbols,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Symbols => "symbols",
        }
    }
}

/// One entry of the token file.
#[derive(Clone, Debug)]
pub struct Token {
    pub name: String,
    sha256: [u8; 32],
    read: bool,
    write: bool,
    symbols: bool,
    /// Node names this token may write as; `None`: any.
    nodes: Option<regex::Regex>,
}

impl Token {
    pub fn allows(&self, scope: Scope) -> bool {
        match scope {
            Scope::Read => self.read,
            Scope::Write => self.write,
            Scope::Symbols => self.symbols,
        }
    }

    /// Whether an agent holding this token may write as node `node`.
    pub fn may_write_as(&self, node: &str) -> bool {
        self.nodes.as_ref().is_none_or(|re| re.is_match(node))
    }
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no token: send `authorization: Bearer TOKEN` (this server needs a token with scope `{0}`)")]
    Missing(&'static str),
    #[error("the token is not known to this server")]
    Unknown,
    #[error("token `{name}` has no `{scope}` scope")]
    Scope { name: String, scope: &'static str },
    #[error("token `{name}` may not write as node `{node}`")]
    Node { name: String, node: String },
    #[error("writes need a client certificate signed by the server's client CA (--tls-client-ca)")]
    NoCertificate,
    #[error("the client certificate does not name node `{0}` (a DNS name among its subject alternative names)")]
    CertificateNode(String),
    #[error("the client certificate is not verified by the server's client CA in force (it changed since the connection was made, or the certificate expired)")]
    CertificateUntrusted,
}

/// The tokens in force.
#[derive(Debug, Default)]
pub struct TokenSet {
    tokens: Vec<Token>,
}

impl TokenSet {
    /// The token a request presents in its `authorization` header value, if it holds `scope`.
    pub fn check(&self, authorization: Option<&str>, scope: Scope) -> Result<&Token, Refused> {
        let presented = authorization
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Refused::Missing(scope.name()))?;
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Digests compared in full whatever they hold: no early exit to time.
        let token = self
            .tokens
            .iter()
            .find(|t| t.sha256.iter().zip(&digest).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0)
            .ok_or(Refused::Unknown)?;
        if !token.allows(scope) {
            return Err(Refused::Scope {
                name: token.name.clone(),
                scope: scope.name(),
            });
        }
        Ok(token)
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// The token file's checks.
impl Reader {
    fn token_file(&mut self, doc: &Node) -> Option<TokenSet> {
        let fields = self.fields(doc, "the token file", &["tokens"])?;
        let Some(list) = fields.get("tokens") else {
            self.wrong(doc.at, "the token file has no `tokens:` list");
            return None;
        };
        let Value::Sequence(items) = &list.value else {
            self.wrong(list.at, format!("`tokens` must be a list, not {}", list.describe()));
            return None;
        };
        let mut tokens = Vec::new();
        for item in items {
            if let Some(t) = self.token(item) {
                if tokens.iter().any(|o: &Token| o.name == t.name) {
                    self.wrong(item.at, format!("a second token named `{}`", t.name));
                }
                if tokens.iter().any(|o: &Token| o.sha256 == t.sha256) {
                    self.wrong(item.at, format!("token `{}` has the digest of another token", t.name));
                }
                tokens.push(t);
            }
        }
        Some(TokenSet { tokens })
    }

    fn token(&mut self, node: &Node) -> Option<Token> {
        let f = self.fields(node, "a token", &["name", "sha256", "scopes", "nodes"])?;
        let name = match f.get("name") {
            Some(n) => self.text(n, "`name`").map(str::to_owned),
            None => {
                self.wrong(node.at, "a token has no `name:`");
                None
            }
        };
        let sha256 = match f.get("sha256") {
            Some(n) => self.text(n, "`sha256`").and_then(|t| {
                match bimodal_profile::unhex(t).and_then(|b| <[u8; 32]>::try_from(b).ok()) {
                    Some(digest) => Some(digest),
                    None => {
                        self.wrong(n.at, "`sha256` must be 64 hex digits (the SHA-256 of the token)");
                        None
                    }
                }
            }),
            None => {
                self.wrong(node.at, "a token has no `sha256:` (bimodal-server token prints one)");
                None
            }
        };
        let (mut read, mut write, mut symbols) = (false, false, false);
        match f.get("scopes").map(|n| (n, &n.value)) {
            Some((_, Value::Sequence(items))) if !items.is_empty() => {
                for item in items {
                    match item.scalar() {
                        Some("read") => read = true,
                        Some("write") => write = true,
                        Some("symbols") => symbols = true,
                        _ => self.wrong(
                            item.at,
                            format!("unknown scope {}; known: read, write, symbols", item.describe()),
                        ),
                    }
                }
            }
            Some((n, _)) => self.wrong(n.at, "`scopes` must be a list of read, write and symbols"),
            None => self.wrong(node.at, "a token has no `scopes:` (read, write, symbols)"),
        }
        let nodes = match f.get("nodes") {
            None => Some(None),
            Some(n) => self
                .text(n, "`nodes`")
                .and_then(|t| match regex::Regex::new(&format!("^(?:{t})$")) {
                    Ok(re) => Some(Some(re)),
                    Err(e) => {
                        self.wrong(n.at, format!("`nodes` is not a regular expression: {e}"));
                        None
                    }
                }),
        };
        if !(read || write || symbols) {
            return None;
        }
        Some(Token {
            name: name?,
            sha256: sha256?,
            read,
            write,
            symbols,
            nodes: nodes?,
        })
    }
}

/// Checks a token file's text.
pub fn read(text: &str) -> Result<TokenSet, Vec<yaml::Mistake>> {
    yaml::check_text(text, Reader::token_file)
}

/// Reads and checks the token file at `path`.
pub fn load(path: &Path) -> Result<TokenSet, Mistakes> {
    yaml::check_file(path, Reader::token_file)
}

/// The server's tokens: none (everything allowed) or those of a file, read again when it changes.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    file: Option<Arc<TokenFile>>,
    /// Writes need a client certificate the CA in force verifies, naming the node written as.
    certificates: Option<crate::tls::ClientTrust>,
}

#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    tokens: RwLock<(Arc<TokenSet>, Option<SystemTime>)>,
    /// Bumped each time other tokens take effect.
    version: std::sync::atomic::AtomicU64,
}

/// How often the token file is looked at for changes.
const RELOAD_EVERY: Duration = Duration::from_secs(2);

impl Auth {
    /// Every request allowed.
    pub fn open() -> Auth {
        Auth::default()
    }

    /// The tokens of the file at `path`; a mistake in it is an error now, and later (after an
    /// edit) a logged error that keeps the tokens in force.
    pub fn from_file(path: &Path) -> Result<Auth, Mistakes> {
        let tokens = load(path)?;
        let file = Arc::new(TokenFile {
            path: path.to_owned(),
            tokens: RwLock::new((Arc::new(tokens), modified(path))),
            version: Default::default(),
        });
        let weak = Arc::downgrade(&file);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_EVERY).await;
                let Some(file) = weak.upgrade() else { return };
                file.reload_if_changed();
            }
        });
        Ok(Auth {
            file: Some(file),
            certificates: None,
        })
    }

    /// The same, and writes (ingest, uploads) need a client certificate `trust` verifies (the
    /// TLS handshake did, and it is verified again when the CA changed); an agent's must name
    /// its node.
    pub fn with_client_certificates(self, trust: Option<crate::tls::ClientTrust>) -> Auth {
        Auth {
            certificates: trust,
            ..self
        }
    }

    /// Whether requests need a token.
    pub fn enabled(&self) -> bool {
        self.file.is_some()
    }

    /// Changes each time the token file is read again with other tokens, or another client CA
    /// takes effect: what was allowed before may not be any more (a long-lived stream checks
    /// again when it changes).
    pub fn version(&self) -> u64 {
        let tokens = self
            .file
            .as_ref()
            .map_or(0, |f| f.version.load(std::sync::atomic::Ordering::Acquire));
        let ca = self.certificates.as_ref().map_or(0, crate::tls::ClientTrust::version);
        tokens.wrapping_add(ca)
    }

    /// Allows a request with this `authorization` header value for `scope`, and for writes as
    /// `node` when given; the token's name when one was needed.
    pub fn allow(
        &self,
        authorization: Option<&str>,
        scope: Scope,
        node: Option<&str>,
    ) -> Result<Option<String>, Refused> {
        let Some(file) = &self.file else {
            return Ok(None);
        };
        let tokens = file.tokens.read().unwrap_or_else(|p| p.into_inner()).0.clone();
        let token = tokens.check(authorization, scope)?;
        if let Some(node) = node {
            if !token.may_write_as(node) {
                return Err(Refused::Node {
                    name: token.name.clone(),
                    node: node.to_owned(),
                });
            }
        }
        Ok(Some(token.name.clone()))
    }
}

impl Auth {
    /// A client certificate for a write, naming `node` when given (nothing to check when
    /// certificates are not required).
    fn allow_certificate(&self, peer: Option<&Peer>, scope: Scope, node: Option<&str>) -> Result<(), Refused> {
        let Some(trust) = self.certificates.as_ref().filter(|_| scope == Scope::Write) else {
            return Ok(());
        };
        let Some((peer, certificate)) = peer.and_then(|p| Some((p, p.certificate.as_ref()?))) else {
            return Err(Refused::NoCertificate);
        };
        // The handshake verified it against the CA then in force; that may have changed.
        if !trust.verifies(certificate, &peer.intermediates) {
            return Err(Refused::CertificateUntrusted);
        }
        match node {
            Some(node) if !peer.certified_for(node) => Err(Refused::CertificateNode(node.to_owned())),
            _ => Ok(()),
        }
    }

    /// [`Auth::allow`] for a gRPC call from `peer`, and its client certificate when writes need
    /// one: `UNAUTHENTICATED` without a known token or a certificate, `PERMISSION_DENIED` for a
    /// token without the scope or node, or a certificate of another node; refusals are counted.
    /// Allowed: the token's name (none without a token file).
    #[allow(clippy::result_large_err)]
    pub fn allow_grpc(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        peer: Option<&Peer>,
        scope: Scope,
        node: Option<&str>,
    ) -> Result<Option<String>, tonic::Status> {
        let header = metadata.get("authorization").and_then(|v| v.to_str().ok());
        self.allow_certificate(peer, scope, node)
            .and_then(|()| self.allow(header, scope, node))
            .map_err(|refused| {
                count_refusal(&refused);
                match refused {
                    Refused::Missing(_) | Refused::Unknown | Refused::NoCertificate | Refused::CertificateUntrusted => {
                        tonic::Status::unauthenticated(refused.to_string())
                    }
                    Refused::Scope { .. } | Refused::Node { .. } | Refused::CertificateNode(_) => {
                        tonic::Status::permission_denied(refused.to_string())
                    }
                }
            })
    }
}

/// Counts a refusal in `bimodal_auth_refused_total{reason}`.
pub fn count_refusal(refused: &Refused) {
    let reason = match refused {
        Refused::Missing(_) => "missing",
        Refused::Unknown => "unknown",
        Refused::Scope { .. } => "scope",
        Refused::Node { .. } => "node",
        Refused::NoCertificate => "no_certificate",
        Refused::CertificateNode(_) => "certificate_node",
        Refused::CertificateUntrusted => "certificate_untrusted",
    };
    crate::metrics::metrics()
        .auth_refused
        .get_or_create(&crate::metrics::label("reason", reason))
        .inc();
}

impl TokenFile {
    fn reload_if_changed(&self) {
        let now = modified(&self.path);
        let seen = self.tokens.read().unwrap_or_else(|p| p.into_inner()).1;
        if now == seen {
            return;
        }
        match load(&self.path) {
            Ok(tokens) => {
                tracing::info!(path = %self.path.display(), tokens = tokens.len(), "token file read again");
                *self.tokens.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(tokens), now);
                self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
            }
            Err(mistakes) => {
                tracing::error!(%mistakes, "the changed token file has mistakes; the tokens read before stay in force");
                self.tokens.write().unwrap_or_else(|p| p.into_inner()).1 = now;
            }
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// A new random token and its entry for the token file.
pub fn new_token(name: &str, scopes: &[Scope], nodes: Option<&str>) -> (String, String) {
    let token = format!("bmd_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let digest = bimodal_profile::hex(&Sha256::digest(token.as_bytes()));
    let scopes: Vec<&str> = scopes.iter().map(|s| s.name()).collect();
    let mut entry = format!(
        "  - name: {name}\n    sha256: {digest}\n    scopes: [{}]\n",
        scopes.join(", ")
    );
    if let Some(nodes) = nodes {
        entry.push_str(&format!("    nodes: '{}'\n", nodes.replace('\'', "''")));
    }
    (token, entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_allow_their_scopes_and_nodes_only() {
        let (agent, agent_entry) = new_token("agents", &[Scope::Write], Some("web-.*"));
        let (reader, reader_entry) = new_token("dashboards", &[Scope::Read], None);
        let set = read(&format!("tokens:\n{agent_entry}{reader_entry}")).unwrap();
        let bearer = |t: &str| format!("Bearer {t}");
        let t = set.check(Some(&bearer(&agent)), Scope::Write).unwrap();
        assert_eq!(t.name, "agents");
        assert!(t.may_write_as("web-3"));
        assert!(!t.may_write_as("db-1"));
        assert!(!t.may_write_as("xweb-1"), "anchored");
        assert_eq!(
            set.check(Some(&bearer(&agent)), Scope::Read).unwrap_err(),
            Refused::Scope {
                name: "agents".into(),
                scope: "read"
            }
        );
        assert!(set.check(Some(&bearer(&reader)), Scope::Read).is_ok());
        assert_eq!(
            set.check(Some("Bearer nope"), Scope::Read).unwrap_err(),
            Refused::Unknown
        );
        assert_eq!(set.check(None, Scope::Write).unwrap_err(), Refused::Missing("write"));
        assert_eq!(
            set.check(Some(&reader), Scope::Read).unwrap_err(),
            Refused::Missing("read")
        );
        // Writing does not give the right to upload debug files; `symbols` does, alone too.
        assert_eq!(
            set.check(Some(&bearer(&agent)), Scope::Symbols).unwrap_err(),
            Refused::Scope {
                name: "agents".into(),
                scope: "symbols"
            }
        );
        let (symbols, symbols_entry) = new_token("symbols", &[Scope::Symbols], None);
        assert!(symbols_entry.contains("scopes: [symbols]"), "{symbols_entry}");
        let set = read(&format!("tokens:\n{symbols_entry}")).unwrap();
        assert!(set.check(Some(&bearer(&symbols)), Scope::Symbols).is_ok());
        assert!(set.check(Some(&bearer(&symbols)), Scope::Write).is_err());
    }

    #[test]
    fn every_mistake_of_a_token_file_has_its_line() {
        let m = read(
            "tokens:\n  - name: a\n    sha256: 12ab\n    scopes: [read, admin]\n    nodes: 'web-('\n  - sha256: 0000000000000000000000000000000000000000000000000000000000000000\n    scopes: [write]\n    colour: red\n",
        )
        .unwrap_err();
        let text: Vec<String> = m.iter().map(|m| format!("{}: {}", m.at.line, m.message)).collect();
        for (line, says) in [
            (3, "64 hex digits"),
            (4, "unknown scope `admin`"),
            (5, "not a regular expression"),
            (6, "no `name:`"),
            (8, "unknown field `colour`"),
        ] {
            assert!(
                m.iter().any(|m| m.at.line == line && m.message.contains(says)),
                "no mistake on line {line} saying {says:?}: {text:#?}"
            );
        }
    }
}
