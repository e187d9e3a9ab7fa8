//! Selectors come from URLs, rule files and the CLI: any text either parses or is an error, and
//! a parsed selector prints as text that parses to the same selector.
//!
//! One check per input, run by the fuzz target (fuzz/fuzz_targets) and, over the committed
//! corpus, by the server's tests (server/tests/suite/corpus.rs).

use bimodal_server::selector::Selector;

/// Checks one input; panics on what may not happen.
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(selector) = Selector::parse(text) else { return };
    let printed = selector.to_string();
    let again = Selector::parse(&printed).unwrap_or_else(|e| panic!("`{printed}` (from `{text}`) does not parse: {e}"));
    assert_eq!(again.to_string(), printed, "from `{text}`");
    let _ = selector.matches_node(|_| Some(String::new()));
}
