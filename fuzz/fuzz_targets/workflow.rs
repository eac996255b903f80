//! Fuzzes the whole language pipeline: decoding, parsing, lowering and lint rules, plus
//! rendering of whatever parses. Nothing may panic.
#![no_main]

use fabro_language::{check, decode_source, AnyModel, CheckOptions, NoFiles, Variables};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = decode_source(bytes) else {
        return;
    };
    let variables = Variables::default();
    let options = CheckOptions {
        loader: &NoFiles,
        variables: &variables,
        models: &AnyModel,
    };
    let checked = check("fuzz.fabro".as_ref(), text, &options);
    if let Some(workflow) = &checked.workflow {
        let dot = fabro_language::render::dot::render_dot(workflow);
        // Normalised output must always parse again.
        assert!(fabro_language::syntax::parse(&dot).is_ok(), "{dot}");
    }
});
