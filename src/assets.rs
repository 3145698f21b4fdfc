//! The man page and shell completions, generated from the clap definitions in `cli.rs`.
//!
//! They are committed under `man/` and `completions/` so packages and `install.sh` need no build
//! step; a test fails when they drift from the code. Regenerate with:
//!
//!     cargo run -- generate-assets .

use std::io;
use std::path::Path;

use clap_complete::Shell;
use roff::{Roff, roman};

use crate::cli;

/// Every generated file: (path relative to the repository root, contents).
pub fn all() -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut files = vec![("man/leader-exec.1".to_owned(), man_page()?)];
    let mut command = cli::command();
    command.build();
    for (name, page_name) in [
        ("status", "leader-exec-status"),
        ("watch", "leader-exec-watch"),
        ("check", "leader-exec-check"),
        ("resign", "leader-exec-resign"),
        ("hold", "leader-exec-hold"),
        ("release", "leader-exec-release"),
    ] {
        let subcommand = command
            .find_subcommand(name)
            .expect("defined in cli.rs")
            .clone()
            .name(page_name);
        let mut page = Vec::new();
        clap_mangen::Man::new(subcommand)
            .date("")
            .source(concat!("leader-exec ", env!("CARGO_PKG_VERSION")))
            .render(&mut page)?;
        files.push((format!("man/{page_name}.1"), page));
    }
    for (shell, name) in [
        (cli::CompletionShell::Bash, "leader-exec.bash"),
        (cli::CompletionShell::Zsh, "_leader-exec"),
        (cli::CompletionShell::Fish, "leader-exec.fish"),
    ] {
        files.push((format!("completions/{name}"), completion(shell)));
    }
    Ok(files)
}

/// The completion script for `shell`: the file under `completions/`, and what `leader-exec
/// completion SHELL` prints.
pub fn completion(shell: cli::CompletionShell) -> Vec<u8> {
    let shell = match shell {
        cli::CompletionShell::Bash => Shell::Bash,
        cli::CompletionShell::Zsh => Shell::Zsh,
        cli::CompletionShell::Fish => Shell::Fish,
    };
    let mut buffer = Vec::new();
    clap_complete::generate(shell, &mut cli::completion_command(), BIN_NAME, &mut buffer);
    match shell {
        Shell::Bash => fix_bash_subcommand_names(&buffer),
        Shell::Fish => fix_fish_option_values(&buffer),
        _ => buffer,
    }
}

const BIN_NAME: &str = "leader-exec";

