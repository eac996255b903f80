//! Fuzzes the model stylesheet parser. Nothing may panic.
#![no_main]

use fabro_language::Stylesheet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(stylesheet) = Stylesheet::parse(text) {
        let _ = stylesheet.resolve("node", "box", &["code".to_owned()]);
    }
});
