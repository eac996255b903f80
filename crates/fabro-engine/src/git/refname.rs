//! Ref arguments of `fabro resume` (SPEC 8.7 step 1): `fabro/run/{id}`, `fabro/meta/{id}` and
//! `refs/fabro/{id}`, optionally preceded by `refs/heads/`, `refs/remotes/{remote}/` or
//! `{remote}/`.

/// Which of fabro's refs an argument named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunRefKind {
    /// `fabro/run/{id}`, the run branch.
    RunBranch,
    /// `fabro/meta/{id}`, the metadata ref as pushed to a remote.
    MetaBranch,
    /// `refs/fabro/{id}`, the local metadata ref.
    MetadataRef,
}

/// A parsed ref argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// The run id the ref names.
    pub run_id: String,
    /// The kind of ref.
    pub kind: RunRefKind,
    /// The remote named by a `refs/remotes/{remote}/` or `{remote}/` prefix.
    pub remote: Option<String>,
}

/// Parses a ref argument; `None` when `argument` is not one of the accepted forms (then it is
/// a run id or prefix, SPEC 8.7 step 1).
pub fn parse_run_ref(argument: &str) -> Option<RunRef> {
    if let Some(found) = parse_bare(argument) {
        return Some(found);
    }
    if let Some(rest) = argument.strip_prefix("refs/heads/") {
        return parse_bare(rest).filter(|found| found.kind != RunRefKind::MetadataRef);
    }
    let (remote, rest) = match argument.strip_prefix("refs/remotes/") {
        Some(rest) => rest.split_once('/')?,
        None => argument.split_once('/')?,
    };
    if remote.is_empty() || remote == "refs" {
        return None;
    }
    let mut found = parse_bare(rest)?;
    found.remote = Some(remote.to_owned());
    Some(found)
}

fn parse_bare(name: &str) -> Option<RunRef> {
    let (kind, run_id) = if let Some(id) = name.strip_prefix("fabro/run/") {
        (RunRefKind::RunBranch, id)
    } else if let Some(id) = name.strip_prefix("fabro/meta/") {
        (RunRefKind::MetaBranch, id)
    } else if let Some(id) = name.strip_prefix("refs/fabro/") {
        (RunRefKind::MetadataRef, id)
    } else {
        return None;
    };
    let valid = !run_id.is_empty()
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    valid.then(|| RunRef {
        run_id: run_id.to_owned(),
        kind,
        remote: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(argument: &str, expected: Option<(&str, RunRefKind, Option<&str>)>) {
        let parsed = parse_run_ref(argument);
        let actual = parsed
            .as_ref()
            .map(|found| (found.run_id.as_str(), found.kind, found.remote.as_deref()));
        assert_eq!(actual, expected, "{argument}");
    }

    #[test]
    fn accepted_forms() {
        use RunRefKind::*;
        let id = "01JKXYZ";
        check("fabro/run/01JKXYZ", Some((id, RunBranch, None)));
        check("fabro/meta/01JKXYZ", Some((id, MetaBranch, None)));
        check("refs/fabro/01JKXYZ", Some((id, MetadataRef, None)));
        check("refs/heads/fabro/run/01JKXYZ", Some((id, RunBranch, None)));
        check(
            "refs/heads/fabro/meta/01JKXYZ",
            Some((id, MetaBranch, None)),
        );
        check(
            "refs/remotes/origin/fabro/meta/01JKXYZ",
            Some((id, MetaBranch, Some("origin"))),
        );
        check(
            "refs/remotes/up/fabro/run/01JKXYZ",
            Some((id, RunBranch, Some("up"))),
        );
        check(
            "origin/fabro/run/01JKXYZ",
            Some((id, RunBranch, Some("origin"))),
        );
        check(
            "origin/fabro/meta/01JKXYZ",
            Some((id, MetaBranch, Some("origin"))),
        );
    }

    #[test]
    fn rejected_forms() {
        check("01JKXYZ", None);
        check("fabro/run/", None);
        check("fabro/run/a/b", None);
        check("refs/heads/refs/fabro/X", None);
        check("refs/tags/fabro/run/X", None);
        check("fabro/other/X", None);
        check("/fabro/run/X", None);
        check("a/b/fabro/run/X", None);
        check("checkpoint.json", None);
    }
}
