//! The live line (SPEC 17.5): on a colour terminal, below the finished lines, the running
//! stage with a spinner, its elapsed time and, for a command, its last line of output,
//! redrawn in place every [`TICK`](super::TICK).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::{Shared, State};

/// The frames of the spinner.
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// The live line stays within this many characters, so that it never wraps on a
/// terminal of 80 columns (a wrapped line could not be erased in place).
const WIDTH: usize = 79;

/// How much of the end of a log file is read for its last line.
const TAIL_BYTES: u64 = 4096;

/// The loop of the live line's thread: draws, then waits a tick, until stopped.
pub(super) fn tick(shared: &Shared) {
    let mut state = shared.lock();
    while !state.stopped {
        draw(&mut state);
        state = match shared.wake.wait_timeout(state, super::TICK) {
            Ok((state, _)) => state,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
    clear(&mut state);
}

/// Erases the live line if it is on the screen.
pub(super) fn clear(state: &mut State) {
    if state.drawn {
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(b"\r\x1b[2K");
        let _ = stderr.flush();
        state.drawn = false;
    }
}

/// Draws the live line for the newest running stage, or erases it when nothing runs or
/// a human question has the terminal.
fn draw(state: &mut State) {
    let Some(running) = state.running.last() else {
        clear(state);
        return;
    };
    if state.question_open {
        clear(state);
        return;
    }
    state.frame = (state.frame + 1) % SPINNER.len();
    let elapsed = u64::try_from(running.started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut text = format!(
        "{} {} {}",
        SPINNER[state.frame],
        running.name,
        super::line::format_duration_ms(elapsed)
    );
    let others = state.running.len() - 1;
    if others > 0 {
        text.push_str(&format!(" (+{others} more)"));
    }
    if let Some(output) = running.command_dir.as_deref().and_then(last_output_line) {
        let room = WIDTH.saturating_sub(text.chars().count() + 2);
        if room > 0 {
            text.push_str("  ");
            text.extend(output.chars().take(room));
        }
    }
    let text: String = text.chars().take(WIDTH).collect();
    let mut stderr = std::io::stderr().lock();
    let _ = write!(stderr, "\r\x1b[2K{text}");
    let _ = stderr.flush();
    state.drawn = true;
}

/// The last non-empty line a command wrote, from the more recently written of its
/// `stdout.log` and `stderr.log`, without control characters.
fn last_output_line(stage_dir: &Path) -> Option<String> {
    let mut newest: Option<(std::time::SystemTime, String)> = None;
    for name in ["stdout.log", "stderr.log"] {
        let path = stage_dir.join(name);
        let Ok(modified) = fs_err::metadata(&path).and_then(|metadata| metadata.modified()) else {
            continue;
        };
        let Some(line) = last_line(&path) else {
            continue;
        };
        if newest.as_ref().is_none_or(|(time, _)| modified > *time) {
            newest = Some((modified, line));
        }
    }
    newest.map(|(_, line)| line)
}

fn last_line(path: &Path) -> Option<String> {
    let mut file = fs_err::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text
        .split(['\n', '\r'])
        .map(|line| line.trim())
        .rfind(|line| !line.is_empty())?;
    Some(line.chars().filter(|c| !c.is_control()).collect())
}
