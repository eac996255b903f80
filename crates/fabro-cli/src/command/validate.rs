//! `fabro validate WORKFLOW [--json]` (SPEC 12.1): diagnostics are the result, so they go
//! to stdout.

use crate::args::ValidateArgs;
use crate::command::load_workflow;
use crate::error::{CliError, Status};
use crate::output::Output;
use crate::report::{render_diagnostics, summary, SourceView, Style};
use crate::view::ValidateView;

pub(crate) fn run(args: &ValidateArgs, output: &mut Output) -> Result<Status, CliError> {
    let loaded = load_workflow(&args.workflow)?;
    let checked = &loaded.checked;
    if args.json {
        let view = ValidateView::new(
            &loaded.display_name,
            &loaded.text,
            &checked.diagnostics,
            checked.workflow.as_ref(),
        );
        let json = serde_json::to_string_pretty(&view).map_err(CliError::EncodeJson)?;
        output.out(&json);
        output.out("\n");
    } else {
        let style = Style {
            snippet: output.stdout_is_terminal(),
            color: output.stdout_color(),
        };
        if checked.diagnostics.is_empty() {
            // No positions to compute: skip indexing the lines of a large file.
            output.out(&format!("{}\n", summary(&checked.diagnostics)));
        } else {
            let source = SourceView::new(&loaded.display_name, &loaded.text);
            output.out(&render_diagnostics(&source, &checked.diagnostics, style));
        }
    }
    let status = if checked.has_errors() {
        Status::Failure
    } else {
        Status::Success
    };
    // The process ends right after this command: freeing a 100,000-node workflow node by
    // node would cost a sizeable share of the command's run time for nothing.
    std::mem::forget(loaded);
    Ok(status)
}
