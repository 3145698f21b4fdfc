//! The command line: these clap definitions are the `--help` text and the man page source.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser};

use crate::durations::parse_duration;
use crate::telemetry::logging::LogFormat;

const ABOUT: &str = "Run a command on exactly one host at a time, elected through etcd, PostgreSQL, ZooKeeper or MySQL/MariaDB";

const LONG_ABOUT: &str = "\
Run a command on exactly one host at a time, elected through etcd, PostgreSQL, ZooKeeper or \
MySQL/MariaDB.

Every host runs the same line. Each instance campaigns for the named lease in the store (etcd, \
PostgreSQL, ZooKeeper or MySQL/MariaDB, chosen by the scheme of --endpoints); exactly one \
wins and runs COMMAND with a fencing token in $LEADER_TOKEN, the others wait their turn (or exit \
at once with --no-wait). The leader renews its lease every --retry-period. The moment it can no \
longer prove that it still leads (no renewal succeeded for --renew-deadline, the lease expired, \
or its key was deleted), it stops the command: --kill-signal to the command's whole process \
group, then SIGKILL after --kill-after. Both happen before the lease can expire on the store's \
server, so no other host starts its copy while the old one still runs. When the command exits, \
the lease is revoked at once and the next instance in line takes over.";

/// Shown after `--help`; also the source of the man page's extra sections.
pub const EXAMPLES: &str = "\
Run a nightly job from the same crontab line on every host; only one host runs it (cron's PATH is
/usr/bin:/bin: name a binary in /usr/local/bin by its full path):
  0 2 * * *  /usr/local/bin/leader-exec --lease statements --no-wait -- /srv/bin/statements

Keep one copy of a poller running across three hosts (systemd unit with Restart=always):
  leader-exec --lease outbox-relay --recampaign -- /usr/local/bin/outbox-relay

Check the fencing token before each unit of work in a shell child:
  leader-exec --lease x -- sh -c 'for f in *.csv; do
      leader-exec check --lease x --token \"$LEADER_TOKEN\" || exit 75
      load \"$f\"
  done'

Exactly once per night from every host's crontab, even with skewed clocks (cron turns a bare %
into a newline, so a crontab line writes it as \\%):
  0 2 * * *  /usr/local/bin/leader-exec --lease statements --no-wait --hold-at-least 10m \\
      --occurrence \"statements:$(date +\\%F)\" -- /srv/bin/send-statements

Who leads, since which token, and the recent occurrences:
  leader-exec status --lease statements

Move leadership to the next host in line, from anywhere (the leader stops its command as on TERM,
releases, and exits 75):
  leader-exec resign --lease outbox-relay --token 42

Rolling reboots, at most two hosts at a time: hold a slot across the reboot (at most an hour),
give it back after the boot (packaged example units: leader-exec-reboot*.service):
  leader-exec hold --lease reboot --max-holders 2 --for 1h && systemctl reboot
  leader-exec release --lease reboot";

pub const CHILD_ENVIRONMENT: &str = "\
LEADER_TOKEN     fencing token (decimal), strictly greater than every earlier leader's (holder's)
                 token for the same lease: etcd, the create-revision of this leader's election
                 key; PostgreSQL, the lease row's token column; ZooKeeper, the zxid of the
                 write that made it leader (the leader mark PREFIX .tokens/NAME; with
                 --max-holders above 1, the touch of its node)
LEADER_LEASE     the lease name
LEADER_KEY       what this leader holds: etcd, its election key; PostgreSQL, the lease row as
                 TABLE/NAME (e.g. leader_exec_leases/statement-job); ZooKeeper, its node's path
LEADER_IDENTITY  the identity
LEADER_LEASE_ID  the etcd lease id (hex); ZooKeeper, the session id (hex); not set with
                 PostgreSQL, which has no lease ids
LEADER_MAX_HOLDERS     --max-holders (1 unless given)
LEADER_OCCURRENCE      the --occurrence ID, when given
LEADER_PREVIOUS_TOKEN  when re-running an unfinished occurrence: the token of the leader that
                       started it
The rest of the environment passes through, except what leader-exec consumed:
LEADER_EXEC_PASSWORD, LEADER_EXEC_HEALTH_CMD and NOTIFY_SOCKET are removed, ETCDCTL_USER keeps
the user name only, and LEADER_EXEC_ENDPOINTS and ETCDCTL_ENDPOINTS lose any password they hold.
PGPASSWORD, libpq's own variable, passes through (use --password-file to keep it from the
command).";

