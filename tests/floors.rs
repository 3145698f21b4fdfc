//! The source tree keeps the architecture DESIGN.md draws: floors, imports pointing down only, and
//! one store door. A module may use what is on its own floor or below (never a circle between
//! top-level modules); nothing above `src/election/` names a store, a store's type or a store's
//! crate; the store contract is one file (`src/election/contract.rs`), the only one to declare the
//! traits a store implements, and names no store; no source file grows past the size a reader can
//! hold in mind. The checks read the sources as text (comments and string literals removed), so a
//! new module or file is checked the moment it exists — and a new top-level module must be given a
//! floor here, and a place in docs/development.md's layout table, which is checked against these
//! floors too.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, top to bottom, and the top-level modules (`src/NAME.rs` or `src/NAME/`) on each.
const FLOORS: &[(&str, &[&str])] = &[
    ("top", &["main", "app", "cli", "validate", "assets"]),
    ("commands", &["commands"]),
    ("run", &["run"]),
    ("leader", &["process", "lease", "records"]),
    ("telemetry", &["telemetry"]),
    ("election", &["election"]),
    (
        "floor",
        &[
            "clock",
            "durations",
            "ended",
            "escape",
            "exit",
            "notify",
            "redact",
            "signals",
        ],
    ),
];

/// What only `src/election/` may name: the stores' own crates and types, and the store modules.
const STORE_NAMES: &[&str] = &[
    "etcd_client",
    "mysql_async",
    "tonic",
    "tokio_postgres",
    "tokio_postgres_rustls",
    "zookeeper_client",
    "Etcd",
    "MySql",
    "Postgres",
    "ZooKeeper",
    "election::etcd",
    "election::mysql",
    "election::postgres",
    "election::zookeeper",
];

/// The file that states the store contract: the traits a store implements, the look at an
/// endpoint that does not answer as the store, and what every store is opened with.
const CONTRACT: &str = "src/election/contract.rs";

/// What only the contract declares under src/election/, each once.
const CONTRACT_ITEMS: &[&str] = &[
    "trait Keeper",
    "trait Campaign",
    "trait Read",
    "trait Records",
    "trait Handover",
    "trait Describe",
    "trait MismatchProbe",
    "trait Store",
    "trait Door",
    "struct Open",
];

/// The store folders under src/election/, which the contract does not name either.
const STORE_FOLDERS: &[&str] = &["etcd", "mysql", "postgres", "zookeeper"];

/// The most lines a source file under src/, bench/ or tests/ may have: a file longer than this
/// holds more than one concern, tests included.
const MAX_LINES: usize = 950;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under src/ belongs to.
fn top_module(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap();
    let first = first.as_os_str().to_str().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_owned()
}

