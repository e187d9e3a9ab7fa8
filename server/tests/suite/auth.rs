//! Tokens and TLS against a real server: who may write as which node, who may read the API,
//! refusals with clear statuses, a token file edited while the server runs, a server that will
//! not listen beyond loopback without tokens, and agents and the CLI over TLS.

use std::time::{Duration, Instant};

use bimodal_server::auth::{new_token, Scope};
use bimodal_server::Config;

use super::common::{test_config, TestServer};
use super::wire::{batch, exchange_as, hello, req};

/// A GET with an optional bearer token: (status, body, WWW-Authenticate).
async fn get_as(server: &TestServer, path: &str, token: Option<&str>) -> (u16, String, Option<String>) {
    let url = format!("{}{path}", server.url());
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut request = ureq::get(&url);
        if let Some(t) = &token {
            request = request.set("Authorization", &format!("Bearer {t}"));
        }
        match request.call() {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default(), None),
            Err(ureq::Error::Status(code, r)) => {
                let challenge = r.header("www-authenticate").map(str::to_owned);
                (code, r.into_string().unwrap_or_default(), challenge)
            }
            Err(e) => panic!("{e}"),
        }
    })
    .await
    .unwrap()
}

/// An agent token may write as the nodes it names and not read; a reader token may read and not
/// write; no token or an unknown one is refused before anything is read; the refusals say why.
/// A token added to the file while the server runs is honoured within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_writes_as_which_node_and_who_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, agent_entry) = new_token("agents", &[Scope::Write], Some("web-.*"));
    let (reader, reader_entry) = new_token("dashboards", &[Scope::Read], None);
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("tokens:\n{agent_entry}{reader_entry}")).unwrap();
    let config = Config {
        token_file: Some(tokens.clone()),
        ..test_config("127.0.0.1:0".parse().unwrap(), &dir.path().join("server"))
    };
    let server = TestServer::with_config(config, None).await;
    let url = server.url();
    let one = |node: &str, id: u8| vec![hello(node), req(batch([id; 16], false, "hot", 3))];

    // Writes.
    let acks = exchange_as(url.clone(), Some(&agent), one("web-1", 1)).await.unwrap();
    assert_eq!(acks.len(), 1);
    assert_eq!(
        acks[0].status,
        bimodal_proto::v1::ack::Status::Stored as i32,
        "{acks:?}"
    );
    let e = exchange_as(url.clone(), Some(&agent), one("db-1", 2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("may not write as node `db-1`"), "{e:?}");
    let e = exchange_as(url.clone(), None, one("web-1", 3)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("Bearer"), "{e:?}");
    let e = exchange_as(url.clone(), Some("bmd_forged"), one("web-1", 4))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let e = exchange_as(url.clone(), Some(&reader), one("web-1", 5))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("no `write` scope"), "{e:?}");
    // Debug-info uploads need the write scope too.
    let mut debuginfo = bimodal_proto::client::ServerAddress::new(url.clone(), None)
        .debuginfo()
        .await
        .unwrap();
    let e = debuginfo
        .check(bimodal_proto::v1::DebuginfoCheck { build_id: vec![1; 20] })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");

    // Reads.
    let (status, body, challenge) = get_as(&server, "/api/v1/nodes", None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    assert_eq!(get_as(&server, "/api/v1/nodes", Some(&agent)).await.0, 403);
    assert_eq!(get_as(&server, "/metrics", None).await.0, 401);
    assert_eq!(get_as(&server, "/healthz", None).await.0, 200, "probes need no token");
    assert_eq!(
        get_as(&server, "/index.html", None).await.0,
        200,
        "the UI's files need no token"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body, _) = get_as(&server, "/api/v1/nodes", Some(&reader)).await;
        assert_eq!(status, 200, "{body}");
        if body.contains("web-1") {
            break;
        }
        assert!(Instant::now() < deadline, "web-1's batch never showed: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, metrics, _) = get_as(&server, "/metrics", Some(&reader)).await;
    assert_eq!(status, 200);
    for reason in ["missing", "unknown", "scope", "node"] {
        assert!(
            metrics.contains(&format!("bimodal_auth_refused_total{{reason=\"{reason}\"}}")),
            "no refusal counted for {reason}:\n{metrics}"
        );
    }

    // The UI asks for a token, once, and keeps it.
    let page = format!("{url}/");
    let shot = super::common::artifacts().join("auth.png").display().to_string();
    super::common::web_test(
        "test/auth-browser.mjs",
        &["--url", &page, "--token", &reader, "--screenshot", &shot],
    );

    // A token added while the server runs.
    let (late, late_entry) = new_token("late", &[Scope::Read], None);
    assert_eq!(get_as(&server, "/api/v1/nodes", Some(&late)).await.0, 401);
    // A distinct modification time on file systems that keep whole seconds.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&tokens, format!("tokens:\n{agent_entry}{reader_entry}{late_entry}")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_as(&server, "/api/v1/nodes", Some(&late)).await.0 != 200 {
        assert!(Instant::now() < deadline, "the added token was never honoured");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A broken edit keeps the tokens in force.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(&tokens, "tokens: [oops\n").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(get_as(&server, "/api/v1/nodes", Some(&late)).await.0, 200);
    server.stop().await;
}

/// Without tokens the server listens on loopback only, unless told otherwise; a token file with
/// mistakes is refused at start with each mistake's line.
#[tokio::test]
async fn without_tokens_the_server_stays_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let open = test_config("0.0.0.0:0".parse().unwrap(), dir.path());
    let e = bimodal_server::Server::bind(&open).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("refusing to listen on 0.0.0.0:0 without --token-file"),
        "{e:#}"
    );
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(
        &tokens,
        "tokens:\n  - name: a\n    sha256: nothex\n    scopes: [read]\n",
    )
    .unwrap();
    let bad = Config {
        token_file: Some(tokens.clone()),
        ..test_config("0.0.0.0:0".parse().unwrap(), dir.path())
    };
    let e = bimodal_server::Server::bind(&bad).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("tokens.yaml:3:13: `sha256` must be 64 hex digits"),
        "{e:#}"
    );
}