/// Variables read by `election/` (the stores' `target.rs`) and `logging.rs` rather than through
/// clap's `env`.
pub const OTHER_ENVIRONMENT: &str = "\
LEADER_EXEC_ENDPOINTS        --endpoints (then ETCDCTL_ENDPOINTS)
ETCDCTL_ENDPOINTS            --endpoints, when LEADER_EXEC_ENDPOINTS is not set
LEADER_EXEC_CACERT           --cacert (then ETCDCTL_CACERT)
LEADER_EXEC_CERT             --cert (then ETCDCTL_CERT)
LEADER_EXEC_KEY              --key (then ETCDCTL_KEY)
ETCDCTL_USER                 --user (etcd)
LEADER_EXEC_PASSWORD         the store password, when --user has none and no --password-file
PGUSER                       PostgreSQL: the user, when neither the URL nor --user names one
PGPASSWORD                   PostgreSQL: the password, when no other way gives one
LEADER_EXEC_LOG              log filter, RUST_LOG's target=level,... form; overrides -v and -q
SSL_CERT_FILE, SSL_CERT_DIR  the trust store for https:// endpoints without --cacert
NOTIFY_SOCKET                set by systemd: receives READY=1 and STATUS= lines (Type=notify)";

pub const EXIT_STATUS: &str = "\
N        the command ran and exited with status N
128+N    the command died of signal N (also when leader-exec forwarded it)
75       leadership was lost, or handed over on `resign`, and the command was stopped
         (EX_TEMPFAIL: restart us)
76       --if-unfinished fail refused an occurrence an earlier leader started and never
         finished: a human must decide whether to run it again
79       --max-runtime passed: the command was stopped (as on TERM) and the lease released
124      not acquired: --no-wait found a leader, or --wait-timeout passed
125      leader-exec itself failed: usage or configuration error, the store unreachable at
         start (refused, or no answer within --connect-timeout), TLS or authentication error,
         a --max-holders other than that of the instances already in the lease
126      the command exists but cannot be executed
127      the command was not found
status:  0 there is a leader, 3 there is none, 125 error
check:   0 the token is the current leader's (any current holder's), 1 it is not (stale),
         125 error
resign:  0 the leader handed over (--force: its claim was deleted), 1 --token given and not
         the current leader's (any current holder's; nothing asked or deleted), 3 no leader,
         124 the leader did not hand over within --timeout (frozen host? see --force; a slot
         held by `hold` at once), 125 error
watch:   0 when interrupted (INT/TERM), 125 error
hold:    0 the slot is held (its token on stdout; also when already held under --identity),
         75 lost between taking and holding it (run it again), 124 not acquired, 125 error
release: 0 the slot was given back, 3 none is held under --identity, 125 error";

pub const SIGNALS: &str = "\
TERM, INT, HUP, QUIT, USR1 and USR2 sent to leader-exec while the command runs are forwarded to
the command's process group. TERM and INT then stop it gracefully: up to --kill-after for the
group to exit, then SIGKILL; the lease is released and leader-exec exits with the command's
status. While still campaigning, TERM, INT, HUP and QUIT withdraw the candidacy (its key is
deleted) and leader-exec exits 128+N; USR1 and USR2 are ignored.";