/// Rust source with comments, string literals and char literals blanked out (kept as spaces, so
/// that line numbers stay right); what is left is code.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let blank = |b: u8| if b == b'\n' { b'\n' } else { b' ' };
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(bytes[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            // r"…", r#"…"#, br#"…"#: up to the closing quote and as many hashes.
            let open = rest.iter().position(|&b| b == b'"').unwrap() + 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let end = rest[open..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(rest.len(), |p| open + p + close.len());
            out.extend(rest[..end].iter().map(|&b| blank(b)));
            i += end;
        } else if bytes[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                let step = if bytes[i] == b'\\' { 2 } else { 1 };
                for _ in 0..step.min(bytes.len() - i) {
                    out.push(blank(bytes[i]));
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if bytes[i] == b'\'' && char_literal_len(rest).is_some() {
            let len = char_literal_len(rest).unwrap();
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `r"`, `r#"`, `br##"`…: the number of hashes, when a raw string starts here (and is not the
/// tail of an identifier such as `for"`, which Rust does not allow anyway).
fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let after_b = rest.strip_prefix(b"b").unwrap_or(rest);
    let after_r = after_b.strip_prefix(b"r")?;
    let hashes = after_r.iter().take_while(|&&b| b == b'#').count();
    (after_r.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a char literal starting here (`'a'`, `'\n'`, `'\''`, `'\u{1F600}'`), or `None`
/// for a lifetime such as `'a`.
fn char_literal_len(rest: &[u8]) -> Option<usize> {
    if rest.get(1) == Some(&b'\\') {
        let close = rest[2..].iter().position(|&b| b == b'\'')?;
        return (close <= 10).then_some(close + 3);
    }
    let text = std::str::from_utf8(&rest[1..rest.len().min(6)])
        .ok()
        .or_else(|| {
            (1..rest.len().min(6))
                .rev()
                .find_map(|end| std::str::from_utf8(&rest[1..end]).ok())
        })?;
    let c = text.chars().next()?;
    let after = 1 + c.len_utf8();
    (rest.get(after) == Some(&b'\'')).then_some(after + 1)
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `needle` occurs in `code` as a whole word (or path).
fn mentions(code: &str, needle: &str) -> Vec<usize> {
    let bytes = code.as_bytes();
    code.match_indices(needle)
        .filter(|(at, _)| {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            let after = bytes.get(at + needle.len()).copied();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        })
        .map(|(at, _)| code[..at].matches('\n').count() + 1)
        .collect()
}

/// Every `crate::NAME` in code: the top-level modules a file uses, with the line of each use.
/// Grouped imports (`use crate::{a, b::c}`) count each member.
fn crate_uses(code: &str) -> Vec<(String, usize)> {
    let mut uses = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for member in inner.split(',') {
                let name: String = member
                    .trim()
                    .chars()
                    .take_while(|&c| is_ident(c as u8))
                    .collect();
                if !name.is_empty() {
                    uses.push((name, line));
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c as u8)).collect();
            uses.push((name, line));
        }
    }
    uses
}

/// Problems found in one tree of sources: `files` maps a top-level module to (file name, source).
fn problems(files: &[(String, String, String)]) -> Vec<String> {
    let floor_of: BTreeMap<&str, usize> = FLOORS
        .iter()
        .enumerate()
        .flat_map(|(level, (_, modules))| modules.iter().map(move |m| (*m, level)))
        .collect();
    let mut found = Vec::new();
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for (module, name, source) in files {
        let Some(&level) = floor_of.get(module.as_str()) else {
            found.push(format!(
                "{name}: the top-level module `{module}` is on no floor (add it to FLOORS in tests/floors.rs and to DESIGN.md's architecture)"
            ));
            continue;
        };
        let code = code_only(source);
        for (used, line) in crate_uses(&code) {
            if used == *module {
                continue;
            }
            match floor_of.get(used.as_str()) {
                Some(&target) if target < level => found.push(format!(
                    "{name}:{line}: `{module}` ({}) uses `{used}` ({}), a floor above it",
                    FLOORS[level].0, FLOORS[target].0
                )),
                Some(_) => {
                    edges.insert((module.clone(), used.clone()));
                }
                None => {}
            }
        }
        if module != "election" {
            for store in STORE_NAMES {
                for line in mentions(&code, store) {
                    found.push(format!(
                        "{name}:{line}: `{store}` is named outside src/election/ (the store door)"
                    ));
                }
            }
        }
    }
    // A circle: an edge a → b where b already reaches a (circles can only lie on one floor,
    // since every edge that leaves a floor points down).
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut next = vec![from.to_owned()];
        while let Some(module) = next.pop() {
            if module == to {
                return true;
            }
            if seen.insert(module.clone()) {
                next.extend(
                    edges
                        .iter()
                        .filter(|(a, _)| *a == module)
                        .map(|(_, b)| b.clone()),
                );
            }
        }
        false
    };
    let mut circles = BTreeSet::new();
    for (from, to) in &edges {
        if reaches(to, from) {
            let mut pair = [from.clone(), to.clone()];
            pair.sort();
            circles.insert(pair);
        }
    }
    for [a, b] in circles {
        found.push(format!(
            "`{a}` and `{b}` are on an import circle (each reaches the other)"
        ));
    }
    found
}

/// Problems with the store contract in one tree of sources: a contract item declared anywhere
/// under src/election/ but in [`CONTRACT`] (or not there, or twice), and a store named in the
/// contract's code.
fn contract_problems(files: &[(String, String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    let mut declared: BTreeMap<&str, usize> = BTreeMap::new();
    for (module, name, source) in files {
        if module != "election" {
            continue;
        }
        let code = code_only(source);
        for item in CONTRACT_ITEMS {
            for line in mentions(&code, item) {
                if name == CONTRACT {
                    *declared.entry(item).or_default() += 1;
                } else {
                    found.push(format!(
                        "{name}:{line}: `{item}` is declared outside the store contract ({CONTRACT})"
                    ));
                }
            }
        }
        if name == CONTRACT {
            for store in STORE_NAMES.iter().chain(STORE_FOLDERS) {
                for line in mentions(&code, store) {
                    found.push(format!("{name}:{line}: the store contract names `{store}`"));
                }
            }
        }
    }
    for item in CONTRACT_ITEMS {
        match declared.get(item).copied().unwrap_or(0) {
            1 => {}
            0 => found.push(format!("`{item}` is not declared in {CONTRACT}")),
            n => found.push(format!("`{item}` is declared {n} times in {CONTRACT}")),
        }
    }
    found
}

fn sources() -> Vec<(String, String, String)> {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let module = top_module(&src, path);
            let name = path.strip_prefix(root()).unwrap().display().to_string();
            (module, name, fs::read_to_string(path).unwrap())
        })
        .collect()
}

#[test]
fn imports_point_down_the_floors_and_only_election_names_a_store() {
    let found = problems(&sources());
    assert!(
        found.is_empty(),
        "the source tree leaves DESIGN.md's architecture:\n{}",
        found.join("\n")
    );
}

/// The store contract is one file: only it declares the traits a store implements (and
/// `Open`), and its code names no store, so what it asks is the same of every store.
#[test]
fn the_store_contract_is_one_file_that_names_no_store() {
    let found = contract_problems(&sources());
    assert_eq!(found, Vec::<String>::new(), "the store contract leaks");
}

#[test]
fn no_source_file_is_too_long_to_read() {
    let mut long = Vec::new();
    for dir in ["src", "bench", "tests"] {
        let mut paths = Vec::new();
        collect(&root().join(dir), &mut paths);
        for path in paths {
            let lines = fs::read_to_string(&path).unwrap().lines().count();
            if lines > MAX_LINES {
                long.push(format!("{}: {lines} lines", path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these (at most {MAX_LINES} lines a file):\n{}",
        long.join("\n")
    );

    fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                collect(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "rs" || e == "py" || e == "sh")
            {
                out.push(path);
            }
        }
    }
}

/// docs/development.md's layout table is the floors as they are: one row per floor, in order,
/// naming every module on it (`src/NAME/` or `NAME.rs`), and no row for a floor that is gone.
#[test]
fn the_documented_layout_is_the_floors() {
    let doc = fs::read_to_string(root().join("docs/development.md")).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .skip_while(|line| !line.starts_with("| floor | where | what |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let cell = |row: &str, n: usize| row.split('|').nth(n).unwrap_or("").trim().to_owned();
    let documented: Vec<String> = rows.iter().map(|row| cell(row, 1)).collect();
    let floors: Vec<String> = FLOORS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(
        documented, floors,
        "docs/development.md's layout table lists other floors than tests/floors.rs"
    );
    let mut missing = Vec::new();
    for (row, (floor, modules)) in rows.iter().zip(FLOORS) {
        let place = cell(row, 2);
        for module in *modules {
            if !place.contains(&format!("{module}.rs`")) && !place.contains(&format!("{module}/`"))
            {
                missing.push(format!("the `{floor}` row does not name `{module}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/development.md's layout table:\n{}",
        missing.join("\n")
    );
}

/// The checks can fail: an upward import, a circle, a store named above the door, an unknown
/// module — each in a made-up tree — are all reported, and prose naming a store is not.
#[test]
fn the_floor_checks_catch_what_they_guard() {
    let file = |module: &str, source: &str| {
        (
            module.to_owned(),
            format!("src/{module}.rs"),
            source.to_owned(),
        )
    };
    let found = problems(&[
        file("clock", "use crate::run::Runner;\n"),
        file("telemetry", "use crate::{exit::Failure, app};\n"),
        file("commands", "fn f() { crate::lease::x(); }\n"),
        file("lease", "fn g() { let _ = crate::commands::y; }\n"),
        file("run", "use crate::lease::z;\nfn h() -> Etcd { todo!() }\n"),
        file("app", "use crate::election::postgres::Target;\n"),
        file("stray", "\n"),
        file(
            "cli",
            "/// Elected through etcd, PostgreSQL or ZooKeeper (`Etcd`).\nconst A: &str = \"ZooKeeper Postgres\";\nconst B: char = '\"'; // Etcd\n",
        ),
        file("election", "use etcd_client::Client;\nstruct Etcd;\n"),
    ]);
    let has = |text: &str| found.iter().any(|p| p.contains(text));
    assert!(
        has("src/clock.rs:1: `clock` (floor) uses `run` (run)"),
        "{found:#?}"
    );
    assert!(
        has("src/telemetry.rs:1: `telemetry` (telemetry) uses `app` (top)"),
        "{found:#?}"
    );
    assert!(
        has("src/lease.rs:1: `lease` (leader) uses `commands` (commands)"),
        "{found:#?}"
    );
    assert!(has("src/run.rs:2: `Etcd` is named outside"), "{found:#?}");
    assert!(
        has("src/app.rs:1: `election::postgres` is named outside"),
        "{found:#?}"
    );
    assert!(has("`stray` is on no floor"), "{found:#?}");
    assert!(
        !found.iter().any(|p| p.starts_with("src/cli.rs")),
        "{found:#?}"
    );
    assert!(
        !found.iter().any(|p| p.starts_with("src/election.rs")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 6, "{found:#?}");
    let contract =
        |name: &str, source: &str| ("election".to_owned(), name.to_owned(), source.to_owned());
    let whole = CONTRACT_ITEMS
        .iter()
        .map(|item| format!("pub {item} {{}}\n"))
        .collect::<String>();
    assert_eq!(
        contract_problems(&[contract(CONTRACT, &whole)]),
        Vec::<String>::new()
    );
    let strayed = contract_problems(&[
        contract(
            CONTRACT,
            &format!("{whole}/// Like etcd's.\nfn probe() {{ crate::election::etcd::probe(); }}\n"),
        ),
        contract(
            "src/election/mod.rs",
            "pub trait Read {}\npub trait Reader {}\n",
        ),
        contract("src/election/any.rs", "// pub trait Door\n"),
        (
            "telemetry".into(),
            "src/telemetry/http.rs".into(),
            "struct Open;\n".into(),
        ),
    ]);
    assert_eq!(
        strayed,
        [
            "src/election/contract.rs:12: the store contract names `election::etcd`",
            "src/election/contract.rs:12: the store contract names `etcd`",
            "src/election/mod.rs:1: `trait Read` is declared outside the store contract (src/election/contract.rs)",
        ],
        "{strayed:#?}"
    );
    let missing = contract_problems(&[contract(CONTRACT, "pub trait Keeper {}\n")]);
    assert!(
        missing.contains(&"`trait Door` is not declared in src/election/contract.rs".to_owned()),
        "{missing:#?}"
    );
    let circle = problems(&[
        file("lease", "use crate::lease::a;\n"),
        file("telemetry", "use crate::ended::A;\n"),
        file("ended", "use crate::escape::b;\n"),
        file("escape", "use crate::ended::c;\n"),
    ]);
    let three = problems(&[
        file("clock", "use crate::exit::a;\n"),
        file("exit", "use crate::notify::b;\n"),
        file("notify", "use crate::clock::c;\n"),
    ]);
    assert_eq!(three.len(), 3, "{three:#?}");
    assert_eq!(
        circle,
        ["`ended` and `escape` are on an import circle (each reaches the other)"],
        "{circle:#?}"
    );
}

/// SIGKILL reaches the command's group from one place: the run floor's stop path
/// (`run/stop.rs`, `Stop::kill`, through the supervisor handle). The supervisor's two ends
/// (`process/supervisor.rs`, `process/handle.rs`) keep their own last resorts — the group killed
/// when leader-exec or the supervisor dies, or leader-exec shuts down — and test doubles are not
/// counted. `run/health.rs` kills the process group of
/// a `--health-cmd` check at its timeout: the check's own group, never the command's.
#[test]
fn sigkill_is_sent_from_one_place() {
    let mut senders = Vec::new();
    for (_, name, source) in sources() {
        if name.ends_with("src/process/supervisor.rs")
            || name.ends_with("src/process/handle.rs")
            || name.ends_with("tests.rs")
        {
            continue;
        }
        let code = code_only(&source);
        let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
        // A call to `.signal(…)`, `killpg(…)` or `kill(…)` whose arguments name SIGKILL.
        let sends = [".signal(", "killpg(", "kill("]
            .iter()
            .flat_map(|call| {
                compact
                    .match_indices(call)
                    .map(move |(at, _)| at + call.len())
            })
            .filter(|&start| {
                let mut depth = 1;
                let arguments: String = compact[start..]
                    .chars()
                    .take_while(|&c| {
                        depth += match c {
                            '(' => 1,
                            ')' => -1,
                            _ => 0,
                        };
                        depth > 0
                    })
                    .collect();
                arguments.contains("SIGKILL")
            })
            .count();
        if sends > 0 {
            senders.push(format!("{name}: {sends}"));
        }
    }
    assert_eq!(
        senders,
        ["src/run/health.rs: 1", "src/run/stop.rs: 1"],
        "SIGKILL sent from more than one place"
    );
}
