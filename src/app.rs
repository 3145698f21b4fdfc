//! From argv to an exit code.

use clap::error::ErrorKind;

use crate::cli::{self, Cli, Subcommand};
use crate::clock::BootClock;
use crate::commands;
use crate::election::Scope;
use crate::election::{LeaseTiming, Store};
use crate::exit::{self, Failure};
use crate::process::contain::{Cgroup, PidNamespace};
use crate::process::{Handle, lookup, supervisor};
use crate::run::Contain;
use crate::run::Runner;
use crate::run::Settings;
use crate::run::health::Containment;
use crate::signals::Signals;
use crate::telemetry::logging::LogFormat;
use crate::validate;

/// Parses the command line, runs, and returns the exit code. Errors are one line on stderr.
pub fn main() -> u8 {
    // Before anything is read (the environment, a password file): no other process of this
    // user, the command included, may read leader-exec's memory or environment.
    crate::process::environment::keep_private();
    // Before anything else, on the only thread: Ctrl-Z must never stop a leader.
    crate::signals::block_stop_signals();
    let cli = match cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    crate::telemetry::logging::init(cli.log.verbose, cli.log.quiet, cli.log.log_format);
    let json = cli.log.log_format == LogFormat::Json;
    let result = match cli.subcommand {
        None => run(cli),
        Some(_) => subcommand(cli),
    };
    match result {
        Ok(code) => {
            // Bounded: a stderr that does not drain cannot keep leader-exec from exiting.
            crate::telemetry::logging::flush(std::time::Duration::from_millis(500));
            code
        }
        Err(e) => {
            let code = exit::code_of(&e);
            fatal(json, &format!("{e:#}"), code);
            code
        }
    }
}

/// The last line leader-exec prints when it gives up: text, or one JSON object with
/// `--log-format json` (fields `time`, `level`, `event`, `message`, `exit_code`).
fn fatal(json: bool, message: &str, code: u8) {
    // One line, whatever the message holds.
    let message = message.replace(['\n', '\r'], " ");
    if json {
        let object = serde_json::json!({
            "time": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "level": "ERROR",
            "event": "failed",
            "message": message,
            "exit_code": code,
        });
        crate::telemetry::logging::final_line(&format!("{object}\n"));
    } else {
        crate::telemetry::logging::final_line(&format!(
            "leader-exec: {}\n",
            crate::escape::escape_str(&message)
        ));
    }
}

/// Whether the command line asks for JSON logs, read from the raw arguments: used when the
/// command line itself could not be parsed.
fn json_requested() -> bool {
    let mut args = std::env::args_os().skip(1);
    let mut from_args = None;
    while let Some(arg) = args.next() {
        let Some(arg) = arg.to_str() else { continue };
        match arg {
            "--" => break,
            "--log-format" => from_args = args.next().map(|v| v == "json"),
            _ => {
                if let Some(value) = arg.strip_prefix("--log-format=") {
                    from_args = Some(value == "json");
                }
            }
        }
    }
    from_args.unwrap_or_else(|| {
        std::env::var("LEADER_EXEC_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"))
    })
}

/// `--help` and `--version` go to stdout with status 0; anything else is one line and 125.
///
/// clap's own message spans several lines (what is wrong, then the argument it is about, then
/// a tip); they are joined into one, without the usage and `--help` lines that follow.
fn usage_error(error: clap::Error) -> u8 {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            0
        }
        _ => {
            let rendered = error.render().to_string();
            let message = one_line(&rendered);
            let message = if message.is_empty() {
                "invalid arguments".to_owned()
            } else {
                message
            };
            let args: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let message = match hint(&error, &args) {
                Some(hint) => format!("{message}; {hint}"),
                None => message,
            };
            fatal(
                json_requested(),
                &format!("{message} (see leader-exec --help)"),
                exit::FAILURE,
            );
            exit::FAILURE
        }
    }
}

/// A hint for the mistakes clap has no tip for: a command given without `--` before it, and a
/// misspelt subcommand (clap suggests subcommands only where no trailing COMMAND is accepted).
fn hint(error: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unexpected)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    if unexpected.starts_with('-') {
        // clap's own tip covers options.
        return None;
    }
    let command = cli::command();
    let subcommands: Vec<&str> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name())
        .collect();
    if let Some(name) = subcommands
        .iter()
        .find(|name| unexpected.len() >= 3 && crate::escape::edit_distance(unexpected, name) <= 2)
    {
        return Some(format!("did you mean the subcommand `{name}`?"));
    }
    let position = args.iter().position(|a| a == unexpected)?;
    if args[..position]
        .iter()
        .any(|a| a == "--" || subcommands.contains(&a.as_str()))
    {
        return None;
    }
    Some(format!(
        "to run it as the command, put -- before it: leader-exec [OPTIONS] --lease NAME -- {unexpected} ..."
    ))
}

