//! The configuration file reader's cursor (SPEC 12.3): one [`Section`] per TOML table,
//! whose keys are checked against the known ones on creation (unknown keys get a
//! did-you-mean from [`edit_distance`]), with typed getters that report the file and line
//! of a value of the wrong type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{is_credential_key, line_column, ConfigError};

/// `Levenshtein` distance, for suggestions.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, b_char) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

pub(super) struct Context<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
    pub(super) directory: &'a Path,
}

impl Context<'_> {
    pub(super) fn line(&self, offset: usize) -> usize {
        line_column(self.text, offset).0
    }
}

/// One table of the file, with its dotted prefix; its keys are checked on creation.
pub(super) struct Section<'a, 'i> {
    pub(super) context: &'a Context<'a>,
    pub(super) prefix: String,
    pub(super) table: &'a DeTable<'i>,
}

impl<'a, 'i> Section<'a, 'i> {
    /// A table whose keys must be in `known`.
    pub(super) fn new(
        context: &'a Context<'a>,
        prefix: String,
        table: &'a DeTable<'i>,
        known: &[&str],
    ) -> Result<Self, ConfigError> {
        let section = Section::free(context, prefix, table)?;
        for (key, _) in table {
            let name = key.get_ref().as_ref();
            if known.contains(&name) {
                continue;
            }
            let suggestion = known
                .iter()
                .map(|candidate| (edit_distance(name, candidate), *candidate))
                .filter(|(distance, _)| *distance <= 2)
                .min()
                .map(|(_, candidate)| section.child(candidate));
            return Err(ConfigError::UnknownKey {
                key: section.child(name),
                file: context.file.to_path_buf(),
                line: context.line(key.span().start),
                suggestion,
            });
        }
        Ok(section)
    }

    /// A table with free keys (variables, environment), still free of credentials.
    pub(super) fn free(
        context: &'a Context<'a>,
        prefix: String,
        table: &'a DeTable<'i>,
    ) -> Result<Self, ConfigError> {
        let section = Section {
            context,
            prefix,
            table,
        };
        for (key, _) in table {
            if is_credential_key(key.get_ref()) {
                return Err(ConfigError::Credential {
                    key: section.child(key.get_ref()),
                    file: context.file.to_path_buf(),
                    line: context.line(key.span().start),
                });
            }
        }
        Ok(section)
    }

    pub(super) fn child(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    pub(super) fn get(&self, key: &str) -> Option<&'a Spanned<DeValue<'i>>> {
        self.table
            .iter()
            .find(|(name, _)| name.get_ref() == key)
            .map(|(_, value)| value)
    }

    pub(super) fn type_error(
        &self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        expected: &'static str,
        found: &DeValue<'_>,
    ) -> ConfigError {
        ConfigError::Type {
            key: self.child(key),
            file: self.context.file.to_path_buf(),
            line: self.context.line(value.span().start),
            expected,
            found: found.type_str(),
        }
    }

    pub(super) fn expect_table(
        &self,
        key: &str,
        value: &'a Spanned<DeValue<'i>>,
    ) -> Result<&'a DeTable<'i>, ConfigError> {
        match value.get_ref() {
            DeValue::Table(table) => Ok(table),
            other => Err(self.type_error(key, value, "a table", other)),
        }
    }

    pub(super) fn section(
        &self,
        key: &str,
        known: &[&str],
    ) -> Result<Option<Section<'a, 'i>>, ConfigError> {
        match self.get(key) {
            Some(value) => {
                let table = self.expect_table(key, value)?;
                Section::new(self.context, self.child(key), table, known).map(Some)
            }
            None => Ok(None),
        }
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.get(key) {
            Some(value) => match value.get_ref() {
                DeValue::String(text) => Ok(Some(text.to_string())),
                other => Err(self.type_error(key, value, "a string", other)),
            },
            None => Ok(None),
        }
    }

    pub(super) fn path(&self, key: &str) -> Result<Option<PathBuf>, ConfigError> {
        Ok(self
            .string(key)?
            .map(|path| self.context.directory.join(path)))
    }

    pub(super) fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            Some(value) => match value.get_ref() {
                DeValue::Boolean(flag) => Ok(Some(*flag)),
                other => Err(self.type_error(key, value, "a boolean", other)),
            },
            None => Ok(None),
        }
    }

    pub(super) fn strings(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.type_error(key, value, "an array of strings", value.get_ref()));
        };
        items
            .iter()
            .map(|item| match item.get_ref() {
                DeValue::String(text) => Ok(text.to_string()),
                other => Err(self.type_error(key, item, "an array of strings", other)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    pub(super) fn string_table(&self, key: &str) -> Result<BTreeMap<String, String>, ConfigError> {
        let Some(value) = self.get(key) else {
            return Ok(BTreeMap::new());
        };
        let table = self.expect_table(key, value)?;
        let section = Section::free(self.context, self.child(key), table)?;
        let mut entries = BTreeMap::new();
        for (name, _) in table {
            if let Some(text) = section.string(name.get_ref())? {
                entries.insert(name.get_ref().to_string(), text);
            }
        }
        Ok(entries)
    }
}
