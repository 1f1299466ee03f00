//! The docs hold together: every relative link of the README and the book
//! (`docs/`) leads to a file that exists, and to a heading of it when it
//! names one; every chapter is in the book's table of contents.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files of the docs: the README and every page under `docs/`.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("docs/ is readable") {
            let path = entry.expect("docs/ is readable").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                found.push(path);
            }
        }
    }
    let mut found = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut found);
    found.sort();
    found
}

/// The targets of a page's inline links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Inline code spans hold no links.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            found.push(target.to_owned());
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading: lowercase, spaces to `-`, punctuation other
/// than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut found = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            found.insert(slug(line.trim_start_matches('#')));
        }
    }
    found
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 5, "the book has chapters: {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page is readable");
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (file, anchor) = target
                .split_once('#')
                .map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a page has a folder").join(file)
            };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|ext| ext == "md")
            {
                let target_text = std::fs::read_to_string(&resolved).expect("a page is readable");
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_table_of_contents() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md exists");
    let listed: BTreeSet<PathBuf> = links(&summary)
        .iter()
        .map(|target| docs.join(target.split('#').next().unwrap_or_default()))
        .collect();
    let unlisted: Vec<PathBuf> = pages()
        .into_iter()
        .filter(|page| page.starts_with(&docs) && !page.ends_with("SUMMARY.md"))
        .filter(|page| !listed.contains(page))
        .collect();
    assert!(
        unlisted.is_empty(),
        "chapters missing from docs/SUMMARY.md: {unlisted:?}"
    );
}

#[test]
fn a_link_checker_sees_links_and_headings_as_github_does() {
    let page = "# The manifest: `limits`\n[a](x.md#the-manifest-limits) `[b](not-a-link)`\n```\n[c](in-code)\n```\n";
    assert_eq!(links(page), ["x.md#the-manifest-limits"]);
    assert!(anchors(page).contains("the-manifest-limits"));
}