/// Works around clap-rs/clap#6421: for a hyphenated program name, clap_complete's bash script
/// sets `cmd="leader__exec__subcmd__status"` while the branch that completes it is named
/// `leader__subcmd__exec__subcmd__status)`, so nothing completes after a subcommand. Renames the
/// branches to the names `cmd` is set to. Once upstream is fixed this finds nothing to rename;
/// the completion test (tests/completion.rs) checks the result either way.
fn fix_bash_subcommand_names(script: &[u8]) -> Vec<u8> {
    let script = String::from_utf8_lossy(script);
    let wrong = format!("{}__subcmd__", BIN_NAME.replace('-', "__subcmd__"));
    let right = format!("{}__subcmd__", BIN_NAME.replace('-', "__"));
    script
        .lines()
        .map(|line| {
            let branch = line.trim_start();
            if branch.starts_with(&wrong) && branch.ends_with(')') {
                line.replacen(&wrong, &right, 1)
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
        .into_iter()
        .chain(script.ends_with('\n').then_some(b'\n'))
        .collect()
}

/// Works around clap_complete's fish script offering nothing for the value of a top-level
/// option (`leader-exec --kill-signal <TAB>`): its `needs_command` guard parses the words before
/// the cursor with `argparse`, which fails while an option still waits for its value, and then
/// reports "a subcommand was given", hiding every top-level candidate. A line `argparse` cannot
/// parse has no subcommand yet (`-s` stops at the first one), so the guard says so instead.
fn fix_fish_option_values(script: &[u8]) -> Vec<u8> {
    let script = String::from_utf8_lossy(script);
    let function = format!(
        "function __fish_{}_needs_command\n",
        BIN_NAME.replace('-', "_")
    );
    let Some(start) = script.find(&function) else {
        return script.into_owned().into_bytes();
    };
    let guard = "2>/dev/null\n    or return\n";
    match script[start..].find(guard) {
        Some(at) => {
            let at = start + at + guard.len() - 1;
            format!("{} 0{}", &script[..at], &script[at..]).into_bytes()
        }
        None => script.into_owned().into_bytes(),
    }
}

/// Writes every generated file under `dir`.
pub fn write_all(dir: &Path) -> io::Result<()> {
    for (path, contents) in all()? {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// leader-exec(1): clap's sections, then the ones a man page reader looks for.
fn man_page() -> io::Result<Vec<u8>> {
    let command = cli::command();
    let environment = format!("{ENVIRONMENT_INTRO}\n{}", environment_table(&command));
    let man = clap_mangen::Man::new(command)
        .date("")
        .source(concat!("leader-exec ", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    for (title, text) in [
        ("ENVIRONMENT", environment.as_str()),
        ("", "The command inherits the environment, plus:"),
        ("", cli::CHILD_ENVIRONMENT),
        ("EXIT STATUS", cli::EXIT_STATUS),
        ("SIGNALS", cli::SIGNALS),
        ("SAFETY", cli::SAFETY),
        ("METRICS", crate::telemetry::metrics::MAN_SECTION),
        ("EXAMPLES", cli::EXAMPLES),
        (
            "SEE ALSO",
            "etcd(1), etcdctl(1), flock(1), timeout(1), systemd.service(5)",
        ),
    ] {
        let mut section = Roff::new();
        if !title.is_empty() {
            section.control("SH", [title]);
        }
        section
            .control("nf", [])
            .text([roman(text)])
            .control("fi", []);
        section.to_writer(&mut out)?;
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

const ENVIRONMENT_INTRO: &str = "\
Options can be set through these variables; a flag given on the command line wins.";

/// One line per variable: those clap knows from `env = ...`, then the fallbacks the stores read
/// themselves.
fn environment_table(command: &clap::Command) -> String {
    let mut lines: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_string_lossy().into_owned();
            Some(format!("{env:<28} --{}", arg.get_long()?))
        })
        .collect();
    lines.extend(cli::OTHER_ENVIRONMENT.lines().map(str::to_owned));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed man page and completions must match what the code generates.
    #[test]
    fn committed_assets_match_the_cli() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (path, generated) in all().unwrap() {
            let committed = std::fs::read(root.join(&path)).unwrap_or_default();
            assert!(
                committed == generated,
                "{path} is out of date with src/cli.rs: run `cargo run -- generate-assets .` and commit the result"
            );
        }
    }

    /// clap-rs/clap#6421: every subcommand branch of the bash script is named as `cmd` is set.
    #[test]
    fn bash_branches_match_the_names_cmd_is_set_to() {
        let files = all().unwrap();
        let bash = files
            .iter()
            .find(|(path, _)| path == "completions/leader-exec.bash")
            .map(|(_, contents)| String::from_utf8_lossy(contents).into_owned())
            .unwrap();
        let set: Vec<&str> = bash
            .lines()
            .filter_map(|l| l.trim().strip_prefix("cmd=\"")?.strip_suffix('"'))
            .filter(|name| !name.is_empty())
            .collect();
        let branches: Vec<&str> = bash
            .lines()
            .filter(|l| l.starts_with("        ") && !l.starts_with("         "))
            .filter_map(|l| l.trim().strip_suffix(')'))
            .filter(|name| name.starts_with("leader__"))
            .collect();
        assert_eq!(
            set.len(),
            8,
            "root + status, watch, check, resign, hold, release, completion: {set:?}"
        );
        for name in &set {
            assert!(branches.contains(name), "no branch {name}) in {branches:?}");
        }
    }

    /// The hidden packaging subcommand is not offered by any shell.
    #[test]
    fn completions_do_not_offer_hidden_subcommands() {
        for (path, contents) in all().unwrap() {
            if path.starts_with("completions/") {
                let text = String::from_utf8_lossy(&contents);
                assert!(!text.contains("generate-assets"), "{path} offers it");
                assert!(text.contains("status"), "{path} lacks status");
            }
        }
    }

    /// A crontab line needs `\%`: the man page's crontab example must show it (`\\` is roff
    /// for one backslash; the packaging test renders the page with groff).
    #[test]
    fn the_crontab_example_escapes_percent() {
        let page = String::from_utf8(man_page().unwrap()).unwrap();
        let line = page
            .lines()
            .skip_while(|l| !l.contains("0 2 * * *"))
            .find(|l| l.contains("statements:$(date"))
            .expect("crontab example in the man page");
        assert!(line.contains("+\\\\%F"), "not escaped for cron: {line}");
        let help = cli::command().render_long_help().to_string();
        assert!(help.contains("+\\%F"), "--help lacks \\%F");
    }

    #[test]
    fn the_completion_command_is_valid() {
        cli::completion_command().debug_assert();
    }

    #[test]
    fn the_man_page_documents_everything() {
        let page = String::from_utf8(man_page().unwrap()).unwrap();
        for needle in [
            "lease",
            "renew\\-deadline",
            "kill\\-after",
            "LEADER_TOKEN",
            "LEADER_LEASE_ID",
            "EXIT STATUS",
            "124",
            "125",
            "SAFETY",
            "CLOCK_BOOTTIME",
            "status",
            "check",
            "watch",
            "LEADER_EXEC_TTL",
            "ETCDCTL_ENDPOINTS",
        ] {
            assert!(page.contains(needle), "man page lacks {needle}");
        }
    }
}
