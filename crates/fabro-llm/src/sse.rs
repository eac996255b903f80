//! An incremental decoder for server-sent events (the WHATWG `text/event-stream` format),
//! the one SSE reader of the workspace: LLM provider streams and the CLI's reading of a
//! `fabro server` event stream both use it.
//!
//! Bytes arrive in arbitrary chunks, split anywhere (inside a line, a CRLF pair or a
//! multi-byte character); [`SseDecoder::feed`] returns the events completed by each
//! chunk. Lines end with LF, CRLF or CR. The `event:`, `data:` (lines joined with LF)
//! and `id:` fields are kept; comment lines (`:` first) and other fields are ignored. A
//! line that is not UTF-8 is an error: the stream is malformed.
//!
//! ```
//! use fabro_llm::sse::{SseDecoder, SseEvent};
//!
//! let mut decoder = SseDecoder::default();
//! let mut events = decoder.feed(b": hello\r\nid: 7\r\nevent: tick\r\ndata: \xc3").unwrap();
//! events.extend(decoder.feed(b"\xa9\r\n\r\n").unwrap());
//! assert_eq!(
//!     events,
//!     vec![SseEvent { event: "tick".into(), data: "é".into(), id: Some("7".into()) }]
//! );
//! ```

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// The `data:` lines joined with LF.
    pub data: String,
    /// The stream's last event id when the event was dispatched: the newest `id:` field
    /// so far (this event's or an earlier one's), `None` before any or after an empty
    /// one. A client that reconnects sends it as `Last-Event-ID`.
    pub id: Option<String>,
}

/// The stream was not valid SSE: a line is not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed event stream: a line is not UTF-8")]
pub struct MalformedSse;

/// Incremental SSE decoder.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    skip_lf: bool,
    last_id: Option<String>,
}

impl SseDecoder {
    /// Feeds a chunk, returning the events it completed.
    ///
    /// # Errors
    /// [`MalformedSse`] when a completed line is not UTF-8; the decoder should not be
    /// fed further.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, MalformedSse> {
        let mut events = Vec::new();
        let mut input = chunk;
        if self.skip_lf && !input.is_empty() {
            // The previous chunk ended with CR; an LF opening this one belongs to it.
            if input[0] == b'\n' {
                input = &input[1..];
            }
            self.skip_lf = false;
        }
        while let Some(position) = input
            .iter()
            .position(|&byte| byte == b'\n' || byte == b'\r')
        {
            let terminator = input[position];
            let line_end = position;
            let mut next = position + 1;
            if terminator == b'\r' {
                match input.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            if self.buffer.is_empty() {
                self.line(&input[..line_end], &mut events)?;
            } else {
                let mut line = std::mem::take(&mut self.buffer);
                line.extend_from_slice(&input[..line_end]);
                self.line(&line, &mut events)?;
            }
            input = &input[next..];
        }
        self.buffer.extend_from_slice(input);
        Ok(events)
    }

    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) -> Result<(), MalformedSse> {
        if line.is_empty() {
            if self.has_data {
                events.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                    id: self.last_id.clone(),
                });
            }
            self.event.clear();
            self.has_data = false;
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| MalformedSse)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // An id with NUL is ignored (WHATWG); an empty one resets the last id.
            "id" if !value.contains('\0') => {
                self.last_id = (!value.is_empty()).then(|| value.to_owned());
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_chunks(text: &[u8], size: usize) -> Result<Vec<SseEvent>, MalformedSse> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in text.chunks(size) {
            events.extend(decoder.feed(chunk)?);
        }
        Ok(events)
    }

    #[test]
    fn events_survive_any_chunking() {
        let text = b"event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\n\ndata: one\ndata: two\n\nevent: b\rdata:z\r\r";
        let expected = vec![
            SseEvent {
                event: "a".to_owned(),
                data: "{\"x\":1}".to_owned(),
                id: None,
            },
            SseEvent {
                event: String::new(),
                data: "one\ntwo".to_owned(),
                id: None,
            },
            SseEvent {
                event: "b".to_owned(),
                data: "z".to_owned(),
                id: None,
            },
        ];
        for size in 1..=text.len() {
            assert_eq!(
                decode_in_chunks(text, size).as_ref(),
                Ok(&expected),
                "chunk size {size}"
            );
        }
    }

    /// Multi-byte characters (2, 3 and 4 bytes), CRLF, CR and LF line ends, comment
    /// lines, ids (kept across events, reset by an empty one): split in two at every
    /// byte offset, and in three around every offset, the stream decodes the same.
    #[test]
    fn events_split_at_every_byte_decode_the_same() {
        let text = ": opened\r\n\r\nid: 1\r\nevent: Grüße\r\ndata: {\"goal\":\"日本語 ✓ 🚀\"}\r\n\r\n: keep-alive\r\n\
                    data: ü\r\ndata: é\n\nid: 3\revent: x\rdata: 🚀\r\r:c\nid\ndata: end\n\n"
            .as_bytes();
        let event = |event: &str, data: &str, id: Option<&str>| SseEvent {
            event: event.to_owned(),
            data: data.to_owned(),
            id: id.map(str::to_owned),
        };
        let expected = vec![
            event("Grüße", "{\"goal\":\"日本語 ✓ 🚀\"}", Some("1")),
            event("", "ü\né", Some("1")),
            event("x", "🚀", Some("3")),
            event("", "end", None),
        ];
        for split in 0..=text.len() {
            let mut decoder = SseDecoder::default();
            let mut events = decoder.feed(&text[..split]).expect("valid SSE");
            events.extend(decoder.feed(&text[split..]).expect("valid SSE"));
            assert_eq!(events, expected, "split at byte {split}");
            for second in split..=text.len() {
                let mut decoder = SseDecoder::default();
                let mut events = Vec::new();
                for part in [&text[..split], &text[split..second], &text[second..]] {
                    events.extend(decoder.feed(part).expect("valid SSE"));
                }
                assert_eq!(events, expected, "split at bytes {split} and {second}");
            }
        }
        for size in 1..=text.len() {
            assert_eq!(
                decode_in_chunks(text, size).as_ref(),
                Ok(&expected),
                "chunk size {size}"
            );
        }
    }

    #[test]
    fn invalid_utf8_is_malformed() {
        assert_eq!(
            decode_in_chunks(b"data: \xff\xfe\n\n", 4),
            Err(MalformedSse)
        );
        assert_eq!(decode_in_chunks(b"data: partial", 4), Ok(Vec::new()));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512), size in 1usize..64) {
            let _ = decode_in_chunks(&bytes, size);
        }

        #[test]
        fn encoded_events_decode_whatever_the_chunking(
            events in proptest::collection::vec(("[a-z.]{0,12}", "[ -~]{0,40}"), 0..8),
            size in 1usize..32,
        ) {
            let mut text = String::new();
            for (name, data) in &events {
                if !name.is_empty() {
                    text.push_str(&format!("event: {name}\r\n"));
                }
                text.push_str(&format!("data: {data}\n\n"));
            }
            let decoded = decode_in_chunks(text.as_bytes(), size).expect("valid SSE");
            let expected: Vec<SseEvent> = events
                .iter()
                .map(|(name, data)| SseEvent { event: name.clone(), data: data.clone(), id: None })
                .collect();
            proptest::prop_assert_eq!(decoded, expected);
        }
    }
}
