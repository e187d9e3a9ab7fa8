//! The server's integration tests: a real bimodal-server with its managed ClickHouse, real gRPC
//! over loopback, the real agent library sampling a fixture process, and headless Chromium.

#[path = "../../testdata/fixtures/fixture.rs"]
mod fixture;
#[path = "../../testdata/fixtures/golden.rs"]
mod golden;
#[path = "../../testdata/fixtures/http.rs"]
mod http;
#[path = "../../testdata/fixtures/pki.rs"]
mod pki;
mod suite;
