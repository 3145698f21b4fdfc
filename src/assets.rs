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
        (Shell::Bash, "leader-exec.bash"),
        (Shell::Zsh, "_leader-exec"),
        (Shell::Fish, "leader-exec.fish"),
    ] {
        let mut buffer = Vec::new();
        clap_complete::generate(shell, &mut cli::command(), "leader-exec", &mut buffer);
        files.push((format!("completions/{name}"), buffer));
    }
    Ok(files)
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

/// One line per variable: those clap knows from `env = ...`, then the fallbacks `settings.rs`
/// reads itself.
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