pub const SAFETY: &str = "\
For one lease name, the commands of different instances never run at the same time, and the
tokens of successive leaders strictly increase, on every store. No store can end a lease before
the instant a renewal was sent plus the TTL (etcd and ZooKeeper count it on the server from when
the renewal arrives; on PostgreSQL a row is taken over only after the taker saw it unchanged for
a TTL on its own clock); so leader-exec's deadline is the send time of the last successful
renewal plus --renew-deadline, measured on CLOCK_BOOTTIME (which, like the store's clock, keeps
running while the machine is suspended). At the deadline the command's whole process group gets
--kill-signal, then SIGKILL after --kill-after. leader-exec refuses to start unless
--renew-deadline + --kill-after is at most --ttl minus a margin of 5% of --ttl (at least 250ms),
and --retry-period is at most a third of --renew-deadline. A renewal answered as expired, no
renewal succeeding by the deadline, or the candidate key being deleted all end leadership. The
command runs under a small supervising process that SIGKILLs the whole group if leader-exec dies,
even by SIGKILL; the lease then expires. When the command exits, leader-exec waits until its
process group is empty, then releases the lease. A leader-exec that is itself frozen (SIGSTOP, a
paused VM) cannot stop its command in time: check $LEADER_TOKEN where the job writes. Once it runs
again, a deadline noticed too late for --kill-after to end before the lease can (now + --kill-after
past the last renewal's send time + --ttl - margin) gets SIGKILL to the group at once, no grace.";

/// `--help`'s epilogue and the man page's extra sections come from the same constants.
pub fn after_long_help() -> String {
    format!(
        "Examples:\n{}\n\nThe command sees:\n{}\n\nExit status:\n{}\n\nSignals:\n{}\n\nSafety:\n{}",
        indent(EXAMPLES),
        indent(CHILD_ENVIRONMENT),
        indent(EXIT_STATUS),
        indent(SIGNALS),
        indent(SAFETY)
    )
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("  {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The full command definition, as `--help` and the man page show it.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().after_long_help(after_long_help())
}

/// The definition shell completions are generated from: [`command`] without the hidden
/// subcommands (clap_complete offers hidden subcommands too, and clap cannot remove one), and
/// with value hints, so that only FILE arguments complete file names.
pub fn completion_command() -> clap::Command {
    let full = command();
    clap::Command::new("leader-exec")
        .version(env!("CARGO_PKG_VERSION"))
        .about(ABOUT)
        .disable_help_subcommand(true)
        .args(full.get_arguments().cloned())
        .subcommands(
            full.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(|s| s.clone().mut_args(with_value_hint)),
        )
        .mut_args(with_value_hint)
}

fn with_value_hint(arg: clap::Arg) -> clap::Arg {
    use clap::ValueHint;
    // An argument with a fixed set of values (`completion SHELL`) completes those values.
    if arg.get_value_hint() != ValueHint::Unknown
        || !arg.get_action().takes_values()
        || !arg.get_possible_values().is_empty()
    {
        return arg;
    }
    let names = arg.get_value_names().unwrap_or_default();
    let hint = if names.iter().any(|n| n.as_str() == "FILE") {
        ValueHint::FilePath
    } else if arg.get_long() == Some("endpoints") {
        ValueHint::Url
    } else if arg.get_long().is_none() {
        // COMMAND [ARG]...
        ValueHint::CommandWithArguments
    } else {
        ValueHint::Other
    };
    arg.value_hint(hint)
}

/// Parses argv with the full definition.
pub fn try_parse() -> Result<Cli, clap::Error> {
    use clap::{FromArgMatches, parser::ValueSource};
    let mut command = command();
    let matches = command.try_get_matches_from_mut(std::env::args_os())?;
    if let Some((name, _)) = matches.subcommand() {
        // Flags of the run form mean nothing to the subcommands; say so rather than ignore them.
        let run_only = RunArgs::augment_args(clap::Command::new("run"));
        for arg in run_only.get_arguments() {
            if matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine) {
                let flag = arg
                    .get_long()
                    .map_or_else(|| "COMMAND".to_owned(), |long| format!("--{long}"));
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!("{flag} belongs to the run form, not to `{name}`"),
                ));
            }
        }
    }
    Cli::from_arg_matches(&matches)
}

