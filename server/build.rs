//! Embeds the built web UI (web/dist) into the server binary. Without a build there, the server
//! still compiles and says how to build the UI.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            println!("cargo:rerun-if-changed={}", p.display());
            walk(&p, root, out);
        } else {
            let rel = p.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
            out.push((rel, p));
        }
    }
}

fn main() {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../web/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    let mut files = Vec::new();
    walk(&dist, &dist, &mut files);
    files.sort();
    let mut code = String::from(
        "/// (path, bytes) of every file of the built web UI.\npub(super) static WEB_ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for (rel, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let _ = writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?})),",
            path.canonicalize().expect("canonical path")
        );
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("web_assets.rs"), code).expect("write web_assets.rs");
}
