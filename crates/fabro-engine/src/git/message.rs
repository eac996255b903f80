//! The commit messages SPEC 8.3 fixes byte for byte: run-branch commits with their trailers and
//! the three kinds of metadata commit.

use std::fmt;

/// The message of a run-branch commit (SPEC 8.3, seed 002):
/// `fabro({run_id}): {node_id} ({status})`, a blank line, then the `Fabro-Run`,
/// `Fabro-Completed` and `Fabro-Checkpoint` trailers.
pub(crate) fn run_commit_message(
    run_id: &str,
    node_id: &str,
    status: &str,
    completed_count: usize,
    metadata_sha: &str,
) -> String {
    format!(
        "fabro({run_id}): {node_id} ({status})\n\n\
         Fabro-Run: {run_id}\n\
         Fabro-Completed: {completed_count}\n\
         Fabro-Checkpoint: {metadata_sha}\n"
    )
}

/// Which metadata commit is being written; decides its message (SPEC 8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetadataMessage<'a> {
    /// The first commit, written at initialisation: `fabro({run_id}): initialize`.
    Initialize,
    /// After a stage: `fabro({run_id}): checkpoint {node_id}`.
    Checkpoint {
        /// The node whose stage just completed.
        node_id: &'a str,
    },
    /// A final checkpoint that follows no stage: `fabro({run_id}): {run_status}`.
    Final {
        /// The run status written in that checkpoint (`canceled`, `fail`, …).
        run_status: &'a str,
    },
}

impl MetadataMessage<'_> {
    /// The full commit message for run `run_id`.
    pub(crate) fn render(&self, run_id: &str) -> String {
        format!("fabro({run_id}): {}", MessageTail(self))
    }
}

struct MessageTail<'a, 'b>(&'a MetadataMessage<'b>);

impl fmt::Display for MessageTail<'_, '_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            MetadataMessage::Initialize => formatter.write_str("initialize"),
            MetadataMessage::Checkpoint { node_id } => write!(formatter, "checkpoint {node_id}"),
            MetadataMessage::Final { run_status } => formatter.write_str(run_status),
        }
    }
}

/// The value of trailer `key` in a commit message, taken from the last paragraph after the
/// subject (a one-paragraph message has no trailers, as in git).
pub(crate) fn trailer<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    let (_, last_paragraph) = message.trim_end().rsplit_once("\n\n")?;
    last_paragraph.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == key).then(|| value.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_commit_message_has_subject_and_trailers() {
        assert_eq!(
            run_commit_message("01RUN", "build", "success", 3, "abc123"),
            "fabro(01RUN): build (success)\n\nFabro-Run: 01RUN\nFabro-Completed: 3\nFabro-Checkpoint: abc123\n"
        );
    }

    #[test]
    fn metadata_messages() {
        assert_eq!(
            MetadataMessage::Initialize.render("R"),
            "fabro(R): initialize"
        );
        assert_eq!(
            MetadataMessage::Checkpoint { node_id: "test" }.render("R"),
            "fabro(R): checkpoint test"
        );
        assert_eq!(
            MetadataMessage::Final {
                run_status: "canceled"
            }
            .render("R"),
            "fabro(R): canceled"
        );
    }

    #[test]
    fn trailer_reads_the_last_paragraph_only() {
        let message = run_commit_message("R", "n", "fail", 2, "deadbeef");
        assert_eq!(trailer(&message, "Fabro-Checkpoint"), Some("deadbeef"));
        assert_eq!(trailer(&message, "Fabro-Completed"), Some("2"));
        assert_eq!(
            trailer("subject\n\nFabro-Run: R\n", "Fabro-Checkpoint"),
            None
        );
        assert_eq!(trailer("Fabro-Checkpoint: x", "Fabro-Checkpoint"), None);
    }
}
