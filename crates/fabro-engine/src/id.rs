//! Ids as types: [`RunId`], [`NodeId`] and [`BlobRef`] (STYLE: ids are newtypes, not
//! `String`). They serialise as the bare string, so files are unchanged.

use std::borrow::Borrow;
use std::fmt;

/// The prefix of every blob ref (SPEC 11.2): `blob://sha256/{hex}`.
pub(crate) const BLOB_PREFIX: &str = "blob://sha256/";

use serde::{Deserialize, Serialize};

/// Declares a string newtype with its conversions.
macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id `text`.
            pub fn new(text: impl Into<String>) -> $name {
                $name(text.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        /// Reads as the text it is, like the `String` it replaces.
        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> $name {
                $name(text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> $name {
                $name(text.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

string_id! {
    /// A run id: a ULID, or what `--run-id` named.
    RunId
}

string_id! {
    /// A node id of a workflow graph.
    NodeId
}

/// A reference to a blob of the store (SPEC 11.2): `blob://sha256/{64 hex digits}`.
/// Only [`BlobRef::parse`] and the blob store make one, so every `BlobRef` is well
/// formed; it serialises as the bare string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BlobRef(String);

impl BlobRef {
    /// `text` as a blob ref, if it is one.
    pub fn parse(text: &str) -> Option<BlobRef> {
        let hex = text.strip_prefix(BLOB_PREFIX)?;
        (hex.len() == 64 && hex.bytes().all(|byte| byte.is_ascii_hexdigit()))
            .then(|| BlobRef(text.to_owned()))
    }

    /// The ref of the blob whose SHA-256 is `hex` (64 lowercase hex digits).
    pub fn of_hex(hex: &str) -> BlobRef {
        BlobRef(format!("{BLOB_PREFIX}{hex}"))
    }

    /// The ref as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The digest, lowercase.
    pub fn hex(&self) -> String {
        self.0[BLOB_PREFIX.len()..].to_ascii_lowercase()
    }

    /// The ref as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for BlobRef {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl AsRef<str> for BlobRef {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<BlobRef> for String {
    fn from(reference: BlobRef) -> String {
        reference.0
    }
}

/// Why text is not a blob ref.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed blob ref '{0}'")]
pub struct MalformedBlobRef(pub String);

impl TryFrom<String> for BlobRef {
    type Error = MalformedBlobRef;

    fn try_from(text: String) -> Result<BlobRef, MalformedBlobRef> {
        BlobRef::parse(&text).ok_or(MalformedBlobRef(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialise_as_bare_strings() {
        let run_id = RunId::new("01JRUN");
        assert_eq!(
            serde_json::to_string(&run_id).expect("serialises"),
            "\"01JRUN\""
        );
        let node: NodeId = serde_json::from_str("\"plan\"").expect("reads");
        assert_eq!(node, "plan");
    }

    #[test]
    fn blob_refs_are_checked_when_made_and_when_read() {
        let text = format!("{BLOB_PREFIX}{}", "aB".repeat(32));
        let reference = BlobRef::parse(&text).expect("a ref");
        assert_eq!(reference.hex(), "ab".repeat(32));
        assert_eq!(
            serde_json::to_string(&reference).expect("serialises"),
            format!("\"{text}\"")
        );
        assert_eq!(
            serde_json::from_str::<BlobRef>(&format!("\"{text}\"")).expect("reads"),
            reference
        );
        for bad in [
            "blob://sha256/abc",
            "sha256/00",
            &format!("{BLOB_PREFIX}{}", "g".repeat(64)),
        ] {
            assert_eq!(BlobRef::parse(bad), None, "{bad}");
            assert!(serde_json::from_str::<BlobRef>(&format!("\"{bad}\"")).is_err());
        }
    }
}