/// A CA, and a certificate it signed for `localhost` and 127.0.0.1, written as PEM files:
/// (ca.pem, cert.pem, key.pem).
fn certificates(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let paths = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// TLS on the one port: an agent trusting the server's CA writes over gRPC+TLS with its token;
/// one trusting only the system's roots refuses the server's certificate, plain text gets
/// nowhere; `bimodal` reads the API over HTTPS with the CA file and refuses the server without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_and_readers_reach_the_server_over_tls() {
    use bimodal_proto::client::{ServerAddress, Token};
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let (agent, agent_entry) = new_token("agents", &[Scope::Write], None);
    let (reader, reader_entry) = new_token("dashboards", &[Scope::Read], None);
    let tokens = dir.path().join("tokens.yaml");
    std::fs::write(&tokens, format!("tokens:\n{agent_entry}{reader_entry}")).unwrap();
    let config = Config {
        token_file: Some(tokens),
        tls: Some(bimodal_server::tls::TlsFiles {
            cert,
            key,
            client_ca: None,
        }),
        ..test_config("127.0.0.1:0".parse().unwrap(), &dir.path().join("server"))
    };
    let server = TestServer::with_config(config, None).await;
    let port = server.addr.port();
    // An address, not a name: no resolver between the test and the server.
    let https = format!("https://127.0.0.1:{port}");
    let one = |id: u8| vec![hello("tls-1"), req(batch([id; 16], false, "hot", 3))];

    let trusted = ServerAddress::new(https.clone(), Some(Token::Value(agent.clone()))).with_ca_file(Some(ca.clone()));
    let acks = super::wire::exchange_at(&trusted, one(1)).await.unwrap();
    assert_eq!(
        acks[0].status,
        bimodal_proto::v1::ack::Status::Stored as i32,
        "{acks:?}"
    );
    let untrusted = ServerAddress::new(https.clone(), Some(Token::Value(agent.clone())));
    let e = super::wire::exchange_at(&untrusted, one(2)).await.unwrap_err();
    assert!(format!("{e:#}").to_lowercase().contains("certificate"), "{e:#}");
    let plain = ServerAddress::new(format!("http://127.0.0.1:{port}"), Some(Token::Value(agent.clone())));
    assert!(super::wire::exchange_at(&plain, one(3)).await.is_err());

    // The CLI over HTTPS, trusting the CA file; without it the system's roots do not know the CA.
    let cli = |ca_file: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bimodal"));
        cmd.args(["--server-url", &https, "--token", &reader, "compare", "--json"]);
        if let Some(ca) = ca_file {
            cmd.arg("--ca-file").arg(ca);
        }
        cmd.output().unwrap()
    };
    // (A short blocking call: the server runs on the other worker.)
    let out = cli(Some(&ca));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"nodes\""));
    let out = cli(None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot reach the server"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.stop().await;
}

