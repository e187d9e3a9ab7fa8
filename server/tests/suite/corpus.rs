//! The fuzz targets' committed corpora (fuzz/corpus/TARGET), replayed through the very checks
//! the targets run (fuzz/checks): every input that once reached a new path, or a bug, passes
//! them in every test run. Live fuzzing, which needs a sanitizer build of its own, is `make
//! fuzz`'s.

use std::path::Path;

#[path = "../../../fuzz/checks/ingest.rs"]
mod ingest;
#[path = "../../../fuzz/checks/rules.rs"]
mod rules;
#[path = "../../../fuzz/checks/selector.rs"]
mod selector;

/// A target's name (its corpus folder) and its check.
type Target = (&'static str, fn(&[u8]));

/// Each target's corpus, input by input, through its check.
#[test]
fn every_committed_fuzz_input_passes_its_check() {
    let corpora = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let targets: [Target; 3] = [
        ("ingest", ingest::check),
        ("rules", rules::check),
        ("selector", selector::check),
    ];
    for (target, check) in targets {
        let mut inputs: Vec<_> = std::fs::read_dir(corpora.join(target))
            .unwrap_or_else(|e| panic!("fuzz/corpus/{target}: {e}"))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "fuzz/corpus/{target} is empty");
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            let passed = std::panic::catch_unwind(|| check(&data));
            assert!(passed.is_ok(), "{} fails its check", input.display());
        }
    }
}
