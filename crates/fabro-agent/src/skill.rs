//! Agent Skills (SPEC 19.2): directories holding a `SKILL.md` with YAML front matter
//! (`name`, `description`) and Markdown instructions. [`discover`] finds them in
//! `{root}/skills/*/SKILL.md`, then `{repo}/.fabro/skills/*/SKILL.md` (later ones win by
//! name); the system prompt lists them and the `use_skill` tool ([`UseSkill`]) returns a
//! skill's body and the paths of its other files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabro_llm::BoxFuture;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tool::{parse_arguments, Tool, ToolContext, ToolError};
use crate::truncate::{OutputLimit, TruncationMode};

/// Largest `SKILL.md` read (a skill is instructions, not data).
const MAX_SKILL_BYTES: u64 = 256 * 1024;
/// Most files of a skill directory listed by `use_skill`.
const MAX_LISTED_FILES: usize = 200;

/// One skill found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// `name` of the front matter.
    pub name: String,
    /// `description` of the front matter.
    pub description: String,
    /// The skill's `SKILL.md`.
    pub path: PathBuf,
}

/// A `SKILL.md` that was skipped (a `skill_invalid` warning, SPEC 19.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSkill {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The directories skills are looked for in, in order: `{root}/skills`, then
/// `.fabro/skills` of the repository holding `work_dir` (the nearest ancestor with a
/// `.git`, else `work_dir` itself).
pub fn skill_dirs(fabro_home: &Path, work_dir: &Path) -> Vec<PathBuf> {
    let repo = work_dir
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(work_dir);
    vec![fabro_home.join("skills"), repo.join(".fabro/skills")]
}

/// The skills of `dirs` (each `*/SKILL.md`), later directories winning by name, sorted
/// by name; malformed files are returned apart.
pub fn discover(dirs: &[PathBuf]) -> (Vec<Skill>, Vec<InvalidSkill>) {
    let mut found: BTreeMap<String, Skill> = BTreeMap::new();
    let mut invalid = Vec::new();
    for dir in dirs {
        let Ok(entries) = fs_err::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path().join("SKILL.md"))
            .filter(|path| path.is_file())
            .collect();
        paths.sort();
        for path in paths {
            match read_skill(&path) {
                Ok(skill) => {
                    found.insert(skill.name.clone(), skill);
                }
                Err(reason) => invalid.push(InvalidSkill { path, reason }),
            }
        }
    }
    (found.into_values().collect(), invalid)
}

/// The `<skills>` block of the system prompt; empty without skills.
pub(crate) fn prompt_block(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut block = String::from(
        "\n\n<skills>\nSkills are instructions for particular tasks. When one fits the task, call use_skill with its name first and follow what it says.\n",
    );
    for skill in skills {
        block.push_str(&format!("- {}: {}\n", skill.name, skill.description));
    }
    block.push_str("</skills>");
    block
}

fn read_skill(path: &Path) -> Result<Skill, String> {
    let text = read_limited(path)?;
    let (front, _) = split_front_matter(&text).ok_or("no YAML front matter")?;
    let fields = parse_front_matter(front)?;
    let field = |key: &str| {
        fields
            .get(key)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .ok_or_else(|| format!("front matter has no {key}"))
    };
    Ok(Skill {
        name: field("name")?,
        description: field("description")?,
        path: path.to_path_buf(),
    })
}

fn read_limited(path: &Path) -> Result<String, String> {
    let metadata = fs_err::metadata(path).map_err(|error| error.to_string())?;
    if metadata.len() > MAX_SKILL_BYTES {
        return Err(format!("larger than {MAX_SKILL_BYTES} bytes"));
    }
    fs_err::read_to_string(path).map_err(|error| error.to_string())
}

/// The front matter (between the opening `---` line and the next `---` line) and the
/// body after it.
fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// The top-level `key: value` pairs of a front matter: plain, quoted, and folded (`>`)
/// or literal (`|`) block values; anything else that is not indented continuation is an
/// error.
fn parse_front_matter(front: &str) -> Result<BTreeMap<String, String>, String> {
    let mut fields = BTreeMap::new();
    let mut lines = front.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("malformed front matter line '{line}'"));
        };
        if key.starts_with(char::is_whitespace) {
            continue;
        }
        let value = value.trim();
        let value = if matches!(value, ">" | "|" | ">-" | "|-") {
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                if !next.is_empty() && !next.starts_with(char::is_whitespace) {
                    break;
                }
                block.push(next.trim());
                lines.next();
            }
            block.join(if value.starts_with('>') { " " } else { "\n" })
        } else {
            unquote(value)?
        };
        fields.insert(key.trim().to_owned(), value);
    }
    Ok(fields)
}

fn unquote(value: &str) -> Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(quote) {
            return inner
                .strip_suffix(quote)
                .map(str::to_owned)
                .ok_or_else(|| format!("unterminated quote in '{value}'"));
        }
    }
    Ok(value.to_owned())
}

/// `use_skill {name}`: the body of the skill's `SKILL.md` and the paths of its other
/// files.
#[derive(Debug)]
pub struct UseSkill {
    skills: Arc<Vec<Skill>>,
}

impl UseSkill {
    /// The tool over the skills listed to the agent.
    pub fn new(skills: Vec<Skill>) -> UseSkill {
        UseSkill {
            skills: Arc::new(skills),
        }
    }
}

#[derive(Deserialize)]
struct UseSkillArguments {
    name: String,
}

impl Tool for UseSkill {
    fn name(&self) -> &'static str {
        "use_skill"
    }

    fn description(&self) -> &'static str {
        "Loads the instructions of a skill listed in the system prompt, with the paths of its other files (open them with read_file)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The skill's name."}},
            "required": ["name"],
            "additionalProperties": false
        })
    }

    fn limit(&self) -> OutputLimit {
        OutputLimit::new(50_000, TruncationMode::HeadTail)
    }

    fn execute<'a>(
        &'a self,
        arguments: Value,
        _context: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments: UseSkillArguments = parse_arguments(arguments)?;
            let skill = self
                .skills
                .iter()
                .find(|skill| skill.name == arguments.name)
                .ok_or_else(|| ToolError::Failed(format!("no skill named {}", arguments.name)))?;
            let text = read_limited(&skill.path).map_err(ToolError::Failed)?;
            let body = split_front_matter(&text).map_or(text.as_str(), |(_, body)| body);
            let mut output = body.trim().to_owned();
            let files = other_files(&skill.path);
            if !files.is_empty() {
                output.push_str("\n\nFiles of this skill:\n");
                for file in files {
                    output.push_str(&format!("- {}\n", file.display()));
                }
            }
            Ok(output)
        })
    }
}

/// The files of a skill's directory besides `SKILL.md`, sorted, at most
/// [`MAX_LISTED_FILES`].
fn other_files(skill_md: &Path) -> Vec<PathBuf> {
    let Some(dir) = skill_md.parent() else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = ignore::WalkBuilder::new(dir)
        .standard_filters(false)
        .build()
        .flatten()
        .map(ignore::DirEntry::into_path)
        .filter(|path| path.is_file() && path != skill_md)
        .take(MAX_LISTED_FILES)
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests;