/// clap's rendered error as one line: every line before the usage, trimmed and joined.
fn one_line(rendered: &str) -> String {
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line);
        }
    }
    let joined = parts.join(" ");
    joined.strip_prefix("error: ").unwrap_or(&joined).to_owned()
}

/// The run form.
fn run(cli: Cli) -> anyhow::Result<u8> {
    let settings = validate::settings_from_args(cli.election, cli.run, cli.store)?;
    crate::telemetry::logging::set_context(&settings.lease, &settings.identity);
    lookup::check_command(&settings.command[0])?;
    // Before the store is contacted: a containment asked for and unavailable is refused before
    // this instance joins the line, never after it has won.
    let cgroup = match settings.contain {
        Contain::Cgroup => Some(Cgroup::create().map_err(Failure::usage)?),
        Contain::Group | Contain::Pidns => None,
    };
    // The checks are held as the command is: with `cgroup` a cgroup of their own beside the
    // job's, with `pidns` a PID namespace each (see run/health.rs).
    let checks = match (&cgroup, &settings.health) {
        (Some(job), Some(_)) => match Cgroup::create_for_checks() {
            Ok(checks) => Some(checks),
            Err(e) => {
                job.remove();
                return Err(Failure::usage(e).into());
            }
        },
        _ => None,
    };
    crate::run::health::contain(match (settings.contain, &checks) {
        (_, Some(checks)) => Containment::Cgroup(checks.clone()),
        (Contain::Pidns, None) => Containment::Pidns,
        _ => Containment::Group,
    });
    let pidns = match settings.contain {
        Contain::Pidns => Some(PidNamespace::prepare().map_err(Failure::usage)?),
        Contain::Group | Contain::Cgroup => None,
    };
    // The settings hold what was read: the secrets leave the environment block before the
    // supervisor's fork copies it.
    // SAFETY: no thread has been started yet.
    unsafe { crate::process::environment::scrub_own() };
    // SAFETY: no thread has been started yet; the runtime is built below.
    let forked =
        unsafe { supervisor::fork_supervisor(&settings.command, cgroup, checks, pidns) }
            .map_err(|e| Failure::usage(format!("cannot start the supervisor process: {e}")))?;
    // Threads may start now.
    crate::telemetry::logging::start();
    crate::notify::init();
    let telemetry =
        crate::telemetry::setup(settings.http.clone(), settings.metrics_file.clone(), || {
            crate::telemetry::metrics::Config {
                lease: settings.lease.clone(),
                identity: settings.identity.clone(),
                renew_deadline: settings.timing.renew_deadline,
                health_grace: settings.timing.retry_period,
                max_holders: settings.max_holders,
            }
        })?;
    // One thread: the runtime runs on the main thread, which lives as long as the process.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let serving = telemetry.clone();
    let result = runtime.block_on(async move {
        serving.start()?;
        let signals = Signals::install()?;
        let mut supervisor = Handle::new(forked)?;
        let result = lead_or_wait(&settings, &mut supervisor, signals).await;
        supervisor.shutdown();
        result
    });
    crate::run::health::stop_checks();
    telemetry.finish(&result);
    result
}

async fn lead_or_wait(
    settings: &Settings,
    supervisor: &mut Handle,
    mut signals: Signals,
) -> anyhow::Result<u8> {
    // Every transition of the run, as logs, metrics and sd_notify status.
    let report =
        crate::run::Reporter::new(crate::telemetry::report::Exporter::new(&settings.lease));
    // Before the store is opened: a stop during the splay leaves nothing behind.
    if let Some(splay) = settings.splay
        && let Some(signal) = crate::run::splay::wait(splay, &mut signals, &report).await
    {
        return Ok(128 + signal as u8);
    }
    // The first check runs while the store is opened; the first campaign waits for its pass.
    let health = match settings.health.clone() {
        Some(check) => Some(
            crate::run::health::Checker::start(check, report.clone()).map_err(|e| {
                Failure::usage(format!("cannot start the health-check thread: {e}"))
            })?,
        ),
        None => None,
    };
    let t = &settings.timing;
    let timing = LeaseTiming {
        ttl: t.ttl,
        retry_period: t.retry_period,
        needed: t.needed(),
    };
    let store = settings
        .connection
        .open(
            &settings.scope(),
            settings.identity.clone(),
            timing,
            settings.max_holders,
        )
        .await?;
    lead_with(settings, &store, supervisor, &mut signals, health, report).await
}

async fn lead_with<B: Store>(
    settings: &Settings,
    backend: &B,
    supervisor: &mut Handle,
    signals: &mut Signals,
    health: Option<crate::run::health::Checker>,
    report: crate::run::Reporter,
) -> anyhow::Result<u8> {
    let held_report = report.clone();
    let mut runner = Runner {
        settings,
        backend,
        clock: BootClock,
        supervisor,
        signals,
        health,
        report,
    };
    let run = runner.run();
    if !crate::telemetry::metrics::enabled() {
        return run.await;
    }
    // The held slots of the lease, for /metrics: polled after the run and dropped when it ends,
    // so the run never waits for it (see run/held.rs).
    tokio::select! {
        biased;
        code = run => code,
        () = crate::run::held::export(backend, settings, &held_report) => {
            unreachable!("export never returns")
        }
    }
}

