//! Remote symbolization: the agent sends frames as (build id, file offset), uploads the images
//! that carry symbols, and the server names frames from its debug-info store — including a
//! stripped binary once its separate debug file is uploaded with `bimodal-server debuginfo
//! upload`, or found installed by the agent. Real agent, real server and ClickHouse, real gRPC
//! over loopback.

use std::process::Command;
use std::time::{Duration, Instant};

use bimodal_agent::sample::events::EventKind;
use bimodal_agent::ship;
use bimodal_proto::v1::{self, debuginfo_client::DebuginfoClient};

use super::common::{agent_options, selector, TestServer};
use crate::fixture;
use crate::golden::{assert_matches_expected, functions_of, parse_folded};

fn upload(server: &TestServer, file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bimodal-server"))
        .args(["debuginfo", "upload"])
        .arg(file)
        .args(["--server-url", &server.url()])
        .output()
        .expect("run bimodal-server debuginfo upload")
}

fn build_id(path: &str) -> Vec<u8> {
    blazesym::helper::read_elf_build_id(&path)
        .expect("readable")
        .expect("a build id")
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripped_binary_is_named_by_the_server_from_its_uploaded_debug_file() {
    let server = TestServer::start().await;
    let build = fixture::stripped_workload();
    let workload = fixture::spawn(&build.binary, &["spin", "120"]);
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        agent_options(server.url(), "strip-node", workload.pid(), vec![EventKind::Cpu]),
        agent_stopped,
    ));

    // Stored without names: the binary has none, and nothing named it yet.
    let path = &format!(
        "/api/v1/flamegraph?event=cpu&{}&format=folded",
        selector(r#"{node="strip-node"}"#)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let unnamed = loop {
        let (status, body) = server.get(path).await;
        assert_eq!(status, 200, "{body}");
        let folded = parse_folded(&body);
        if folded.values().sum::<u64>() >= 100 {
            break folded;
        }
        assert!(Instant::now() < deadline, "no cpu samples reached the server: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        unnamed.keys().any(|s| s.contains("[workload-stripped+0x")),
        "frames of the stripped binary keep module and offset: {unnamed:?}"
    );
    assert!(
        !unnamed.keys().any(|s| s.contains("spin_hot_loop")),
        "nothing could have named spin_hot_loop yet: {unnamed:?}"
    );

    // The stripped binary itself is refused: it has no symbols to name anything with.
    let refused = upload(&server, &build.binary);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("no symbols"), "a clear reason: {stderr}");

    // Its debug file is accepted and names the frames already stored.
    let stored = upload(&server, &build.debug_file);
    assert!(stored.status.success(), "{}", String::from_utf8_lossy(&stored.stderr));
    let (status, body) = server.get(path).await;
    assert_eq!(status, 200, "{body}");
    assert_matches_expected(
        "workload-stripped-spin",
        &parse_folded(&body),
        &functions_of(&[&build.unstripped]),
    );

    // The agent uploaded the images it saw: libc's debug file where the standard location
    // (/usr/lib/debug/.build-id) has one, else libc itself (which exports names).
    let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("glibc");
    let mut client = DebuginfoClient::connect(server.url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = client
            .check(v1::DebuginfoCheck {
                build_id: build_id(libc),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let debug_file = format!("/usr/lib/debug/.build-id/{}.debug", {
            let hex = bimodal_profile::hex(&build_id(libc));
            format!("{}/{}", &hex[..2], &hex[2..])
        });
        let expected = if std::path::Path::new(&debug_file).exists() {
            v1::DebuginfoKind::Debuginfo
        } else {
            v1::DebuginfoKind::Executable
        };
        if status.stored.contains(&(expected as i32)) {
            break;
        }
        assert!(Instant::now() < deadline, "the agent never uploaded libc: {status:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Checks and uploads with a malformed build id are refused, not stored.
    let bad = client
        .check(v1::DebuginfoCheck {
            build_id: Vec::new(),
            ..Default::default()
        })
        .await;
    assert_eq!(bad.unwrap_err().code(), tonic::Code::InvalidArgument);

    stop_agent.send(true).unwrap();
    agent.await.unwrap().expect("agent stops cleanly");
}

/// A stripped binary whose debug file is installed the standard way (by build id under a debug
/// directory, as distributions' debug packages do) is named without anyone uploading anything:
/// the agent finds the debug file and uploads it under the binary's build id. (The server takes
/// it once the agent's first frames of the binary are stored: the first try may come before,
/// and the next 30 s later.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_uploads_the_installed_debug_file_of_a_stripped_binary() {
    let server = TestServer::start().await;
    let build = fixture::stripped_workload();
    let debug_dir = tempfile::tempdir().unwrap();
    let hex = bimodal_profile::hex(&build_id(build.binary.to_str().unwrap()));
    let installed = debug_dir
        .path()
        .join(".build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    std::fs::copy(&build.debug_file, &installed).unwrap();

    let workload = fixture::spawn(&build.binary, &["spin", "120"]);
    let (stop_agent, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(ship::run(
        ship::RunOptions {
            debug_dirs: vec![debug_dir.path().to_owned()],
            ..agent_options(server.url(), "installed-node", workload.pid(), vec![EventKind::Cpu])
        },
        agent_stopped,
    ));
    let path = &format!(
        "/api/v1/flamegraph?event=cpu&{}&format=folded",
        selector(r#"{node="installed-node"}"#)
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = server.get(path).await;
        assert_eq!(status, 200, "{body}");
        let folded = parse_folded(&body);
        let named: u64 = folded
            .iter()
            .filter(|(s, _)| s.contains("main;spin_loop;spin_hot_loop"))
            .map(|(_, n)| n)
            .sum();
        if folded.values().sum::<u64>() >= 100 && named * 10 >= folded.values().sum::<u64>() * 8 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stripped binary was never named from its installed debug file: {folded:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut client = DebuginfoClient::connect(server.url()).await.unwrap();
    let status = client
        .check(v1::DebuginfoCheck {
            build_id: build_id(build.binary.to_str().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        status.stored.contains(&(v1::DebuginfoKind::Debuginfo as i32)),
        "stored as a debug file: {status:?}"
    );
    stop_agent.send(true).unwrap();
    agent.await.unwrap().expect("agent stops cleanly");
}
