//! The documentation's relative links resolve: README.md, docs/*.md, RELIABILITY.md,
//! BENCHMARKS.md and bench/*.md link into each other (and into sections of each other), and a page
//! moved or a heading renamed must not leave a link pointing nowhere. No network: links with a
//! scheme (`https://…`) are not followed.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked, relative to the repository.
fn documentation_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![
        root.join("README.md"),
        root.join("RELIABILITY.md"),
        root.join("BENCHMARKS.md"),
    ];
    for dir in ["docs", "bench"] {
        let mut pages: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}/: {e}"))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
            .collect();
        pages.sort();
        files.extend(pages);
    }
    files
}

/// The text outside code: fenced blocks, indented blocks (four spaces after a blank line) and
/// inline code spans become blanks, so that `](x)` inside an example is not taken for a link.
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    let mut indented = false;
    let mut previous_blank = true;
    for line in markdown.lines() {
        let blank = line.trim().is_empty();
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
        } else if fenced {
            out.push('\n');
        } else if line.starts_with("    ") && (previous_blank || indented) {
            indented = true;
            out.push('\n');
        } else {
            if !blank {
                indented = false;
            }
            out.push_str(line);
            out.push('\n');
        }
        previous_blank = blank;
    }
    // Inline code spans (a span may continue on the next line).
    let mut without_code = String::new();
    let mut in_code = false;
    for c in out.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code || c == '\n' {
            without_code.push(c);
        }
    }
    without_code
}

