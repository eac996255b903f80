//! Fuzzes the workspace's SSE decoder (`fabro_llm::sse`). Nothing may panic, and the
//! events do not depend on where the stream is split: fed whole, or in two chunks split
//! at the offset the first byte picks, the bytes decode to the same events (or to the
//! same malformed-stream error).
#![no_main]

use fabro_llm::sse::{MalformedSse, SseDecoder, SseEvent};
use libfuzzer_sys::fuzz_target;

fn decode(parts: &[&[u8]]) -> Result<Vec<SseEvent>, MalformedSse> {
    let mut decoder = SseDecoder::default();
    let mut events = Vec::new();
    for part in parts {
        events.extend(decoder.feed(part)?);
    }
    Ok(events)
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&first, stream)) = bytes.split_first() else {
        return;
    };
    let split = usize::from(first) % (stream.len() + 1);
    let whole = decode(&[stream]);
    let halves = decode(&[&stream[..split], &stream[split..]]);
    assert_eq!(whole, halves, "split at {split}");
});
