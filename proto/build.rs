//! Generates Rust for the .proto files with protox (a pure-Rust protobuf compiler), so no
//! `protoc` binary is needed. Output goes to OUT_DIR and is never edited.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "bimodal/v1/profile.proto",
        "bimodal/v1/facts.proto",
        "bimodal/v1/ingest.proto",
        "bimodal/v1/debuginfo.proto",
        "pprof/profile.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
