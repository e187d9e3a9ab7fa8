//! Builds the BPF programs in ../bpf into skeletons (OUT_DIR, never edited).
//!
//! `vmlinux.h` comes from the build machine's BTF (`bpftool btf dump`), or from the file named by
//! `BIMODAL_VMLINUX_H`; CO-RE relocations make the object run on other kernels. Debian ships
//! clang as `clang-19`/`clang-14` without a plain `clang`, so the compiler is found explicitly
//! (`BIMODAL_CLANG` overrides).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["profile"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpf_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bpf");
    let include = bpf_dir.join("include");
    println!("cargo:rerun-if-env-changed=BIMODAL_CLANG");
    println!("cargo:rerun-if-env-changed=BIMODAL_VMLINUX_H");
    println!("cargo:rerun-if-changed={}", include.display());

    let vmlinux_dir = out.join("vmlinux");
    std::fs::create_dir_all(&vmlinux_dir).expect("create OUT_DIR/vmlinux");
    write_vmlinux_h(&vmlinux_dir.join("vmlinux.h"));
    let clang = find_clang();

    for name in PROGRAMS {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args([
                "-I".into(),
                include.clone().into_os_string(),
                "-I".into(),
                vmlinux_dir.clone().into_os_string(),
                "-Wall".into(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("failed to build {}: {e:#}", src.display()));
    }
}

fn write_vmlinux_h(dest: &Path) {
    if let Some(given) = env::var_os("BIMODAL_VMLINUX_H") {
        std::fs::copy(&given, dest).unwrap_or_else(|e| panic!("failed to copy {}: {e}", Path::new(&given).display()));
        return;
    }
    let btf = "/sys/kernel/btf/vmlinux";
    let bpftool = ["/usr/sbin/bpftool", "/usr/bin/bpftool", "bpftool"]
        .into_iter()
        .find(|p| !p.starts_with('/') || Path::new(p).exists())
        .expect("a bpftool candidate");
    let output = Command::new(bpftool)
        .args(["btf", "dump", "file", btf, "format", "c"])
        .output()
        .unwrap_or_else(|e| {
            panic!("failed to run `{bpftool}` to write vmlinux.h (install bpftool, or set BIMODAL_VMLINUX_H): {e}")
        });
    assert!(
        output.status.success(),
        "`bpftool btf dump file {btf}` failed (kernel without BTF? set BIMODAL_VMLINUX_H): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(dest, output.stdout).expect("write vmlinux.h");
}

fn find_clang() -> PathBuf {
    if let Some(c) = env::var_os("BIMODAL_CLANG") {
        return c.into();
    }
    for c in [
        "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14", "clang",
    ] {
        if let Ok(o) = Command::new(c).arg("--version").output() {
            if o.status.success() {
                return c.into();
            }
        }
    }
    panic!("no clang found (tried clang-19 … clang-14, clang); install clang-19 or set BIMODAL_CLANG")
}