/// The run form: `leader-exec [OPTIONS] --lease NAME -- COMMAND [ARG...]`.
#[derive(Parser, Debug)]
#[command(
    name = "leader-exec",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    override_usage = "leader-exec [OPTIONS] --lease <NAME> -- <COMMAND> [ARG]...\n       leader-exec <status|watch|check|resign|hold|release> --lease <NAME> [OPTIONS]\n       leader-exec completion <bash|zsh|fish>",
    disable_help_subcommand = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Subcommand>,

    #[command(flatten)]
    pub election: ElectionArgs,

    #[command(flatten)]
    pub run: RunArgs,

    #[command(flatten)]
    pub store: StoreArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum Subcommand {
    /// Show the current leader: identity, token, key, lease time left, number of candidates.
    ///
    /// With --max-holders above 1, every holder too (oldest first; the leader is the oldest).
    /// Exit status: 0 when there is a leader, 3 when there is none, 125 on error.
    Status(StatusArgs),
    /// Print one line (or JSON object) per leadership change, until interrupted.
    ///
    /// The first line shows the leader at start (or that there is none). With --max-holders
    /// above 1, a line per change of the holder set, naming every holder (JSON: `holders`).
    /// Survives store restarts and reconnects. Exit status: 0 when interrupted by INT or TERM, 125 on error at start.
    Watch(WatchArgs),
    /// Exit 0 if TOKEN is the current leader's token, 1 if it is not (stale), 125 on error.
    ///
    /// With --max-holders above 1, any current holder's token is current.
    ///
    /// For jobs that check their fencing token before each unit of work:
    ///   leader-exec check --lease x --token "$LEADER_TOKEN" || exit 75
    Check(CheckArgs),
    /// Hand leadership over to the next instance in line, from any host, without an overlap.
    ///
    /// Asks the current leader, through a request in the store that only that leader's token
    /// answers (written only while that token still leads), to hand over. The leader stops its
    /// command exactly as on TERM (--kill-signal, --kill-after, then SIGKILL to the whole group),
    /// releases its claim only once the group is gone, and exits 75 (or, with --recampaign,
    /// campaigns again at the back of the line); the next command never starts beside the old
    /// one. `resign` waits until the claim is gone. A leader that does not answer within
    /// --timeout (a frozen host) is named, and `resign` exits 124; --force then deletes its
    /// claim at once. With --max-holders above 1 it asks the oldest holder (the leader `status`
    /// shows), or with --token T the holder with token T, and waits for that holder's claim
    /// alone. A slot `leader-exec hold` took has no process to hand over: exit 124 at once,
    /// naming `release` and --force. Exit status: 0 handed over (--force: deleted), 1 --token
    /// given and not the current leader's (with several holders: no current holder's; nothing
    /// asked or deleted), 3 no leader, 124 no handover within --timeout (or a held slot), 125
    /// error.
    Resign(ResignArgs),
    /// Take a slot and keep it with no process behind it (rolling reboots), printing its token.
    ///
    /// Waits in line as the run form does (--no-wait, --wait-timeout: exit 124 when not
    /// acquired), then leaves the slot held and exits 0, printing its token on stdout. The slot
    /// belongs to --identity (default: the host name, so that the host finds it again after it
    /// booted), counts against --max-holders like any holder, and gets a token above every
    /// earlier one. It ends at `leader-exec release`, or by its bound --for DUR, whichever comes
    /// first: on etcd DUR after it was taken (a lease of TTL DUR that nobody renews); on
    /// PostgreSQL and ZooKeeper when a waiting instance has seen it unchanged for DUR on its own
    /// clock (never sooner; later when the first waiter comes late). No wall clock decides. Holding
    /// again under the same identity is a no-op: the same slot, the same token, exit 0.
    /// `status` shows the slot, `check` accepts its token, `resign --force` removes it. Exit
    /// status: 0 held, 75 the slot was lost between taking and holding it (run it again), 124 not
    /// acquired, 125 error.
    Hold(HoldArgs),
    /// Give back the slot `leader-exec hold` took under --identity (default: the host name).
    ///
    /// Exit status: 0 released, 3 no slot held under that identity (never taken, already
    /// released, or its --for ran out), 125 error.
    Release(ReleaseArgs),
    /// Print the completion script for SHELL (the one installed under share/ for it).
    ///
    /// Under a prefix the shell does not search, load it from the shell's start-up file (bash:
    /// `source <(leader-exec completion bash)` in ~/.bashrc) or write it where the shell looks
    /// (zsh: a directory on fpath as _leader-exec; fish: ~/.config/fish/completions/). Exit
    /// status: 0, 125 for an unknown shell.
    Completion {
        /// The shell to complete for.
        shell: CompletionShell,
    },
    /// Write the man page and shell completions into DIR (for packaging).
    #[command(hide = true, name = "generate-assets")]
    GenerateAssets {
        /// The directory to write man/ and completions/ into.
        dir: PathBuf,
    },
}

/// The shells `completion` writes a script for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object with stable field names instead of text.
    #[arg(long)]
    pub json: bool,

    /// List every lease under --prefix (leader, token, TTL left, candidates, unfinished
    /// occurrences), sorted by name; --lease is not needed (and ignored). Exit 0 once read.
    #[arg(long)]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The token to check, usually "$LEADER_TOKEN".
    #[arg(long, value_name = "T")]
    pub token: String,
}

#[derive(Args, Debug)]
pub struct ResignArgs {
    /// Resign only if T is still the current leader's token (as `status` shows it); with
    /// --max-holders above 1, resign the holder with token T.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,

    /// Do not ask: delete the leader's claim at once (fenced on its token). This can overlap:
    /// the next instance may start its command before the old leader has stopped its own (on
    /// etcd and ZooKeeper the old leader SIGKILLs its group as soon as it sees the claim gone;
    /// on PostgreSQL it learns at its next renewal, up to --retry-period later; a frozen leader
    /// not until it runs again). For a leader that does not answer a plain `resign`.
    #[arg(long)]
    pub force: bool,

    /// How long to wait for the leader to hand over before giving up (exit 124). Default: the
    /// leader's --kill-after + 2 x its --retry-period + 5 s, as it records them in the store
    /// (4s + 2 x 2s + 5s = 13s for a leader that records none). The request expires then.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "force")]
    pub timeout: Option<Duration>,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    /// The bound of a slot nobody releases (a host that never came back): on etcd it ends DUR
    /// after it was taken; on PostgreSQL and ZooKeeper once a waiting instance has seen it
    /// unchanged for DUR. At least 1s.
    #[arg(long = "for", value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub bound: Duration,

    /// Who holds the slot, as `status` shows it and `release` names it [default: <hostname>]
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,