/// Every link target `](TARGET)` in the prose; a link's text may run over a line break.
fn link_targets(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(|c: char| c == ')' || c.is_whitespace()) {
            targets.push(rest[..end].to_string());
        }
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `_` and `-`
/// stay), each space a `-`; a link inside the heading counts with its text.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        text.push_str(&rest[..open]);
        rest = &rest[open + 2..];
        rest = rest.find(')').map_or("", |close| &rest[close + 1..]);
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings, with GitHub's `-1`, `-2` … for repeated ones.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// What is wrong with the relative links of `file`: one line per link that names a missing file
/// or a heading its target does not have.
fn broken_links(file: &Path) -> Vec<String> {
    let markdown = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut broken = Vec::new();
    for target in link_targets(&markdown) {
        let is_external = target.contains("://") || target.starts_with("mailto:");
        if is_external {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        if !resolved.exists() {
            broken.push(format!(
                "{}: ({target}): no file {}",
                file.display(),
                resolved.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor {
            let page = fs::read_to_string(&resolved).unwrap_or_default();
            if !anchors(&page).contains(anchor) {
                broken.push(format!(
                    "{}: ({target}): {} has no heading #{anchor}",
                    file.display(),
                    resolved.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_documentation_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = documentation_files(root);
    assert!(
        files.iter().any(|f| f.ends_with("docs/reference.md")),
        "{files:?}"
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in &files {
        checked += link_targets(&fs::read_to_string(file).unwrap()).len();
        broken.extend(broken_links(file));
    }
    assert!(checked > 50, "only {checked} links found in {files:?}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_names_a_missing_page_and_a_missing_heading() {
    let dir = std::env::temp_dir().join(format!("leader-exec-docs-{}", std::process::id()));
    fs::create_dir_all(dir.join("docs")).unwrap();
    fs::write(
        dir.join("docs/page.md"),
        "# A page\n\n## Limits and bad input\n\n## Monitoring: metrics, `--http`\n\n## Once\n\n## Once\n",
    )
    .unwrap();
    fs::write(
        dir.join("README.md"),
        "See [limits](docs/page.md#limits-and-bad-input), [the\nmetrics](docs/page.md#monitoring-metrics---http),\n\
         [again](docs/page.md#once-1), [here](#top) and [the web](https://example.invalid/x#y).\n\n\
         # Top\n\n    [not a link](docs/absent.md)\n\n\
         Broken: [gone](docs/gone.md), [no heading](docs/page.md#signals), `[code](docs/absent.md)`.\n",
    )
    .unwrap();
    let broken = broken_links(&dir.join("README.md"));
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("(docs/gone.md): no file"), "{broken:#?}");
    assert!(broken[1].contains("has no heading #signals"), "{broken:#?}");
}

/// The installed documentation stays complete: every docs/ page is in the package's assets
/// (Cargo.toml) and in install.sh's file list (which packaging/test-install.sh compares with the
/// assets), so README.md's links into docs/ resolve under /usr/share/doc/leader-exec too.
#[test]
fn every_docs_page_is_installed_beside_the_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo_toml = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let install_sh = fs::read_to_string(root.join("install.sh")).unwrap();
    let mut missing = Vec::new();
    for page in documentation_files(root) {
        let relative = page.strip_prefix(root).unwrap().display().to_string();
        if !relative.starts_with("docs/") {
            continue;
        }
        let asset = format!(r#"["{relative}", "usr/share/doc/leader-exec/docs/", "644"]"#);
        if !cargo_toml.contains(&asset) {
            missing.push(format!("Cargo.toml's assets lack {asset}"));
        }
        let file = format!("\n{relative} share/doc/leader-exec/{relative} 644\n");
        if !install_sh.contains(&file) {
            missing.push(format!("install.sh's FILES lack {}", file.trim()));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Whether `word` is a crontab time field (`0`, `*/5`, `1-5`, `mon`) or a `@daily` schedule.
fn schedule_field(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "*/,-".contains(c))
        && (word.chars().any(|c| c.is_ascii_digit() || c == '*')
            || word.len() == 3 && word.chars().all(|c| c.is_ascii_alphabetic()))
}

/// Crontab lines of `text` that run a bare `leader-exec`: cron runs them with its own PATH
/// (Debian's cron: `/usr/bin:/bin`), which does not hold /usr/local/bin, where install.sh and
/// the tarball put the binary. A line is fine if it names the binary by an absolute path, or if
/// a `PATH=` line comes before it in the same example (a blank line ends an example).
fn cron_lines_without_a_path(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut path_set = false;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            path_set = false;
            continue;
        }
        if words[0].starts_with("PATH=") {
            path_set = true;
            continue;
        }
        let command = if words[0].starts_with('@') {
            words.get(1)
        } else if words.len() > 5 && words[..5].iter().all(|w| schedule_field(w)) {
            words.get(5)
        } else {
            None
        };
        if command == Some(&"leader-exec") && !path_set {
            found.push(line.trim().to_owned());
        }
    }
    found
}

#[test]
fn every_cron_example_names_the_binary_by_its_path_or_sets_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = documentation_files(root);
    files.push(root.join("src/cli.rs"));
    files.push(root.join("man/leader-exec.1"));
    let mut bare = Vec::new();
    let mut examples = 0;
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        // The man page escapes `-` as `\-`.
        let text = text.replace("\\-", "-");
        examples += text
            .lines()
            .filter(|l| l.contains("* * *") && l.contains("leader-exec"))
            .count();
        for line in cron_lines_without_a_path(&text) {
            bare.push(format!("{}: {line}", file.display()));
        }
    }
    assert!(examples >= 4, "no cron examples found: is the check blind?");
    assert!(
        bare.is_empty(),
        "cron runs these with PATH=/usr/bin:/bin, without /usr/local/bin: name the binary by its \
         path, or set PATH= above them (docs/operations.md, Running from cron):\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_cron_check_names_a_bare_leader_exec_and_passes_a_path() {
    let bare =
        "    0 2 * * *  leader-exec --lease a -- /srv/job\n    @daily leader-exec --lease b -- x\n";
    assert_eq!(cron_lines_without_a_path(bare).len(), 2);
    let full = "    0 2 * * *  /usr/local/bin/leader-exec --lease a -- /srv/job\n";
    assert!(cron_lines_without_a_path(full).is_empty());
    let path = "    PATH=/usr/local/bin:/usr/bin:/bin\n    */5 * * * mon-fri  leader-exec --lease a -- x\n";
    assert!(cron_lines_without_a_path(path).is_empty());
    // A PATH= of another example does not count.
    let apart =
        "    PATH=/usr/local/bin:/usr/bin:/bin\n\n    0 2 * * *  leader-exec --lease a -- x\n";
    assert_eq!(cron_lines_without_a_path(apart).len(), 1);
}

/// The package's words name every store, and the pages say what is there: the description and
/// the Debian package's suggestions cover etcd, PostgreSQL and ZooKeeper; docs/etcd.md has no
/// placeholder and one section per subject; the tarball's install line reads the file where
/// packaging/tarball.sh writes it.
#[test]
fn the_package_and_the_pages_name_every_store_and_real_paths() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo_toml = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let field = |name: &str| {
        cargo_toml
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no {name} in Cargo.toml"))
            .to_owned()
    };
    let description = field("description");
    for store in ["etcd", "PostgreSQL", "ZooKeeper"] {
        assert!(description.contains(store), "description: {description}");
    }
    let suggests = field("suggests");
    for package in ["etcd-server", "postgresql", "zookeeper"] {
        assert!(suggests.contains(package), "suggests: {suggests}");
    }

    let etcd = fs::read_to_string(root.join("docs/etcd.md")).unwrap();
    assert!(
        !etcd.contains("to be described"),
        "docs/etcd.md: a placeholder"
    );
    let mut subjects = HashSet::new();
    for heading in etcd.lines().filter(|l| l.starts_with('#')) {
        for flag in heading
            .split(['`', ' ', '(', ')'])
            .filter(|w| w.starts_with("--"))
        {
            assert!(
                subjects.insert(flag.to_owned()),
                "docs/etcd.md: two sections on {flag}"
            );
        }
    }

    let tarball_sh = fs::read_to_string(root.join("packaging/tarball.sh")).unwrap();
    assert!(
        tarball_sh.contains("dist=$target/dist"),
        "where tarball.sh writes"
    );
    for page in ["README.md", "docs/operations.md"] {
        let text = fs::read_to_string(root.join(page)).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(" -xzf ")).collect();
        assert!(!lines.is_empty(), "{page}: no tarball install line");
        for line in lines {
            assert!(
                line.contains("-xzf target/dist/leader-exec-"),
                "{page}: the tarball is written to target/dist/: {line}"
            );
        }
    }
}

/// `--contain pidns` is described with its limits wherever it is described: `$$` in the command
/// is an inner pid (a pid file names the wrong process outside), and it is not a sandbox.
#[test]
fn pidns_is_described_as_no_sandbox_with_inner_pids() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for page in ["docs/reference.md", "docs/safety.md"] {
        let text = prose(&fs::read_to_string(root.join(page)).unwrap());
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for words in ["inner pid", "not a sandbox"] {
            assert!(text.contains(words), "{page}: pidns without \"{words}\"");
        }
    }
}
