//! The one reader of a run's `events.jsonl`: an [`EventCursor`] reads it incrementally,
//! from the first event after a given id, and follows it as the engine appends.
//!
//! Ids grow with each line (SPEC 11.3), so [`EventCursor::after`] finds where a reader
//! resumes (a client reconnecting with `Last-Event-ID`, [`RunStore::read_events`] from an
//! id) by a binary search over byte offsets: a reconnect to a long run reads a few lines,
//! not the whole file. Only newline-terminated lines count: a line being appended is read
//! once it is complete.
//!
//! [`RunStore::read_events`]: super::RunStore::read_events

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{EventReader, StoreError};
use crate::run_dir::EVENTS_FILE;

/// Reads `events.jsonl` from a byte offset.
#[derive(Debug)]
pub struct EventCursor {
    path: PathBuf,
    offset: u64,
    pending: Vec<u8>,
    /// The file kept open between reads ([`EventCursor::kept_open`]), with its read buffer.
    kept: Option<Kept>,
}

/// The descriptor and buffer of a tail that keeps its file open.
#[derive(Debug)]
struct Kept {
    file: Option<std::fs::File>,
    buffer: Box<[u8]>,
}

/// How much a kept-open tail reads per system call.
const KEPT_BUFFER: usize = 64 * 1024;

/// One stored event: its id, its name and the stored line.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    /// `id`.
    pub id: u64,
    /// `event`.
    pub name: String,
    /// The envelope as stored, without its newline.
    pub line: String,
}

/// The fields of an envelope the stream needs; the rest of the line is skipped.
#[derive(Deserialize)]
struct Head<'a> {
    id: u64,
    #[serde(borrow)]
    event: Cow<'a, str>,
}

/// Just the id.
#[derive(Deserialize)]
struct IdOnly {
    id: u64,
}

impl EventCursor {
    /// A reader of the run's `events.jsonl` from its start.
    pub fn new(run_dir: &Path) -> EventCursor {
        EventCursor {
            path: run_dir.join(EVENTS_FILE),
            offset: 0,
            pending: Vec::new(),
            kept: None,
        }
    }

    /// A reader of the run's `events.jsonl` from its start that fails when the file
    /// cannot be opened (a run that has not written an event yet, a record that is
    /// unreadable), for readers that report that instead of waiting for it.
    pub fn open(run_dir: &Path) -> Result<EventCursor, StoreError> {
        let cursor = EventCursor::new(run_dir);
        fs_err::File::open(&cursor.path).map_err(|error| StoreError::Io {
            action: "cannot read",
            path: cursor.path.clone(),
            source: error,
        })?;
        Ok(cursor)
    }

    /// The file this cursor reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same tail, keeping the file open between reads: a read is one `pread` when
    /// events were appended (two when none were), instead of opening, measuring, seeking,
    /// reading to the end and closing the file each time. For the one reader per run
    /// that reads after every append (a server's live feed), not for each stream, so an
    /// open stream holds no descriptor. The engine appends to `events.jsonl` and only
    /// truncates it in place (a resume's repair of a torn line, SPEC 8.7), never replaces
    /// it, so the open file stays the run's.
    pub fn kept_open(mut self) -> EventCursor {
        self.kept = Some(Kept {
            file: None,
            buffer: vec![0; KEPT_BUFFER].into_boxed_slice(),
        });
        self
    }

    /// A reader that starts at the first stored line whose id is above `after` (or, when
    /// a line cannot be read as an envelope, possibly a little earlier: callers still
    /// skip ids up to `after`), else at the end of the complete lines.
    pub fn after(run_dir: &Path, after: u64) -> EventCursor {
        let mut tail = EventCursor::new(run_dir);
        if after > 0 {
            if let Ok(file) = fs_err::File::open(&tail.path) {
                tail.offset = first_line_after(file.into_file(), after).unwrap_or(0);
            }
        }
        tail
    }

    /// A reader of the events that start in the last `bytes` bytes of the run's
    /// `events.jsonl` (from the first line that starts there): the newest events of a
    /// long run without reading all of it.
    pub fn last_bytes(run_dir: &Path, bytes: u64) -> EventCursor {
        let mut cursor = EventCursor::new(run_dir);
        let Ok(file) = fs_err::File::open(&cursor.path) else {
            return cursor;
        };
        let mut file = file.into_file();
        let length = file.metadata().map_or(0, |metadata| metadata.len());
        let start = length.saturating_sub(bytes);
        cursor.offset = match line_from(&mut file, start) {
            Ok(Some((offset, _))) => offset,
            Ok(None) | Err(_) => length,
        };
        cursor
    }