/// `status`, `watch`, `check`, `resign` and the hidden `generate-assets`.
fn subcommand(cli: Cli) -> anyhow::Result<u8> {
    let Some(subcommand) = cli.subcommand else {
        unreachable!("called for subcommands only");
    };
    if let Subcommand::GenerateAssets { dir } = &subcommand {
        crate::assets::write_all(dir)?;
        return Ok(0);
    }
    if let Subcommand::Completion { shell } = subcommand {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        match out
            .write_all(&crate::assets::completion(shell))
            .and_then(|()| out.flush())
        {
            // A reader that stopped early (`| head`) wanted no more.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
            _ => return Ok(0),
        }
    }
    crate::telemetry::logging::start();
    if let Subcommand::Status(args) = &subcommand
        && args.all
    {
        return status_all(cli.election, cli.store, args.json);
    }
    let scope = validate::scope_from_args(cli.election)?;
    crate::telemetry::logging::set_context(&scope.lease, "");
    let connection = validate::connection(cli.store)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut signals = Signals::install()?;
        if let Subcommand::Hold(args) = subcommand {
            return hold(&connection, &scope, args, &mut signals).await;
        }
        let store = connection.open_reader(&scope.prefix, Some(&scope)).await?;
        serve(
            &store,
            subcommand,
            &scope,
            connection.connect_timeout,
            &mut signals,
        )
        .await
    })
}

async fn serve<B: Store>(
    backend: &B,
    subcommand: Subcommand,
    scope: &Scope,
    limit: std::time::Duration,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    {
        let (backend, scope) = (backend, scope);
        match subcommand {
            Subcommand::Status(args) => {
                commands::status::status(backend, scope, args.json, limit).await
            }
            Subcommand::Check(args) => commands::check::check(backend, &args.token, limit).await,
            Subcommand::Resign(args) => {
                let request = crate::commands::resign::Request {
                    token: args.token.as_deref(),
                    force: args.force,
                    timeout: args.timeout,
                };
                crate::commands::resign::resign(backend, scope, request, limit, signals).await
            }
            Subcommand::Watch(args) => {
                commands::watch::watch(backend, scope, args.json, limit, signals).await
            }
            Subcommand::Release(args) => {
                let identity = crate::validate::hold_identity(args.identity)?;
                commands::hold::release(backend, scope, &identity, limit).await
            }
            Subcommand::GenerateAssets { .. }
            | Subcommand::Completion { .. }
            | Subcommand::Hold(_) => {
                unreachable!("handled above")
            }
        }
    }
}

/// `hold`: a candidate of the election, whose place in line lives for `--ttl` while it waits
/// (renewed each third of it); nothing runs once it holds, so no step-down margin is needed.
async fn hold(
    connection: &crate::election::any::Connection,
    scope: &Scope,
    args: cli::HoldArgs,
    signals: &mut Signals,
) -> anyhow::Result<u8> {
    let identity = crate::validate::hold_identity(args.identity)?;
    crate::telemetry::logging::set_context(&scope.lease, &identity);
    if args.ttl < std::time::Duration::from_secs(1) {
        return Err(Failure::usage("--ttl must be at least 1s").into());
    }
    let retry_period = args.ttl / 3;
    let timing = LeaseTiming {
        ttl: args.ttl,
        retry_period,
        needed: std::time::Duration::ZERO,
    };
    let store = connection
        .open(scope, identity.clone(), timing, args.max_holders)
        .await?;
    let request = commands::hold::Request {
        identity,
        max_holders: args.max_holders,
        bound: args.bound,
        no_wait: args.no_wait,
        wait_timeout: args.wait_timeout,
        retry_period,
    };
    commands::hold::hold(&store, scope, request, connection.connect_timeout, signals).await
}

/// `status --all`: every lease under the prefix.
fn status_all(
    election: cli::ElectionArgs,
    store: cli::StoreArgs,
    json: bool,
) -> anyhow::Result<u8> {
    let prefix = validate::validate_prefix(election.prefix)?;
    let connection = validate::connection(store)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let store = connection.open_reader(&prefix, None).await?;
        crate::commands::status_all::status_all(&store, &prefix, json, connection.connect_timeout)
            .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_keep_the_argument_they_are_about() {
        let rendered = "error: the following required arguments were not provided:\n  <COMMAND>...\n\nUsage: leader-exec [OPTIONS]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "the following required arguments were not provided: <COMMAND>..."
        );
        let rendered = "error: unexpected argument '-x' found\n\n  tip: to pass '-x' as a value, use '-- -x'\n\nUsage: leader-exec\n";
        assert_eq!(
            one_line(rendered),
            "unexpected argument '-x' found tip: to pass '-x' as a value, use '-- -x'"
        );
    }
}