    /// How many slots the lease has (1-1000); the same N as every run-form instance of the
    /// lease.
    #[arg(long, value_name = "N", env = "LEADER_EXEC_MAX_HOLDERS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_holders: u32,

    /// Give up waiting in line after this long (exit 124) [default: wait forever]
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait_timeout: Option<Duration>,

    /// Try once: exit 124 at once if every slot is held.
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// The lease of this instance's place in line while it waits, as the run form's --ttl.
    #[arg(long, value_name = "DUR", default_value = "15s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// Whose slot to give back [default: <hostname>]
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
}

/// Which election: shared by the run form and the subcommands.
#[derive(Args, Debug)]
#[command(next_help_heading = "Election")]
pub struct ElectionArgs {
    /// Name of the election; every instance that should exclude the others uses the same name.
    ///
    /// Must not be empty and must not contain '/' or control characters.
    #[arg(
        short = 'l',
        long,
        value_name = "NAME",
        env = "LEADER_EXEC_LEASE",
        global = true
    )]
    pub lease: Option<String>,

    /// Key prefix; the election's keys live under PREFIX + NAME + "/".
    ///
    /// One path segment between slashes (like /leader-exec/ or /team-a.jobs/), so that no
    /// election's keys can lie inside another's.
    #[arg(
        long,
        value_name = "PREFIX",
        env = "LEADER_EXEC_PREFIX",
        default_value = "/leader-exec/",
        global = true
    )]
    pub prefix: String,
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Election")]
pub struct RunArgs {
    /// Stored with this instance's claim and shown by `status` (on etcd also by `etcdctl elect -l`) [default: <hostname>:<pid>]
    #[arg(long, value_name = "ID", env = "LEADER_EXEC_IDENTITY")]
    pub identity: Option<String>,

    /// Lease duration on the store (etcd lease, PostgreSQL lease row, ZooKeeper session), in whole seconds.
    ///
    /// At most 9000000000s (etcd's longest lease); every duration flag has that limit.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_TTL", default_value = "15s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,

    /// Step down when no renewal succeeded for this long, counted from the renewal's send time.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub renew_deadline: Duration,

    /// Interval between renewals (and the time one renewal may take before it is retried).
    ///
    /// At least 10ms, at most a third of --renew-deadline.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_period: Duration,

    /// First signal sent to the command's process group on step-down (name or number).
    ///
    /// One whose default action ends a process: STOP, TSTP, TTIN, TTOU, CONT, CHLD, URG and
    /// WINCH are refused.
    #[arg(short = 's', long, value_name = "SIG", env = "LEADER_EXEC_KILL_SIGNAL", default_value = "TERM", value_parser = SignalParser, hide_possible_values = true)]
    pub kill_signal: nix::sys::signal::Signal,

    /// Grace period after the first signal before SIGKILL goes to the whole process group.
    #[arg(short = 'k', long, value_name = "DUR", env = "LEADER_EXEC_KILL_AFTER", default_value = "4s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub kill_after: Duration,

    /// Give up campaigning after this long (exit 124) [default: wait forever]
    ///
    /// The line is always looked at once: 0 means try once, like --no-wait. On PostgreSQL a
    /// holder that crashed is taken over only after a full --ttl of watching its row unchanged:
    /// a shorter timeout then exits 124.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_WAIT_TIMEOUT", value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait_timeout: Option<Duration>,

    /// Try once: exit 124 at once if another instance leads or is ahead in line.
    ///
    /// On PostgreSQL a row that was not released counts as led, even when its holder crashed,
    /// until a waiting instance has taken it over.
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// Let up to N instances run COMMAND at once (1-1000): a fleet-wide concurrency limit.
    ///
    /// Every holder keeps every rule of a single leader (its command is stopped before its
    /// claim can expire) and gets its own fencing token, greater than every earlier one, in
    /// LEADER_TOKEN, and N in LEADER_MAX_HOLDERS. The others wait in line. Every instance of a
    /// lease must give the same N: one that differs exits 125, leaving nothing in the store.
    /// N = 1 (the default) is a single leader, with the same keys, rows and nodes as always.
    /// `status` lists every holder; `check` accepts any holder's token; `resign --token T`
    /// picks a holder. Not with --occurrence (which runs an occurrence once, by one leader).
    #[arg(long, value_name = "N", env = "LEADER_EXEC_MAX_HOLDERS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_holders: u32,

    /// After leadership is lost, stop the command and campaign again instead of exiting 75.
    ///
    /// For long-running services: when elected again, a fresh command starts with a new, larger
    /// token. When the command exits by itself, leader-exec exits with its status as usual.
    /// --wait-timeout applies to each campaign.
    #[arg(long)]
    pub recampaign: bool,

