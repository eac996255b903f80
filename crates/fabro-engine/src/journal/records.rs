//! [`JournalRecords`]: a run's checkpoint journal for a store that keeps its records
//! elsewhere than in `journal.jsonl` (a database row per record), in the format of the
//! local journal: the whole first checkpoint, then one delta per checkpoint, so that a
//! record costs what changed and not the size of the run's state.

use super::image::CheckpointImage;
use super::{ChangeHint, CheckpointDelta, Record};
use crate::record::{Checkpoint, CheckpointView};

/// The records of one run's journal as they are written, with the state they describe.
#[derive(Debug, Default)]
pub struct JournalRecords {
    last: Option<Checkpoint>,
    buffer: Vec<u8>,
    /// The state serialised in parts, following the records (made at the first
    /// [`JournalRecords::render`]), so that the whole checkpoint costs a copy and not a
    /// serialisation of the run's state.
    image: Option<CheckpointImage>,
    whole: Vec<u8>,
}

impl JournalRecords {
    /// A journal whose records so far describe `last` (`None`: no record yet).
    pub fn after(last: Option<Checkpoint>) -> JournalRecords {
        JournalRecords {
            last,
            ..JournalRecords::default()
        }
    }

    /// The record of `checkpoint`, redacted (SPEC 13.1) and without a newline: the whole
    /// checkpoint when it is the first, else its changes against the last, which
    /// `hint` narrows as for the local journal. The state becomes `checkpoint`'s.
    ///
    /// # Errors
    /// When the record cannot be serialised.
    pub fn record(
        &mut self,
        checkpoint: &CheckpointView<'_>,
        hint: &ChangeHint<'_>,
    ) -> Result<&[u8], serde_json::Error> {
        self.buffer.clear();
        match &mut self.last {
            Some(last) => {
                let delta = CheckpointDelta::between_hinted(last, checkpoint, hint);
                if let Some(image) = &mut self.image {
                    image.apply(&delta);
                }
                let record = Record::Delta(Box::new(delta));
                serde_json::to_writer(&mut self.buffer, &record)?;
                if let Record::Delta(delta) = record {
                    delta.apply(last);
                }
            }
            None => {
                let first = checkpoint.to_owned();
                self.image = None;
                serde_json::to_writer(
                    &mut self.buffer,
                    &Record::Checkpoint(Box::new(first.clone())),
                )?;
                self.last = Some(first);
            }
        }
        let redacted = match fabro_llm::redact::redactor().redact_bytes(&self.buffer) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(redacted) => Some(redacted),
        };
        if let Some(redacted) = redacted {
            self.buffer = redacted;
        }
        Ok(&self.buffer)
    }

    /// The state the records describe.
    pub fn last(&self) -> Option<&Checkpoint> {
        self.last.as_ref()
    }

    /// `checkpoint`, the one the last record described, serialised whole as
    /// `serde_json` would, without a newline: after the first call, a copy of parts kept
    /// up to date by the records.
    pub fn render(&mut self, checkpoint: &CheckpointView<'_>) -> &[u8] {
        self.whole.clear();
        match (&mut self.image, &self.last) {
            (Some(image), _) => image.render(checkpoint, &mut self.whole),
            (image @ None, Some(last)) => image
                .insert(CheckpointImage::of(last))
                .render(checkpoint, &mut self.whole),
            (None, None) => {
                let _ = serde_json::to_writer(&mut self.whole, checkpoint);
            }
        }
        &self.whole
    }
}

/// Replays journal records onto `base` (the state before the first of them, `None`
/// for a journal's beginning) as [`replay_records`] does; returns the state after the
/// last.
///
/// # Errors
/// As [`replay_records`].
pub fn replay_records_onto<'a>(
    base: Option<Checkpoint>,
    records: impl IntoIterator<Item = &'a str>,
    visit: &mut dyn FnMut(&Checkpoint),
) -> Result<Option<Checkpoint>, (usize, String)> {
    let mut state = base;
    for (position, text) in records.into_iter().enumerate() {
        let record = match serde_json::from_str::<Record>(text) {
            Ok(record) => record,
            Err(error) => match serde_json::from_str::<Checkpoint>(text) {
                Ok(checkpoint) => Record::Checkpoint(Box::new(checkpoint)),
                Err(_) => return Err((position + 1, error.to_string())),
            },
        };
        record
            .replay_onto(&mut state, visit)
            .map_err(|message| (position + 1, message.to_owned()))?;
    }
    Ok(state)
}

/// Replays journal records, oldest first, as [`JournalRecords::record`] made them (a
/// record may also be a whole checkpoint on its own, as stores wrote them before),
/// giving `visit` the state after each; returns the state after the last.
///
/// # Errors
/// When a record is not valid, with its position (from 1) and the parser's message; a
/// delta before any checkpoint is not valid.
pub fn replay_records<'a>(
    records: impl IntoIterator<Item = &'a str>,
    visit: &mut dyn FnMut(&Checkpoint),
) -> Result<Option<Checkpoint>, (usize, String)> {
    replay_records_onto(None, records, visit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::tests::checkpoint;

    /// A store's journal costs what changed: the first record is the whole checkpoint,
    /// the next ones deltas, and replaying them gives back every checkpoint.
    #[test]
    fn records_are_deltas_after_the_first_and_replay_to_every_checkpoint() {
        let names: Vec<String> = (0..200).map(|node| format!("node{node:03}")).collect();
        let states: Vec<Checkpoint> = (1..=names.len())
            .map(|count| {
                let completed: Vec<&str> = names[..count].iter().map(String::as_str).collect();
                checkpoint(&completed)
            })
            .collect();
        let mut journal = JournalRecords::default();
        let mut records = Vec::new();
        for state in &states {
            let record = journal
                .record(&state.view(), &ChangeHint::everything())
                .expect("serialises");
            records.push(String::from_utf8(record.to_vec()).expect("text"));
            assert_eq!(journal.last(), Some(state));
        }
        assert!(records[0].starts_with("{\"checkpoint\":"), "{}", records[0]);
        let whole = serde_json::to_string(&states[199]).expect("serialises");
        assert!(records[199].starts_with("{\"delta\":"), "{}", records[199]);
        assert!(
            records[199].len() * 20 < whole.len(),
            "a delta of {} bytes against a checkpoint of {}",
            records[199].len(),
            whole.len()
        );
        let mut visited = Vec::new();
        let last = replay_records(records.iter().map(String::as_str), &mut |state| {
            visited.push(state.clone());
        })
        .expect("replays");
        assert_eq!(visited, states);
        assert_eq!(last.as_ref(), states.last());
    }

    /// Records stored whole (as stores wrote them before deltas) replay as well; a
    /// damaged record is named by its position.
    #[test]
    fn whole_checkpoints_replay_and_damage_is_reported() {
        let first = checkpoint(&["a"]);
        let second = checkpoint(&["a", "b"]);
        let whole: Vec<String> = [&first, &second]
            .iter()
            .map(|state| serde_json::to_string(state).expect("serialises"))
            .collect();
        let last = replay_records(whole.iter().map(String::as_str), &mut |_| {}).expect("replays");
        assert_eq!(last, Some(second));
        let damaged = [whole[0].as_str(), "{\"delta\": 3}"];
        assert!(matches!(replay_records(damaged, &mut |_| {}), Err((2, _))));
        let orphan = [r#"{"delta":{}}"#];
        assert!(replay_records(orphan, &mut |_| {}).is_err());
    }
}