/// A CA of client certificates, and a certificate it signed for each of `nodes` (its DNS name):
/// (ca.pem, [(cert.pem, key.pem)]), under `dir/prefix-…`.
fn client_certificates(
    dir: &std::path::Path,
    prefix: &str,
    nodes: &[&str],
) -> (std::path::PathBuf, Vec<bimodal_proto::client::ClientIdentity>) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let ca_path = dir.join(format!("{prefix}-ca.pem"));
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let identities = nodes
        .iter()
        .map(|node| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![node.to_string()])
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            let id = bimodal_proto::client::ClientIdentity {
                cert: dir.join(format!("{prefix}-{node}.pem")),
                key: dir.join(format!("{prefix}-{node}.key")),
            };
            std::fs::write(&id.cert, cert.pem()).unwrap();
            std::fs::write(&id.key, key.serialize_pem()).unwrap();
            id
        })
        .collect();
    (ca_path, identities)
}

/// Mutual TLS: with a client CA, an agent writes only as the node its certificate names; one
/// without a certificate is refused before it sends anything, one with a certificate of another
/// CA does not get through the handshake; readers need no certificate. A new client CA written
/// over the old one takes effect while the server runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_bind_agents_to_their_node() {
    use bimodal_proto::client::ServerAddress;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let (client_ca, ids) = client_certificates(dir.path(), "fleet", &["mtls-1"]);
    let (other_ca, other_ids) = client_certificates(dir.path(), "other", &["mtls-1"]);
    let config = Config {
        tls: Some(bimodal_server::tls::TlsFiles {
            cert,
            key,
            client_ca: Some(client_ca.clone()),
        }),
        ..test_config("127.0.0.1:0".parse().unwrap(), &dir.path().join("server"))
    };
    let server = TestServer::with_config(config, None).await;
    let https = format!("https://127.0.0.1:{}", server.addr.port());
    let agent = |id: Option<&bimodal_proto::client::ClientIdentity>| {
        ServerAddress::new(https.clone(), None)
            .with_ca_file(Some(ca.clone()))
            .with_identity(id.cloned())
    };
    let as_node = |node: &str, id: u8| vec![hello(node), req(batch([id; 16], false, "hot", 3))];

    let acks = super::wire::exchange_at(&agent(Some(&ids[0])), as_node("mtls-1", 1))
        .await
        .unwrap();
    assert_eq!(
        acks[0].status,
        bimodal_proto::v1::ack::Status::Stored as i32,
        "{acks:?}"
    );
    let e = super::wire::exchange_at(&agent(Some(&ids[0])), as_node("mtls-2", 2))
        .await
        .unwrap_err();
    let status = e.downcast_ref::<tonic::Status>().expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("does not name node `mtls-2`"), "{status:?}");
    let e = super::wire::exchange_at(&agent(None), as_node("mtls-1", 3))
        .await
        .unwrap_err();
    let status = e.downcast_ref::<tonic::Status>().expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("client certificate"), "{status:?}");
    assert!(
        super::wire::exchange_at(&agent(Some(&other_ids[0])), as_node("mtls-1", 4))
            .await
            .is_err()
    );

    // Readers present no certificate.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bimodal"))
        .args(["--server-url", &https, "compare", "--json", "--ca-file"])
        .arg(&ca)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The other CA replaces the first: its certificates are let in, the first's no longer.
    std::fs::copy(&other_ca, &client_ca).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut id = 10u8;
    loop {
        id += 1;
        if super::wire::exchange_at(&agent(Some(&other_ids[0])), as_node("mtls-1", id))
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the new client CA never took effect");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(super::wire::exchange_at(&agent(Some(&ids[0])), as_node("mtls-1", 99))
        .await
        .is_err());
    server.stop().await;
}

/// A client that connects and says nothing, and one that starts a request head and never ends
/// it, are disconnected by the server instead of holding their connections forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_slow_clients_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    let silent = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Far longer than the server's limits (10 s each); a hung connection fails here.
    let bound = bimodal_server::serve::HEADER_READ_TIMEOUT.max(bimodal_server::serve::FIRST_BYTES_TIMEOUT) * 4;
    for (name, mut stream) in [("silent", silent), ("slow", slow)] {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(bound, stream.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the {name} client is still connected after {bound:?}");
    }
    // The server still serves others.
    assert_eq!(server.get("/healthz").await.0, 200);
    server.stop().await;
}