    /// The complete events appended since the last call (a file that shrank, as a
    /// resume's repair of a torn line does, is read again from where it now ends).
    pub fn read_new(&mut self) -> Vec<StoredEvent> {
        if self.kept.is_some() {
            self.read_kept();
        } else {
            self.read_reopened();
        }
        self.complete_events()
    }

    /// The unterminated last line left after [`EventCursor::read_new`], taken out, as an
    /// event if it is a whole envelope: at rest, such a line is an event that only lacks
    /// its newline; a torn one is no envelope and is left out.
    pub fn finish(&mut self) -> Option<StoredEvent> {
        let line = std::mem::take(&mut self.pending);
        stored_event(&line)
    }

    /// Appends what the file holds past `offset` to `pending`, opening it for this read.
    fn read_reopened(&mut self) {
        let Ok(mut file) = fs_err::File::open(&self.path) else {
            return;
        };
        let length = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
        if length < self.offset {
            self.offset = length;
            self.pending.clear();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        let read = file.read_to_end(&mut bytes).unwrap_or(0);
        self.offset += read as u64;
        self.pending
            .extend_from_slice(&bytes[..read.min(bytes.len())]);
    }

    /// [`EventCursor::read_reopened`] through the kept descriptor (opened once the file
    /// exists); the length is asked only when nothing was read, to notice a truncation.
    fn read_kept(&mut self) {
        use std::os::unix::fs::FileExt;
        let Some(kept) = self.kept.as_mut() else {
            return;
        };
        if kept.file.is_none() {
            kept.file = fs_err::File::open(&self.path)
                .ok()
                .map(|file| file.into_parts().0);
        }
        let Some(file) = kept.file.as_ref() else {
            return;
        };
        // Twice at most: again after a truncation, from where the file now ends.
        for _ in 0..2 {
            let mut any = false;
            loop {
                let read = match file.read_at(&mut kept.buffer, self.offset) {
                    Ok(read) => read,
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => 0,
                };
                if read == 0 {
                    break;
                }
                any = true;
                self.offset += read as u64;
                self.pending.extend_from_slice(&kept.buffer[..read]);
                if read < kept.buffer.len() {
                    return;
                }
            }
            if any {
                return;
            }
            let length = file
                .metadata()
                .map_or(self.offset, |metadata| metadata.len());
            if length >= self.offset {
                return;
            }
            self.offset = length;
            self.pending.clear();
        }
    }

    /// Takes the complete lines out of `pending`, as events.
    fn complete_events(&mut self) -> Vec<StoredEvent> {
        let Some(end) = self.pending.iter().rposition(|&byte| byte == b'\n') else {
            return Vec::new();
        };
        let complete: Vec<u8> = self.pending.drain(..=end).collect();
        complete
            .split(|&byte| byte == b'\n')
            .filter(|line| !line.is_empty())
            .filter_map(stored_event)
            .collect()
    }
}

impl StoredEvent {
    /// A stored envelope `line` (without its newline) as an event; `None` when it is
    /// blank or has no envelope head (`id`, `event`).
    pub fn parse(line: &[u8]) -> Option<StoredEvent> {
        stored_event(line)
    }
}

/// `line` as a stored event, `None` when it is blank or no envelope head.
fn stored_event(line: &[u8]) -> Option<StoredEvent> {
    let head: Head<'_> = serde_json::from_slice(line).ok()?;
    // `from_utf8` checks ASCII a word at a time; `from_utf8_lossy` walks every byte,
    // which cost a server streaming a long run a tenth of its CPU (docs/benchmarks.md).
    let line = match std::str::from_utf8(line) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(line).into_owned(),
    };
    Some(StoredEvent {
        id: head.id,
        name: head.event.into_owned(),
        line,
    })
}

impl EventReader for EventCursor {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        Ok(EventCursor::read_new(self))
    }
}

/// An [`EventCursor`] from an id on, leaving out the events at or below it that the
/// binary search may start before.
#[derive(Debug)]
pub(super) struct EventsAfter {
    pub(super) cursor: EventCursor,
    pub(super) after: u64,
}

impl EventReader for EventsAfter {
    fn read_new(&mut self) -> Result<Vec<StoredEvent>, StoreError> {
        let after = self.after;
        let mut events = self.cursor.read_new();
        events.retain(|event| event.id > after);
        Ok(events)
    }
}

