//! What witnessing an image costs an agent (design 040): the time of
//! `bimodal_proto::naming_digests` over each file named, the best of 5 runs, with the file's
//! size and whether it has a `.symtab`. The file is read into memory first: the agent maps it,
//! and the digests touch only its headers and symbol tables.
//!
//!   cargo run --release -p bimodal-proto --example naming_digests -- FILE...

use std::time::Instant;

fn main() {
    println!("| file | size | .symtab | naming_digests, best of 5 |");
    println!("| --- | ---: | --- | ---: |");
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("naming_digests: {path}: {e}");
                std::process::exit(1);
            }
        };
        let mut best = f64::INFINITY;
        let mut local = None;
        for _ in 0..5 {
            let started = Instant::now();
            let digests = bimodal_proto::naming_digests(&bytes).unwrap_or_else(|e| {
                eprintln!("naming_digests: {path}: {e}");
                std::process::exit(1);
            });
            best = best.min(started.elapsed().as_secs_f64());
            local = Some(digests.local.is_some());
        }
        println!(
            "| {path} | {:.1} MiB | {} | {:.2} ms |",
            bytes.len() as f64 / (1 << 20) as f64,
            if local == Some(true) { "yes" } else { "no" },
            best * 1e3
        );
    }
}
