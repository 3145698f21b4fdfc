//! The committed shell completions, run in real shells: bash completes what each position offers
//! (the run form and every subcommand), fish too, and zsh parses its script.
//!
//! Needs `bash`, `zsh` and `fish` (`.ci/run` installs them). No etcd.

use std::path::{Path, PathBuf};
use std::process::Command;

fn completions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("completions")
}

fn shell(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .expect("sh runs");
    assert!(
        found.status.success(),
        "{name} is not installed; the completion tests need it (apt-get install {name})"
    );
    Command::new(name)
}

/// What bash offers for the last word of `line` (a trailing space starts a new, empty word),
/// with the completion script loaded as bash-completion would load it, in a directory that holds
/// one file, `a-file`, so that file-name completion is visible.
fn bash_complete(line: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let mut words: Vec<&str> = line.split_whitespace().collect();
    if line.ends_with(' ') {
        words.push("");
    }
    // The function `complete -p` names, called as bash calls it: $1 the command, $2 the word
    // being completed, $3 the word before it, with COMP_WORDS/COMP_CWORD/COMP_LINE/COMP_POINT.
    let script = r#"
        source "$1" || exit 90
        shift
        spec=$(complete -p leader-exec) || exit 91
        function=${spec#*-F }
        function=${function%% *}
        COMP_WORDS=("$@")
        COMP_CWORD=$(($# - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        prev=""
        [ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD - 1]}
        "$function" leader-exec "${COMP_WORDS[COMP_CWORD]}" "$prev"
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let output = shell("bash")
        .args(["--norc", "--noprofile", "-c", script, "bash"])
        .arg(completions_dir().join("leader-exec.bash"))
        .args(&words)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "bash failed for {line:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn sorted(mut words: Vec<String>) -> Vec<String> {
    words.sort();
    words
}

#[test]
fn bash_completes_the_run_form() {
    assert_eq!(
        sorted(bash_complete("leader-exec --kill-")),
        ["--kill-after", "--kill-signal"]
    );
    let first = bash_complete("leader-exec ");
    for expected in ["status", "watch", "check", "--lease", "--endpoints"] {
        assert!(
            first.contains(&expected.to_owned()),
            "{expected}: {first:?}"
        );
    }
    assert_eq!(bash_complete("leader-exec st"), ["status"]);
    assert_eq!(
        sorted(bash_complete("leader-exec --lease x --log-format ")),
        ["json", "text"]
    );
    assert_eq!(
        sorted(bash_complete("leader-exec --lease x --if-unfinished ")),
        ["fail", "rerun", "skip"]
    );
}

#[test]
fn bash_completes_every_subcommand() {
    assert_eq!(bash_complete("leader-exec status --js"), ["--json"]);
    assert_eq!(bash_complete("leader-exec watch --js"), ["--json"]);
    assert_eq!(bash_complete("leader-exec check --tok"), ["--token"]);
    // Options of the subcommand's own, after global ones.
    assert_eq!(
        bash_complete("leader-exec status --lease x --js"),
        ["--json"]
    );
    assert_eq!(
        sorted(bash_complete("leader-exec watch --log-format ")),
        ["json", "text"]
    );
    // The run form's flags are not offered to a subcommand.
    assert_eq!(
        bash_complete("leader-exec status --kill-"),
        Vec::<String>::new()
    );
}

/// `leader-exec completion SHELL` prints the committed script for that shell, byte for byte,
/// and bash completes the subcommand and its shells.
#[test]
fn the_completion_subcommand_prints_the_committed_script() {
    for (shell, file) in [
        ("bash", "leader-exec.bash"),
        ("zsh", "_leader-exec"),
        ("fish", "leader-exec.fish"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leader-exec"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty(), "{shell}");
        let committed = std::fs::read(completions_dir().join(file)).unwrap();
        assert!(
            out.stdout == committed,
            "{shell}: differs from completions/{file}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_leader-exec"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(bash_complete("leader-exec compl"), ["completion"]);
    let offered = bash_complete("leader-exec completion ");
    for shell in ["bash", "fish", "zsh"] {
        assert!(offered.iter().any(|o| o == shell), "{offered:?}");
    }
}

#[test]
fn bash_offers_signal_names_for_kill_signal() {
    let all = ["HUP", "INT", "KILL", "QUIT", "TERM", "USR1", "USR2"];
    assert_eq!(sorted(bash_complete("leader-exec --kill-signal ")), all);
    assert_eq!(sorted(bash_complete("leader-exec -s ")), all);
    assert_eq!(
        sorted(bash_complete("leader-exec --lease x -s US")),
        ["USR1", "USR2"]
    );
}

#[test]
fn bash_offers_files_only_for_file_arguments() {
    assert_eq!(bash_complete("leader-exec --cacert "), ["a-file"]);
    assert_eq!(
        bash_complete("leader-exec status --password-file a"),
        ["a-file"]
    );
    for line in [
        "leader-exec --lease ",
        "leader-exec --ttl ",
        "leader-exec --occurrence ",
        "leader-exec check --token ",
    ] {
        let offered = bash_complete(line);
        assert!(
            !offered.contains(&"a-file".to_owned()),
            "{line:?}: {offered:?}"
        );
    }
}

#[test]
fn no_shell_offers_the_hidden_subcommand() {
    assert_eq!(bash_complete("leader-exec gen"), Vec::<String>::new());
    let offered = fish_complete("leader-exec ");
    assert!(offered.iter().any(|w| w == "status"), "{offered:?}");
    assert!(
        !offered.iter().any(|w| w.starts_with("generate")),
        "{offered:?}"
    );
}

/// What fish offers for `line` (candidates only, descriptions dropped).
fn fish_complete(line: &str) -> Vec<String> {
    let output = shell("fish")
        .args(["--no-config", "-c", "source $argv[1]; complete -C $argv[2]"])
        .arg(completions_dir().join("leader-exec.fish"))
        .arg(line)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "fish failed for {line:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').next().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn fish_completes_subcommands_and_signals() {
    assert_eq!(fish_complete("leader-exec status --js"), ["--json"]);
    assert_eq!(fish_complete("leader-exec check --tok"), ["--token"]);
    let all = ["HUP", "INT", "KILL", "QUIT", "TERM", "USR1", "USR2"];
    assert_eq!(sorted(fish_complete("leader-exec --kill-signal ")), all);
    assert_eq!(sorted(fish_complete("leader-exec --lease x -s ")), all);
    assert_eq!(
        sorted(fish_complete("leader-exec --log-format ")),
        ["json", "text"]
    );
    assert_eq!(fish_complete("leader-exec --lease x st"), ["status"]);
}

#[test]
fn zsh_parses_its_script() {
    let output = shell("zsh")
        .arg("-n")
        .arg(completions_dir().join("_leader-exec"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "zsh -n: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let script = std::fs::read_to_string(completions_dir().join("_leader-exec")).unwrap();
    assert!(
        script.starts_with("#compdef leader-exec"),
        "no #compdef line"
    );
    assert!(script.contains("TERM"), "no signal names for --kill-signal");
}