/// The id of the last complete event in the run's `events.jsonl` (0 when there is
/// none), read from the end of the file: a long run's page asks for it on each refresh.
pub fn last_event_id(run_dir: &Path) -> u64 {
    let Ok(file) = fs_err::File::open(run_dir.join(EVENTS_FILE)) else {
        return 0;
    };
    let mut file = file.into_file();
    let length = file.metadata().map_or(0, |metadata| metadata.len());
    let mut window: u64 = 64 * 1024;
    loop {
        let start = length.saturating_sub(window);
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return 0;
        }
        let complete = bytes
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(&[][..], |end| &bytes[..end]);
        let mut lines: Vec<&[u8]> = complete.split(|&byte| byte == b'\n').collect();
        if start > 0 && !lines.is_empty() {
            // The first line may begin before the window.
            lines.remove(0);
        }
        let found = lines
            .iter()
            .rev()
            .find_map(|line| serde_json::from_slice::<IdOnly>(line).ok());
        if let Some(head) = found {
            return head.id;
        }
        if start == 0 {
            return 0;
        }
        window = window.saturating_mul(4);
    }
}

/// The byte offset of the first complete line at or after `position`, with its id
/// (`None` for a line that is no envelope); `None` when no complete line starts there.
fn line_from(
    file: &mut std::fs::File,
    position: u64,
) -> std::io::Result<Option<(u64, Option<u64>)>> {
    let (seek, mut start) = match position {
        0 => (0, 0),
        position => (position - 1, position - 1),
    };
    file.seek(SeekFrom::Start(seek))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    if position > 0 {
        // Skip the rest of the line `position - 1` lies in (just its newline, when a
        // line starts at `position`).
        let skipped = reader.read_until(b'\n', &mut line)?;
        if line.last() != Some(&b'\n') {
            return Ok(None);
        }
        start += skipped as u64;
        line.clear();
    }
    reader.read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Ok(None);
    }
    let id = serde_json::from_slice::<IdOnly>(&line[..line.len() - 1])
        .ok()
        .map(|head| head.id);
    Ok(Some((start, id)))
}

