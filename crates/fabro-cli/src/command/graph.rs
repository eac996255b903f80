//! `fabro graph WORKFLOW [-o FILE] [--format svg|dot]` (SPEC 12.1): renders even a
//! workflow with validation errors; only a parse error stops it (exit 1).

use fabro_language::render::dot::render_dot;
use fabro_language::render::render_svg;
use fabro_language::Rule;

use crate::args::{GraphArgs, GraphFormat};
use crate::command::load_workflow;
use crate::error::{CliError, Status};
use crate::loader::write_file;
use crate::output::Output;
use crate::report::{render_diagnostics, SourceView, Style};

pub(crate) fn run(args: &GraphArgs, output: &mut Output) -> Result<Status, CliError> {
    let loaded = load_workflow(&args.workflow)?;
    let checked = &loaded.checked;
    if !checked.diagnostics.is_empty() {
        let source = SourceView::new(&loaded.display_name, &loaded.text);
        let style = Style {
            snippet: output.stderr_is_terminal(),
            color: output.stderr_color(),
        };
        output.err(&render_diagnostics(&source, &checked.diagnostics, style));
    }
    let parse_failed = checked
        .diagnostics
        .iter()
        .any(|diagnostic| diagnostic.rule == Rule::ParseError);
    let workflow = match (&checked.workflow, parse_failed) {
        (Some(workflow), false) => workflow,
        _ => return Ok(Status::Failure),
    };
    let rendered = match args.format {
        GraphFormat::Dot => render_dot(workflow),
        GraphFormat::Svg => {
            let fallback = args
                .workflow
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or("workflow");
            render_svg(workflow, fallback)
        }
    };
    match &args.output {
        Some(path) => write_file(path, rendered.as_bytes())?,
        None => output.out(&rendered),
    }
    Ok(Status::Success)
}
