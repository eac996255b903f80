//! A fast, non-cryptographic hasher for node ids and attribute keys.
//!
//! Workflows are trusted local files, so hash flooding is not a concern, while parsing
//! 100,000-node workflows hashes every id several times; the standard SipHash is the
//! largest single cost there. This is the multiply-rotate hash of rustc's `FxHasher`
//! with a splitmix64 finish.

use std::hash::{BuildHasherDefault, Hasher};

/// `HashMap` with [`IdHasher`].
pub(crate) type IdHashMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Multiply-rotate hasher over 8-byte words.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.add(tail_word(rest));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weak, and hashbrown picks buckets by low bits:
        // finish with the splitmix64 mixer so that `n1`, `n2`, … spread evenly.
        let mut z = self.hash;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// An index of node ids by position: maps an id to its position in a list of ids that
/// the caller keeps (the parser's nodes, then the workflow's, which share one order).
///
/// It stores no strings, only a hash fragment, a position and, for ids of up to seven
/// bytes, the id itself packed into a word, so the table the parser builds is handed on to
/// [`crate::Workflow`] instead of hashing every id again, and most lookups of a large
/// workflow touch one slot instead of a slot, the caller's list and the id's text.
#[derive(Debug, Clone)]
pub(crate) struct IdTable {
    /// Open addressing with linear probing. The first word is 0 when the slot is empty,
    /// else the high 32 bits of the id's hash and the position plus one; the second is
    /// [`packed_id`] of the id.
    slots: Vec<[u64; 2]>,
    len: usize,
}

impl Default for IdTable {
    fn default() -> IdTable {
        IdTable {
            slots: vec![[0; 2]; 64],
            len: 0,
        }
    }
}

impl IdTable {
    /// A table that holds `ids` ids without growing.
    pub(crate) fn with_capacity(ids: usize) -> IdTable {
        IdTable {
            slots: vec![[0; 2]; (ids * 2).next_power_of_two().max(64)],
            len: 0,
        }
    }

    /// Position of `id`, where `id_at(position)` returns the id stored at a position.
    pub(crate) fn find<'a>(&self, id: &str, id_at: impl Fn(usize) -> &'a str) -> Option<usize> {
        self.probe(id, hash_id(id), packed_id(id), id_at).ok()
    }

    /// Position of `id`, or the slot where it belongs.
    fn probe<'a>(
        &self,
        id: &str,
        fragment: u32,
        packed: u64,
        id_at: impl Fn(usize) -> &'a str,
    ) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut slot = fragment as usize & mask;
        loop {
            let [entry, entry_packed] = self.slots[slot];
            if entry == 0 {
                return Err(slot);
            }
            if (entry >> 32) as u32 == fragment && entry_packed == packed {
                let position = (entry & 0xffff_ffff) as usize - 1;
                // A packed id is the whole id; longer ids are compared as text.
                if packed != 0 || id_at(position) == id {
                    return Ok(position);
                }
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Position of `id`; when absent, records it at `next` (the position the caller is
    /// about to fill) and returns `Err(next)`.
    pub(crate) fn find_or_insert<'a>(
        &mut self,
        id: &str,
        next: usize,
        id_at: impl Fn(usize) -> &'a str,
    ) -> Result<usize, usize> {
        let fragment = hash_id(id);
        let packed = packed_id(id);
        match self.probe(id, fragment, packed, id_at) {
            Ok(position) => Ok(position),
            Err(slot) => {
                self.slots[slot] = [(u64::from(fragment) << 32) | (next as u64 + 1), packed];
                self.len += 1;
                // Keep at most half the slots full so that probes stay short.
                if self.len * 2 > self.slots.len() {
                    self.grow();
                }
                Err(next)
            }
        }
    }

    fn grow(&mut self) {
        let doubled = vec![[0; 2]; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for entry in old.into_iter().filter(|entry| entry[0] != 0) {
            let mut slot = (entry[0] >> 32) as usize & mask;
            while self.slots[slot][0] != 0 {
                slot = (slot + 1) & mask;
            }
            self.slots[slot] = entry;
        }
    }
}

/// An id of one to seven bytes packed into a word with its length in the top byte (so
/// never 0); 0 for other ids.
pub(crate) fn packed_id(id: &str) -> u64 {
    let bytes = id.as_bytes();
    if bytes.is_empty() || bytes.len() > 7 {
        return 0;
    }
    tail_word(bytes) | ((bytes.len() as u64) << 56)
}

/// Whether `a` and `b` are the same text. Short texts (attribute keys, most values) are
/// compared as one or two words inline instead of through a `memcmp` call.
#[inline]
pub(crate) fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let len = a.len();
    if len != b.len() {
        return false;
    }
    if len <= 8 {
        return tail_word(a) == tail_word(b);
    }
    if len <= 16 {
        // Two overlapping words cover every byte.
        return word_at(a, 0) == word_at(b, 0) && word_at(a, len - 8) == word_at(b, len - 8);
    }
    a == b
}

/// The little-endian word of the eight bytes of `bytes` from `start`.
#[inline]
fn word_at(bytes: &[u8], start: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[start..start + 8]);
    u64::from_le_bytes(word)
}