/// The offset to read from for the events after `after`: the smallest position whose
/// next line has an id above `after`, is no envelope, or does not exist yet.
fn first_line_after(mut file: std::fs::File, after: u64) -> std::io::Result<u64> {
    let length = file.metadata()?.len();
    let (mut low, mut high) = (0, length);
    while low < high {
        let middle = low + (high - low) / 2;
        let past = match line_from(&mut file, middle)? {
            Some((_, Some(id))) => id > after,
            Some((_, None)) | None => true,
        };
        if past {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    Ok(line_from(&mut file, low)?.map_or(length, |(start, _)| start))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(id: u64) -> String {
        format!("{{\"id\":{id},\"ts\":\"t\",\"run_id\":\"r\",\"event\":\"E{id}\",\"properties\":{{\"pad\":\"{}\"}}}}\n", "x".repeat((id as usize * 37) % 200))
    }

    fn ids_after(text: &str, after: u64) -> Vec<u64> {
        let directory = tempfile::tempdir().expect("temp dir");
        fs_err::write(directory.path().join("events.jsonl"), text).expect("write");
        EventCursor::after(directory.path(), after)
            .read_new()
            .into_iter()
            .map(|event| event.id)
            .collect()
    }

    #[test]
    fn the_last_id_is_read_from_the_end() {
        let directory = tempfile::tempdir().expect("temp dir");
        assert_eq!(last_event_id(directory.path()), 0);
        let path = directory.path().join("events.jsonl");
        fs_err::write(&path, "").expect("write");
        assert_eq!(last_event_id(directory.path()), 0);
        // Longer than the first window; a torn last line and a last line that is no
        // envelope are passed over.
        let mut text: String = (1..=3000).map(envelope).collect();
        assert!(text.len() > 64 * 1024);
        fs_err::write(&path, &text).expect("write");
        assert_eq!(last_event_id(directory.path()), 3000);
        text.push_str("not json\n{\"id\":3001,\"ev");
        fs_err::write(&path, &text).expect("write");
        assert_eq!(last_event_id(directory.path()), 3000);
        // One line longer than the first window.
        let long = format!(
            "{{\"id\":7,\"event\":\"E\",\"properties\":{{\"pad\":\"{}\"}}}}\n",
            "y".repeat(100_000)
        );
        fs_err::write(&path, format!("{}{long}", envelope(6))).expect("write");
        assert_eq!(last_event_id(directory.path()), 7);
    }

    #[test]
    fn starts_at_the_first_event_after_the_id() {
        let text: String = (1..=200).map(envelope).collect();
        for after in [0, 1, 2, 57, 128, 199, 200, 500] {
            let ids = ids_after(&text, after);
            assert_eq!(ids, (after + 1..=200).collect::<Vec<_>>(), "after {after}");
        }
    }

    #[test]
    fn a_torn_last_line_and_a_line_that_is_no_envelope_lose_nothing() {
        let mut text: String = (1..=50).map(envelope).collect();
        text.push_str("not json\n");
        text.extend((51..=80).map(envelope));
        text.push_str("{\"id\":81,\"ev");
        for after in [0, 10, 49, 50, 51, 79, 80] {
            let ids: Vec<u64> = ids_after(&text, after)
                .into_iter()
                .filter(|id| *id > after)
                .collect();
            assert_eq!(ids, (after + 1..=80).collect::<Vec<_>>(), "after {after}");
        }
    }

    #[test]
    fn a_missing_or_empty_file_has_no_events() {
        let directory = tempfile::tempdir().expect("temp dir");
        assert!(EventCursor::after(directory.path(), 3)
            .read_new()
            .is_empty());
        assert_eq!(ids_after("", 3), Vec::<u64>::new());
    }

    /// A whole event that only lacks its newline is taken by `finish`; a torn one is not.
    #[test]
    fn finish_takes_a_whole_unterminated_event_only() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("events.jsonl");
        let whole = envelope(3);
        fs_err::write(
            &path,
            format!("{}{}{}", envelope(1), envelope(2), whole.trim_end()),
        )
        .expect("write");
        let mut cursor = EventCursor::new(directory.path());
        let ids: Vec<u64> = cursor.read_new().iter().map(|event| event.id).collect();
        assert_eq!(ids, vec![1, 2]);
        assert_eq!(cursor.finish().map(|event| event.id), Some(3));
        assert!(cursor.finish().is_none(), "taken once");
        fs_err::write(&path, format!("{}{{\"id\":2,\"ev", envelope(1))).expect("write");
        let mut cursor = EventCursor::new(directory.path());
        assert_eq!(cursor.read_new().len(), 1);
        assert!(cursor.finish().is_none(), "a torn line is no event");
    }

    /// The newest events of a long file, from the first line that starts in the window.
    #[test]
    fn the_last_bytes_start_at_a_line() {
        let directory = tempfile::tempdir().expect("temp dir");
        let text: String = (1..=300).map(envelope).collect();
        fs_err::write(directory.path().join("events.jsonl"), &text).expect("write");
        let tail_of = |bytes: u64| -> Vec<u64> {
            EventCursor::last_bytes(directory.path(), bytes)
                .read_new()
                .iter()
                .map(|event| event.id)
                .collect()
        };
        let last = envelope(300).len() as u64;
        assert_eq!(tail_of(last), vec![300]);
        assert_eq!(tail_of(last + 1), vec![300]);
        assert_eq!(
            tail_of(text.len() as u64 * 2),
            (1..=300).collect::<Vec<_>>()
        );
        assert!(tail_of(0).is_empty());
        let window = tail_of(4096);
        assert_eq!(window.last(), Some(&300));
        assert!(window.len() > 10 && window.len() < 300, "{}", window.len());
        assert!(window.windows(2).all(|pair| pair[1] == pair[0] + 1));
    }

    /// The same appends, truncation and late creation read by a tail that reopens the
    /// file each time and by one that keeps it open: both see the same events.
    #[test]
    fn a_kept_open_tail_reads_what_a_reopening_one_reads() {
        use std::io::Write;
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("events.jsonl");
        let mut reopening = EventCursor::new(directory.path());
        let mut kept = EventCursor::new(directory.path()).kept_open();
        let mut check = |expected: Vec<u64>, step: &str| {
            for (tail, name) in [(&mut reopening, "reopening"), (&mut kept, "kept open")] {
                let ids: Vec<u64> = tail.read_new().into_iter().map(|event| event.id).collect();
                assert_eq!(ids, expected, "{name}: {step}");
            }
        };
        check(vec![], "no file yet");
        let append = |text: &str| {
            let mut file = fs_err::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("opens");
            file.write_all(text.as_bytes()).expect("appends");
        };
        append(&(1..=3).map(envelope).collect::<String>());
        check(vec![1, 2, 3], "created");
        check(vec![], "nothing new");
        let fourth = envelope(4);
        let (head, tail) = fourth.split_at(10);
        append(head);
        check(vec![], "a line being written");
        append(tail);
        append(&envelope(5));
        check(vec![4, 5], "the line completed");
        // More than one read buffer at once.
        let many: String = (6..=2000).map(envelope).collect();
        assert!(many.len() > KEPT_BUFFER * 2);
        append(&many);
        check((6..=2000).collect(), "a large append");
        // Truncated in place (a resume's repair of a torn line), then appended to.
        let kept_length = (1..=3).map(envelope).map(|line| line.len()).sum::<usize>();
        fs_err::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("opens")
            .set_len(kept_length as u64)
            .expect("truncates");
        check(vec![], "truncated");
        append(&envelope(4));
        check(vec![4], "appended after the truncation");
    }
}
