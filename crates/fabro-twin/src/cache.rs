//! Anthropic's prompt caching, as its documentation describes it, so tests can assert
//! what a real account would be billed (SPEC 10.8).
//!
//! The prompt is one sequence of blocks in prefix order: tool definitions, system
//! blocks, then the content blocks of each message. A block with `cache_control` is a
//! breakpoint: the prefix up to and including it may be cached. A request may mark at
//! most four (more is a 400). A prefix shorter than the minimum cacheable length is not
//! cached. On each request the longest marked prefix already in the cache is read; the
//! marked prefixes after it are written. Usage then reports `cache_read_input_tokens`
//! (the prefix read), `cache_creation_input_tokens` (from there to the last prefix
//! written) and `input_tokens` (the rest). Tokens are counted as a quarter of the
//! characters of each block's JSON without its marker, so a marker never changes what a
//! prefix is. The automatic look-back of up to 20 blocks before a breakpoint is not
//! modelled: a client must mark the prefix it wants read, which makes the twin's bill an
//! upper bound of the real one.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// The most breakpoints a request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// Tokens below which a prefix is not cached (Claude Sonnet and Opus models).
pub(crate) const MIN_CACHEABLE_TOKENS: u64 = 1024;

/// The prefixes written so far, by hash of their blocks.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    prefixes: HashSet<u64>,
}

/// What one request is billed for, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bill {
    /// Every prompt token.
    pub(crate) total: u64,
    /// Read from the cache.
    pub(crate) read: u64,
    /// Written to the cache.
    pub(crate) written: u64,
}

impl PromptCache {
    /// Bills the Messages request `body`, writing its marked prefixes; the API's
    /// message when the request is refused.
    pub(crate) fn bill(&mut self, body: &Value) -> Result<Bill, String> {
        let blocks = blocks(body);
        let breakpoints = blocks.iter().filter(|block| block.marked).count();
        if breakpoints > MAX_BREAKPOINTS {
            return Err(format!(
                "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
            ));
        }
        // (prefix hash, prefix tokens) at every breakpoint, in order.
        let mut marked = Vec::new();
        let mut hasher = DefaultHasher::new();
        let mut total = 0;
        for block in &blocks {
            block.text.hash(&mut hasher);
            total += block.tokens;
            if block.marked {
                marked.push((hasher.finish(), total));
            }
        }
        let hit = marked.iter().rposition(|(hash, tokens)| {
            *tokens >= MIN_CACHEABLE_TOKENS && self.prefixes.contains(hash)
        });
        let read = hit.map_or(0, |index| marked[index].1);
        let mut written_to = read;
        for (hash, tokens) in &marked[hit.map_or(0, |index| index + 1)..] {
            if *tokens >= MIN_CACHEABLE_TOKENS {
                self.prefixes.insert(*hash);
                written_to = *tokens;
            }
        }
        Ok(Bill {
            total,
            read,
            written: written_to - read,
        })
    }
}

/// One block of the prompt: its JSON without the marker, its tokens, its marker.
struct Block {
    text: String,
    tokens: u64,
    marked: bool,
}

fn blocks(body: &Value) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut push = |value: &Value| {
        let mut value = value.clone();
        let marked = value
            .as_object_mut()
            .is_some_and(|object| object.remove("cache_control").is_some());
        let text = value.to_string();
        let tokens = (text.chars().count() as u64).div_ceil(4);
        blocks.push(Block {
            text,
            tokens,
            marked,
        });
    };
    for tool in body["tools"].as_array().into_iter().flatten() {
        push(tool);
    }
    match &body["system"] {
        Value::Array(system) => system.iter().for_each(&mut push),
        Value::Null => {}
        text => push(&serde_json::json!({"type": "text", "text": text})),
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        // The role belongs to the prefix: the same text as another role is another prompt.
        push(&serde_json::json!({"role": message["role"]}));
        match &message["content"] {
            Value::Array(content) => content.iter().for_each(&mut push),
            text => push(&serde_json::json!({"type": "text", "text": text})),
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn long(text: &str) -> String {
        text.repeat(8_000)
    }

    fn marked(text: &str) -> Value {
        json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}})
    }

    #[test]
    fn a_marked_prefix_is_written_once_then_read() {
        let mut cache = PromptCache::default();
        let system = long("s");
        let mut body = json!({
            "system": [marked(&system)],
            "messages": [{"role": "user", "content": [marked("go")]}],
        });
        let first = cache.bill(&body).expect("billed");
        assert_eq!(first.read, 0);
        assert_eq!(first.written, first.total);
        // The next turn appends; its newest block is marked, the old one still is.
        body["messages"].as_array_mut().expect("messages").extend([
            json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
            json!({"role": "user", "content": [marked("more")]}),
        ]);
        let second = cache.bill(&body).expect("billed");
        assert_eq!(
            second.read, first.total,
            "the first request's prefix is read"
        );
        assert_eq!(second.read + second.written, second.total);
        // Unmarked, nothing is read or written.
        let plain = json!({"system": system, "messages": [{"role": "user", "content": "go"}]});
        let third = cache.bill(&plain).expect("billed");
        assert_eq!((third.read, third.written), (0, 0));
    }

    #[test]
    fn short_prefixes_are_not_cached_and_five_breakpoints_are_refused() {
        let mut cache = PromptCache::default();
        let body = json!({"messages": [{"role": "user", "content": [marked("short")]}]});
        let bill = cache.bill(&body).expect("billed");
        assert_eq!((bill.read, bill.written), (0, 0));
        assert!(bill.total < MIN_CACHEABLE_TOKENS);
        let five: Vec<Value> = (0..5).map(|n| marked(&format!("block {n}"))).collect();
        let body = json!({"messages": [{"role": "user", "content": five}]});
        assert_eq!(
            cache.bill(&body),
            Err("A maximum of 4 blocks with cache_control may be provided. Found 5.".to_owned())
        );
    }

    #[test]
    fn the_prefix_order_is_tools_then_system_then_messages() {
        let mut cache = PromptCache::default();
        let tool = json!({"name": "read", "description": long("d"), "input_schema": {}});
        let mut tool_marked = tool;
        tool_marked["cache_control"] = json!({"type": "ephemeral"});
        let body = json!({"tools": [tool_marked], "system": "a",
                          "messages": [{"role": "user", "content": "x"}]});
        let first = cache.bill(&body).expect("billed");
        assert!(first.written > 0);
        // Another system prompt after the same tools still reads the tools' prefix.
        let body = json!({"tools": [tool_marked], "system": "b",
                          "messages": [{"role": "user", "content": "y"}]});
        let second = cache.bill(&body).expect("billed");
        assert_eq!(second.read, first.written);
    }
}
