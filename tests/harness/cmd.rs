//! [`Cmd`]: the one way the tests run leader-exec, to its end ([`Cmd::run`], [`Cmd::output`],
//! [`Cmd::code`]) or in the background ([`Cmd::start`], an [`Instance`]).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use super::{Instance, Store, leader_exec};

/// leader-exec with its arguments, its environment and, unless made [`Cmd::bare`], the store it
/// talks to:
///
/// ```text
/// Cmd::new(&store).args(["status", "--lease", "x"]).run()   // (exit code, stdout, stderr)
/// ```
///
/// The endpoint goes last among leader-exec's own arguments: before `--` where the arguments have
/// one (a run, whose command follows), at the end otherwise (a subcommand), where both take it.
/// The environment is [`leader_exec`]'s: none of the caller's `LEADER_EXEC_*`, `LEADER_*` or
/// `ETCDCTL_*` reaches it unless set here.
#[must_use]
pub struct Cmd {
    args: Vec<OsString>,
    endpoint: Option<String>,
    env: Vec<(OsString, Option<OsString>)>,
    job: bool,
}

impl Cmd {
    /// leader-exec against `store`.
    pub fn new(store: &impl Store) -> Cmd {
        Cmd::at(&store.endpoint())
    }

    /// leader-exec against `endpoint` (a proxy's, another store's, a URL with options).
    pub fn at(endpoint: &str) -> Cmd {
        Cmd {
            endpoint: Some(endpoint.to_owned()),
            ..Cmd::bare()
        }
    }

    /// leader-exec with no endpoint added: bad input refused before any store is needed, or
    /// arguments that name their own.
    pub fn bare() -> Cmd {
        Cmd {
            args: Vec::new(),
            endpoint: None,
            env: Vec::new(),
            job: false,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Cmd {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Cmd {
        self.args
            .extend(args.into_iter().map(|arg| arg.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Cmd {
        let value = Some(value.as_ref().to_owned());
        self.env.push((name.as_ref().to_owned(), value));
        self
    }

    pub fn env_remove(mut self, name: impl AsRef<OsStr>) -> Cmd {
        self.env.push((name.as_ref().to_owned(), None));
        self
    }

    /// Started the way a shell starts a job: in a process group of its own, with its parent
    /// (this test) alive in another group of the same session. The kernel discards a stop signal
    /// sent to an orphaned process group, so a stop-signal test must not use `setsid`.
    pub fn in_own_group(mut self) -> Cmd {
        self.job = true;
        self
    }

    /// The command line and environment, not started.
    pub fn command(&self) -> Command {
        let mut command = leader_exec();
        let end = self
            .args
            .iter()
            .position(|arg| arg == "--")
            .unwrap_or(self.args.len());
        command.args(&self.args[..end]);
        if let Some(endpoint) = &self.endpoint {
            command.args(["--endpoints", endpoint]);
        }
        command.args(&self.args[end..]);
        for (name, value) in &self.env {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        if self.job {
            command.process_group(0);
        }
        command
    }

    /// Runs it to its end with stdin empty.
    pub fn output(&self) -> Output {
        self.command().stdin(Stdio::null()).output().unwrap()
    }

    /// Runs it to its end: (exit code, -1 for a signal; stdout; stderr).
    pub fn run(&self) -> (i32, String, String) {
        let out = self.output();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs it to its end for its exit code alone (-1 for a signal).
    pub fn code(&self) -> i32 {
        self.run().0
    }

    /// Starts it in the background: stdout to null, stderr kept for the test to read.
    pub fn start(&self) -> Instance {
        Instance::start_command(&mut self.command())
    }
}

/// `leader-exec status --json` for `lease` (exit 0 with a leader, 3 without; the JSON either way).
pub fn status_json(endpoint: &str, lease: &str) -> serde_json::Value {
    let out = Cmd::at(endpoint)
        .args(["status", "--json", "--lease", lease])
        .output();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The tokens of the holders in a `status --json` or `watch --json` answer, in its order.
pub fn json_holder_tokens(json: &serde_json::Value) -> Vec<i64> {
    json["holders"]
        .as_array()
        .unwrap_or_else(|| panic!("no holders: {json}"))
        .iter()
        .map(|h| h["token"].as_i64().unwrap())
        .collect()
}

/// The facts every refusal of bad input must show: exit 125, one line on stderr, starting
/// `leader-exec: ` and naming `needle`.
pub fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "expected one line, got: {stderr}"
    );
    assert!(stderr.starts_with("leader-exec: "), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

/// `leader-exec check` of `token` for `lease`: its exit code (0 current, 1 stale; -1 for a
/// signal).
pub fn check_token(endpoint: &str, lease: &str, token: i64) -> i32 {
    Cmd::at(endpoint)
        .args(["check", "--lease", lease, "--token", &token.to_string()])
        .code()
}
