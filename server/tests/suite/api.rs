//! The HTTP API's bounds against a real server: a reader beyond its request rate is answered 429
//! with the time to come back, before anything is queried, and other readers are not held back.

use std::time::Duration;

use bimodal_server::auth::{new_token, Scope};
use bimodal_server::rate::Rate;
use bimodal_server::Config;

use super::common::{get_with, with_tokens, TestServer};

/// A GET with a bearer token: (status, body, Retry-After).
async fn get(server: &TestServer, path: &str, token: &str) -> (u16, String, Option<String>) {
    get_with(server, path, Some(token), "retry-after").await
}

/// Each token has its own bucket: the one that used its burst is told to come back in whole
/// seconds and is let in when it does; the other reads on; probes are not counted; the refusal
/// is counted by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_beyond_its_request_rate_is_told_when_to_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let (busy, busy_entry) = new_token("busy-script", &[Scope::Read], None);
    let (other, other_entry) = new_token("dashboards", &[Scope::Read], None);
    let (_, config) = with_tokens(dir.path(), &[&busy_entry, &other_entry]);
    let config = Config {
        api_requests: Rate {
            per_second: 0.1,
            burst: 3,
        },
        ..config
    };
    let server = TestServer::with_config(config, None).await;

    for _ in 0..3 {
        let (status, body, _) = get(&server, "/api/v1/events", &busy).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body, retry_after) = get(&server, "/api/v1/events", &busy).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("more than 0.1 requests a second (3 at once) from token:busy-script"),
        "{body}"
    );
    // Up to ten seconds until the next request at a tenth of a request a second (less when the
    // three went slowly), in whole seconds rounded up.
    let wait: u64 = retry_after.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!((1..=10).contains(&wait), "Retry-After {retry_after:?}: {body}");

    let (status, body, _) = get(&server, "/api/v1/events", &other).await;
    assert_eq!(status, 200, "another reader is not held back: {body}");
    for _ in 0..5 {
        let (status, body) = server.get("/healthz").await;
        assert_eq!(status, 200, "probes are not counted: {body}");
    }

    tokio::time::sleep(Duration::from_secs(wait)).await;
    let (status, body, _) = get(&server, "/api/v1/events", &busy).await;
    assert_eq!(status, 200, "let in after waiting what it was told: {body}");

    let (status, metrics, _) = get(&server, "/metrics", &other).await;
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.contains(r#"bimodal_api_refused_requests_total{reason="rate"}"#),
        "{metrics}"
    );

    // The UI, for a reader that used its rate (the script uses it up), waits what it is told
    // and asks again.
    let shot = super::common::artifacts().join("rate.png").display().to_string();
    super::common::web_test(
        "test/rate-browser.mjs",
        &[
            "--url",
            &format!("{}/", server.url()),
            "--token",
            &busy,
            "--screenshot",
            &shot,
        ],
    );
    server.stop().await;
}
