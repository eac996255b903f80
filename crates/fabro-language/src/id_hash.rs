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
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