/// The little-endian word of up to eight `bytes`, zero-padded: what copying them into a
/// zeroed `[u8; 8]` gives, read with two overlapping loads instead of a copy whose length
/// is only known at run time (which becomes a `memcpy` call).
#[inline]
fn tail_word(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    // The two loads overlap or meet, so together they cover every byte; overlapping bytes
    // are equal in both and OR to themselves.
    match len {
        0 => 0,
        1 => u64::from(bytes[0]),
        2..=3 => {
            let low = u16::from_le_bytes([bytes[0], bytes[1]]);
            let high = u16::from_le_bytes([bytes[len - 2], bytes[len - 1]]);
            u64::from(low) | (u64::from(high) << (8 * (len - 2)))
        }
        4..=8 => {
            let low = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            let high = u32::from_le_bytes([
                bytes[len - 4],
                bytes[len - 3],
                bytes[len - 2],
                bytes[len - 1],
            ]);
            u64::from(low) | (u64::from(high) << (8 * (len - 4)))
        }
        _ => {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[..8]);
            u64::from_le_bytes(word)
        }
    }
}

/// The high half of the id's [`IdHasher`] hash (its best-mixed bits).
fn hash_id(id: &str) -> u32 {
    let mut hasher = IdHasher::default();
    hasher.write(id.as_bytes());
    (hasher.finish() >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_agrees_with_equality() {
        let texts = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "abc",
            "abd",
            "label",
            "shape",
            "labels",
            "condition",
            "conditiox",
            "outcome=fail",
            "outcome=succ",
            "outcome=fail!",
            "0123456789abcdef",
            "0123456789abcdeF",
            "1123456789abcdef",
            "0123456789abcdefg",
            "0123456789abcdefh",
        ];
        for a in texts {
            for b in texts {
                assert_eq!(same_text(a, b), a == b, "{a:?} {b:?}");
            }
        }
        // Every single differing byte position of every length is noticed.
        for len in 1..=20 {
            let base: String = (0..len).map(|i| char::from(b'a' + i as u8)).collect();
            for position in 0..len {
                let mut other = base.clone().into_bytes();
                other[position] = b'Z';
                let other = String::from_utf8(other).expect("ascii");
                assert!(!same_text(&base, &other), "{base} {other}");
                assert!(same_text(&base, &base.clone()));
            }
        }
    }

    #[test]
    fn tail_words_equal_zero_padded_copies() {
        let source: Vec<u8> = (0..9u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(0x81))
            .collect();
        for len in 0..=8 {
            let bytes = &source[..len];
            let mut word = [0u8; 8];
            word[..len].copy_from_slice(bytes);
            assert_eq!(tail_word(bytes), u64::from_le_bytes(word), "{len}");
        }
        assert_eq!(
            packed_id("n1"),
            u64::from_le_bytes([b'n', b'1', 0, 0, 0, 0, 0, 2])
        );
        assert_eq!(packed_id("abcdefg"), u64::from_le_bytes(*b"abcdefg\x07"));
        assert_eq!(packed_id("abcdefgh"), 0);
        assert_eq!(packed_id(""), 0);
    }

    #[test]
    fn similar_ids_spread_over_low_bits() {
        let buckets: std::collections::HashSet<u64> = (0..4096)
            .map(|index| {
                let mut hasher = IdHasher::default();
                std::hash::Hash::hash(&format!("n{index}"), &mut hasher);
                hasher.finish() & 4095
            })
            .collect();
        assert!(
            buckets.len() > 2400,
            "only {} of 4096 buckets used",
            buckets.len()
        );
    }

    #[test]
    fn maps_work_and_distinguish_similar_keys() {
        let mut map: IdHashMap<&str, usize> = IdHashMap::default();
        for (index, key) in ["n1", "n10", "n100", "n1000000001", "n1000000002"]
            .iter()
            .enumerate()
        {
            map.insert(key, index);
        }
        assert_eq!(map.get("n1000000002"), Some(&4));
        assert_eq!(map.get("n10"), Some(&1));
        assert_eq!(map.get("n2"), None);
    }

    #[test]
    fn id_tables_find_what_was_inserted_across_growth() {
        let mut ids: Vec<String> = Vec::new();
        let mut table = IdTable::default();
        for index in 0..1000 {
            let id = format!("n{}", index % 700);
            let found = table.find_or_insert(&id, ids.len(), |position| &ids[position]);
            match found {
                Ok(position) => assert_eq!(ids[position], id),
                Err(next) => {
                    assert_eq!(next, ids.len());
                    ids.push(id);
                }
            }
        }
        assert_eq!(ids.len(), 700);
        // Long ids are compared as text, short ones by their packed form.
        for long in ["a_node_with_a_long_id", "a_node_with_a_long_ie"] {
            let next = ids.len();
            let found = table.find_or_insert(long, next, |position| &ids[position]);
            assert_eq!(found, Err(next));
            ids.push(long.to_owned());
        }
        assert_eq!(
            table.find("a_node_with_a_long_ie", |position| &ids[position]),
            Some(701)
        );
        assert_eq!(
            table.find("a_node_with_a_long_if", |position| &ids[position]),
            None
        );
        assert_ne!(packed_id("n1"), packed_id("n1\0"));
        assert_eq!(packed_id("eight_by"), 0);
        assert_eq!(table.find("n699", |position| &ids[position]), Some(699));
        assert_eq!(table.find("n700", |position| &ids[position]), None);
    }
}
