//! Discovery, front matter and `use_skill`.
use super::*;

fn write(path: &Path, text: &str) {
    fs_err::create_dir_all(path.parent().unwrap()).unwrap();
    fs_err::write(path, text).unwrap();
}

#[test]
fn later_directories_win_and_malformed_skills_are_set_apart() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home/skills");
    let repo = dir.path().join("repo/.fabro/skills");
    write(
        &home.join("review/SKILL.md"),
        "---\nname: review\ndescription: old review\n---\nold body\n",
    );
    write(
        &home.join("commit/SKILL.md"),
        "---\nname: commit\ndescription: >\n  Write a commit\n  message.\n---\nbody\n",
    );
    write(
        &repo.join("review/SKILL.md"),
        "---\nname: \"review\"\ndescription: 'Review the diff'\n---\nnew body\n",
    );
    write(&repo.join("broken/SKILL.md"), "no front matter\n");
    write(
        &repo.join("nameless/SKILL.md"),
        "---\ndescription: x\n---\n",
    );
    let (skills, invalid) = discover(&[home, repo.clone()]);
    let names: Vec<(&str, &str)> = skills
        .iter()
        .map(|skill| (skill.name.as_str(), skill.description.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("commit", "Write a commit message."),
            ("review", "Review the diff")
        ]
    );
    assert_eq!(skills[1].path, repo.join("review/SKILL.md"));
    let reasons: Vec<(PathBuf, &str)> = invalid
        .iter()
        .map(|skill| (skill.path.clone(), skill.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (repo.join("broken/SKILL.md"), "no YAML front matter"),
            (repo.join("nameless/SKILL.md"), "front matter has no name")
        ]
    );
    assert!(prompt_block(&skills).contains("- review: Review the diff\n"));
    assert_eq!(prompt_block(&[]), "");
}

#[tokio::test]
async fn use_skill_returns_the_body_and_the_other_files() {
    let dir = tempfile::tempdir().unwrap();
    let skill_md = dir.path().join("review/SKILL.md");
    write(
        &skill_md,
        "---\nname: review\ndescription: d\n---\n\nCheck every hunk.\n",
    );
    write(&dir.path().join("review/checklist.md"), "- tests\n");
    let tool = Arc::new(UseSkill::new(vec![Skill {
        name: "review".to_owned(),
        description: "d".to_owned(),
        path: skill_md,
    }]));
    let (_tree, context) = crate::tool::test_support::context();
    let result =
        crate::tool::test_support::run(tool.clone(), json!({"name": "review"}), &context).await;
    assert!(!result.is_error, "{}", result.output);
    assert_eq!(
        result.output,
        format!(
            "Check every hunk.\n\nFiles of this skill:\n- {}\n",
            dir.path().join("review/checklist.md").display()
        )
    );
    let missing = crate::tool::test_support::run(tool, json!({"name": "deploy"}), &context).await;
    assert!(missing.is_error);
    assert_eq!(
        missing.output,
        "Tool error (use_skill): no skill named deploy"
    );
}