    /// How the command's processes are contained, so that stopping it reaches all of them.
    ///
    /// group: its own process group, killed with killpg; the supervisor kills the group when
    /// leader-exec dies. A process that leaves the group (setsid, a daemonizing double fork)
    /// escapes every stop. cgroup: also a cgroup v2 of its own, created beneath leader-exec's
    /// cgroup; when the group is gone, or on SIGKILL, cgroup.kill ends whatever is left, also
    /// processes that left the group (a daemon the command starts ends with it), and the next
    /// holder starts only when the cgroup is empty. Needs root or a delegated cgroup
    /// (Delegate=yes under systemd) and Linux 5.14; unavailable, it is refused with exit 125
    /// before joining the line. pidns: also a PID namespace of its own whose PID 1 is the
    /// supervisor, with its own /proc (the command sees other pids: `ps` shows the job); what
    /// is left when the group is gone is killed, and when the supervisor dies, even SIGKILLed
    /// together with leader-exec, the kernel kills every process of the job. Needs root
    /// (CAP_SYS_ADMIN); refused with 125 otherwise; `$$` in the command is an inner pid, and
    /// it is no sandbox (a root command can unmount its /proc). With group and cgroup,
    /// leader-exec and its supervisor SIGKILLed together leave the command's other processes
    /// running. A --health-cmd check is contained the same way, each check on its own.
    #[arg(
        long,
        value_name = "MODE",
        env = "LEADER_EXEC_CONTAIN",
        default_value = "group"
    )]
    pub contain: crate::run::Contain,

    /// Keep the lease until this long after acquiring it, even if the command ends sooner.
    ///
    /// Renewed meanwhile, and given up as usual when it can no longer be proven; instances that
    /// arrive during the hold see a leader (and exit 124 with --no-wait). TERM or INT during the
    /// hold make leader-exec exit at once and leave the lease to expire on its own.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_hyphen_values = true)]
    pub hold_at_least: Option<Duration>,

    /// Accept a --hold-at-least longer than a day.
    ///
    /// Without it such a hold is refused (exit 125) as a likely typo, `10d` for `10m`: every other
    /// instance would wait, or exit 124, for that long.
    #[arg(long)]
    pub allow_long_hold: bool,

    /// Run COMMAND at most once for this occurrence, e.g. "statements:$(date +%F)".
    ///
    /// The leader records the occurrence in the store (any of them; fenced by
    /// its token) before starting COMMAND
    /// and its outcome afterwards. A later leader with the same ID does not run a done
    /// occurrence (exit 0), runs a failed one again, and applies --if-unfinished to one that an
    /// earlier leader started and left without a recorded outcome. COMMAND gets
    /// LEADER_OCCURRENCE.
    #[arg(long, value_name = "ID")]
    pub occurrence: Option<String>,

    /// What to do with an occurrence an earlier leader started and left without an outcome.
    ///
    /// That run died or lost its lease mid-run, or finished but could not record its outcome
    /// (its store cut off at the end). The default refuses (exit 76): the earlier run may have
    /// done part of the work, or all of it, and only
    /// someone who knows the job can say whether running it again is safe. Use `rerun` for
    /// idempotent jobs (they get the earlier leader's token in LEADER_PREVIOUS_TOKEN to resume),
    /// `skip` where a missed run is cheaper than a repeated one.
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "fail",
        requires = "occurrence"
    )]
    pub if_unfinished: crate::records::occurrence::IfUnfinished,

    /// How long occurrence records are kept in the store (any of them);
    /// afterwards they are deleted, or treated as absent until they are.
    #[arg(long, value_name = "DUR", default_value = "7days", value_parser = parse_duration, allow_hyphen_values = true, requires = "occurrence")]
    pub occurrence_retention: Duration,

    /// Stop the command this long after it started, as on TERM, and exit 79 [default: no bound]
    ///
    /// For a job that may hang: a hung command would otherwise keep the lease, renewed, forever.
    /// The stop is the one TERM starts (--kill-signal to the command's process group, SIGKILL
    /// after --kill-after); once the group is gone the lease is released (after --hold-at-least,
    /// if given) and leader-exec exits 79, or campaigns again with --recampaign. An --occurrence
    /// stopped this way stays unfinished: --if-unfinished decides the next run. Not 0.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_MAX_RUNTIME", value_parser = parse_duration, allow_hyphen_values = true)]
    pub max_runtime: Option<Duration>,

    /// Wait a random time in [0, DUR) before the first campaign [default: 0]
    ///
    /// Spreads a fleet whose timers or crontabs fire at the same instant, so that the store
    /// does not get every campaign at once. Nothing is contacted meanwhile: TERM, INT, HUP or
    /// QUIT during the delay exit 128+N at once.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_SPLAY", value_parser = parse_duration, allow_hyphen_values = true)]
    pub splay: Option<Duration>,

    /// A health check, run with /bin/sh -c; an unhealthy instance neither stands in line nor leads
    ///
    /// Runs every --health-interval in a process group of its own, its output discarded, killed
    /// at --health-timeout (a failure); contained as --contain says, and what it left is killed
    /// when it ends. The first campaign waits for a check to pass; after
    /// --health-retries failures in a row a waiter leaves the line (and rejoins once a check
    /// passes), and a leader hands over as on `resign`: its command is stopped as on TERM, the
    /// lease released, exit 75 (or, with --recampaign, campaign again once healthy). A check
    /// never delays a renewal or a step-down.
    #[arg(long, value_name = "CMD", env = "LEADER_EXEC_HEALTH_CMD")]
    pub health_cmd: Option<String>,

    /// Time between health checks.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_HEALTH_INTERVAL", default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true, requires = "health_cmd")]
    pub health_interval: Duration,

    /// How long one health check may run before it is killed and counted as failed.
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_HEALTH_TIMEOUT", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true, requires = "health_cmd")]
    pub health_timeout: Duration,

    /// Failed health checks in a row that make the instance unhealthy (1-100).
    #[arg(long, value_name = "N", env = "LEADER_EXEC_HEALTH_RETRIES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100), requires = "health_cmd")]
    pub health_retries: u32,

    /// Serve GET /metrics, /leader and /healthz over HTTP on this address [default: off]
    ///
    /// An IP address and port (127.0.0.1:9464, [::1]:9464, 0.0.0.0:9464 for every interface) or
    /// a unix socket path (/run/leader-exec/job.sock). /metrics: Prometheus text format
    /// (OpenMetrics when the scraper asks for it); /leader: 200 while this instance leads and its
    /// command runs, else 503; /healthz: 500 when this instance leads but its last successful
    /// renewal is older than --renew-deadline + --retry-period, else 200. A failure to listen is
    /// exit 125 before campaigning.
    #[arg(
        long,
        value_name = "ADDR",
        env = "LEADER_EXEC_HTTP",
        help_heading = "Observability"
    )]
    pub http: Option<String>,

    /// Write the metrics and this run's outcome to FILE (node_exporter textfile format)
    ///
    /// Rewritten atomically (a temporary file renamed over it) on every change of state and at
    /// exit; holds the run's start and end time, duration, exit code, token, whether it led, and
    /// leader_exec_last_success_timestamp_seconds (kept from the previous file when this run did
    /// not succeed). A FILE that cannot be written is exit 125 before campaigning.
    #[arg(
        long,
        value_name = "FILE",
        env = "LEADER_EXEC_METRICS_FILE",
        help_heading = "Observability"
    )]
    pub metrics_file: Option<PathBuf>,

    /// The command to run while this instance leads, and its arguments (after `--`).
    #[arg(last = true, value_name = "COMMAND", num_args = 1..)]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Store connection")]
