//! The store door holds: nothing above `src/election/` names a store or a store's crate, nothing
//! in it imports from above it, and its files stay small. Read from the source, with comments
//! and string literals (help text naming the stores) left out.

use std::path::{Path, PathBuf};

/// Modules above the store door: `src/election/` may not use them.
const ABOVE: [&str; 18] = [
    "app",
    "assets",
    "cli",
    "settings",
    "run",
    "release",
    "observe",
    "resign",
    "fleet",
    "leadership",
    "occurrence",
    "renewal",
    "supervisor",
    "metrics",
    "metrics_file",
    "http",
    "logging",
    "commands",
];

/// What only `src/election/` may name: the stores' crates, modules and types.
const STORE_NAMES: [&str; 10] = [
    "etcd_client",
    "tokio_postgres",
    "zookeeper_client",
    "native_tls",
    "election::etcd",
    "election::postgres",
    "election::zookeeper",
    "Etcd",
    "Postgres",
    "ZooKeeper",
];

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The code of a Rust file without its comments and the contents of its string and character
/// literals, so that prose naming a store does not count.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{7f}'.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Whether `code` names `word` as a whole word (`Etcd`, not `EtcdKeeper`).
fn names(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !ident(before.as_ref()) && !ident(after.as_ref())
    })
}

/// Every line of `code` where it names one of `words`.
fn offences(path: &Path, source: &str, words: &[String]) -> Vec<String> {
    let code = code_only(source);
    code.lines()
        .enumerate()
        .filter(|(_, line)| words.iter().any(|w| names(line, w)))
        .map(|(n, line)| format!("{}:{}: {}", path.display(), n + 1, line.trim()))
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn nothing_above_the_store_door_names_a_store() {
    let election = src().join("election");
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let words: Vec<String> = STORE_NAMES.iter().map(|w| w.to_string()).collect();
    let found: Vec<String> = files
        .iter()
        .filter(|path| !path.starts_with(&election))
        .flat_map(|path| offences(path, &std::fs::read_to_string(path).unwrap(), &words))
        .collect();
    assert!(
        found.is_empty(),
        "store names above src/election/:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_store_door_imports_nothing_from_above_it() {
    let mut files = Vec::new();
    rust_files(&src().join("election"), &mut files);
    assert!(files.len() > 3, "{files:?}");
    let words: Vec<String> = ABOVE.iter().map(|m| format!("crate::{m}")).collect();
    let found: Vec<String> = files
        .iter()
        .flat_map(|path| offences(path, &std::fs::read_to_string(path).unwrap(), &words))
        .collect();
    assert!(
        found.is_empty(),
        "src/election/ uses modules above it:\n{}",
        found.join("\n")
    );
}

/// The door's files, and the top files it emptied of store code, stay readable.
#[test]
fn the_store_door_files_stay_under_900_lines() {
    let mut files = Vec::new();
    rust_files(&src().join("election"), &mut files);
    files.extend(["settings.rs", "app.rs", "cli.rs"].map(|f| src().join(f)));
    let long: Vec<String> = files
        .iter()
        .map(|path| (path, std::fs::read_to_string(path).unwrap().lines().count()))
        .filter(|(_, lines)| *lines > 900)
        .map(|(path, lines)| format!("{}: {lines} lines", path.display()))
        .collect();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The filter sees code, not prose: the checks above cannot pass by accident or fail on help
/// text.
#[test]
fn comments_and_strings_are_not_code() {
    let source = r##"
        // Elected through etcd, PostgreSQL or ZooKeeper.
        /* ZooKeeper */ const ABOUT: &str = "PostgreSQL or ZooKeeper";
        const RAW: &str = r#"Etcd "quoted" ZooKeeper"#;
        let c = '"'; let d = '\''; fn f<'a>(x: &'a str) {}
        use crate::election::zookeeper::ZooKeeper;
        let keeper = EtcdKeeper::new();
    "##;
    let words: Vec<String> = STORE_NAMES.iter().map(|w| w.to_string()).collect();
    let found = offences(Path::new("x.rs"), source, &words);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("use crate::election::zookeeper::ZooKeeper"),
        "{found:?}"
    );
}