pub struct StoreArgs {
    /// etcd endpoints, comma-separated; or one postgres:// (postgresql://) URL in libpq's form to use PostgreSQL; or one zk://HOST:PORT[,HOST:PORT...][/chroot] URL to use ZooKeeper; or one mysql://USER@HOST:PORT[,HOST:PORT...]/DATABASE (mariadb://) URL, with ssl-mode and ssl-ca as the mysql client spells them, to use MySQL or MariaDB [env: LEADER_EXEC_ENDPOINTS, then ETCDCTL_ENDPOINTS] [default: http://127.0.0.1:2379]
    #[arg(long, value_name = "URL[,URL]", value_delimiter = ',', global = true)]
    pub endpoints: Vec<String>,

    /// How long the first contact with the store may take before leader-exec gives up (exit 125, naming the endpoint); a connection refused on every endpoint ends the wait at once. Later outages are retried (a leader until its renew deadline).
    #[arg(long, value_name = "DUR", env = "LEADER_EXEC_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration, allow_hyphen_values = true, global = true)]
    pub connect_timeout: Duration,

    /// CA certificate to verify the store's certificate (PEM; etcd, PostgreSQL and MySQL) [env: LEADER_EXEC_CACERT, then ETCDCTL_CACERT]
    ///
    /// Without it, https:// endpoints are verified against the system's trust store
    /// (SSL_CERT_FILE and SSL_CERT_DIR, if set, say where it is).
    #[arg(long, value_name = "FILE", global = true)]
    pub cacert: Option<PathBuf>,

    /// Client certificate for TLS (PEM) [env: LEADER_EXEC_CERT, then ETCDCTL_CERT]
    #[arg(long, value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,

    /// Client private key for TLS (PEM) [env: LEADER_EXEC_KEY, then ETCDCTL_KEY]
    #[arg(long, value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,

    /// The store's user (etcd, PostgreSQL, MySQL; a ZooKeeper digest user), optionally with its password after a colon (the password is never logged) [env: ETCDCTL_USER]
    #[arg(
        long,
        value_name = "NAME[:PASS]",
        hide_env_values = true,
        global = true
    )]
    pub user: Option<String>,

    /// Read the store's password from this file (first line) [env: LEADER_EXEC_PASSWORD holds the password itself; PostgreSQL also reads PGPASSWORD]
    #[arg(long, value_name = "FILE", global = true)]
    pub password_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// More log output on stderr (-v: the lifecycle, -vv: debug, -vvv: trace); default: warnings and errors.
    #[arg(short = 'v', long, action = clap::ArgAction::Count, conflicts_with = "quiet", global = true)]
    pub verbose: u8,

    /// Less log output on stderr (-q: errors only, -qq: no log lines; a failure of leader-exec itself still prints its one last line).
    #[arg(short = 'q', long, action = clap::ArgAction::Count, global = true)]
    pub quiet: u8,

    /// Log format on stderr. LEADER_EXEC_LOG, if set, is a filter in RUST_LOG's target=level,... form that overrides -v/-q.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "LEADER_EXEC_LOG_FORMAT",
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
}

/// `--kill-signal`'s parser: [`parse_signal`], plus the names shell completions offer (hidden in
/// `--help`, which says "name or number": any signal name or number is accepted).
#[derive(Clone, Copy, Debug)]
pub struct SignalParser;

/// The signals `--kill-signal <TAB>` offers: those a job is commonly asked to stop with.
pub const COMPLETED_SIGNALS: [&str; 7] = ["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"];

impl clap::builder::TypedValueParser for SignalParser {
    type Value = nix::sys::signal::Signal;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let parse: fn(&str) -> Result<nix::sys::signal::Signal, String> = parse_signal;
        parse.parse_ref(command, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            COMPLETED_SIGNALS
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// Signal names with or without the SIG prefix, in any case, or numbers: `TERM`, `sigint`, `9`.
///
/// Only signals whose default action ends a process are accepted: STOP, TSTP, TTIN and TTOU
/// pause it, CONT resumes it, CHLD, URG and WINCH are ignored by default, and a command that
/// does not handle them would go on running after a step-down until SIGKILL.
pub fn parse_signal(text: &str) -> Result<nix::sys::signal::Signal, String> {
    use nix::sys::signal::Signal;
    let trimmed = text.trim();
    let signal = if let Ok(number) = trimmed.parse::<i32>() {
        Signal::try_from(number).map_err(|_| format!("'{text}' is not a signal number"))?
    } else {
        let upper = trimmed.to_ascii_uppercase();
        let name = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        name.parse::<Signal>()
            .map_err(|_| format!("'{text}' is not a signal name like TERM, INT or KILL"))?
    };
    match signal {
        Signal::SIGSTOP
        | Signal::SIGTSTP
        | Signal::SIGTTIN
        | Signal::SIGTTOU
        | Signal::SIGCONT
        | Signal::SIGCHLD
        | Signal::SIGURG
        | Signal::SIGWINCH => Err(format!(
            "{} cannot end a process (by default it is ignored, pauses or resumes it); use one that does, like TERM, INT, HUP, QUIT, USR1 or KILL",
            signal.as_str()
        )),
        signal => Ok(signal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use nix::sys::signal::Signal;

    #[test]
    fn verify_cli() {
        Cli::command().debug_assert();
    }

    #[test]
    fn signals_parse_by_name_and_number() {
        assert_eq!(parse_signal("TERM"), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal("sigint"), Ok(Signal::SIGINT));
        assert_eq!(parse_signal("9"), Ok(Signal::SIGKILL));
        assert_eq!(parse_signal("Usr1"), Ok(Signal::SIGUSR1));
        assert!(parse_signal("TERMINATE").is_err());
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("").is_err());
    }

    #[test]
    fn signals_that_cannot_end_a_process_are_refused() {
        for name in [
            "STOP", "TSTP", "TTIN", "TTOU", "CONT", "CHLD", "URG", "WINCH", "19", "17",
        ] {
            let err = parse_signal(name).unwrap_err();
            assert!(err.contains("cannot end a process"), "{name}: {err}");
        }
        for name in ["HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "ALRM", "PIPE"] {
            assert!(parse_signal(name).is_ok(), "{name}");
        }
    }
}
