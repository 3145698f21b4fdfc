//! Logs go to stderr only: stdout belongs to the command.
//!
//! Text: `TIME leader-exec[IDENTITY] LEVEL message key=value…`, one line per event.
//! JSON: one object per line with stable fields: `time` (RFC 3339, UTC), `level`, `lease`,
//! `identity`, `event` (a machine-readable name such as `elected` or `stepping-down`), `message`,
//! and the event's own fields (`token`, `pid`, `signal`, `reason`, …).
//!
//! By default only warnings and errors are printed, as befits a wrapper that runs from cron (which
//! mails any output): `-v` adds the lifecycle (campaigning, elected, exited), `-vv` debug.
//!
//! # Logging never blocks, never fails
//! stderr is shared with the command and may be a pipe that nobody drains (a stalled journald or
//! `| logger`, an ssh session lost in the partition that cut the store). A blocking `write(2)` on
//! the thread that runs the state machine would then stop the step-down itself: no TERM, no
//! KILL, while another host takes over. So a log line is only *queued* here, with `try_send` on
//! a bounded channel; a thread of its own does the writing and may block for as long as stderr
//! does. When the queue is full the line is dropped and counted; once stderr drains again, the
//! writer says how many were lost. Write errors (a reader that went away: EPIPE) are ignored, so
//! a broken stderr can neither panic nor abort leader-exec.
//!
//! The writer thread is started by [`start`], after the supervisor has been forked (the fork needs
//! a process with one thread); lines logged before that wait in the queue.

use std::fmt::{self, Write as _};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The lease and identity every line carries, known once the settings are validated.
static CONTEXT: OnceLock<(String, String)> = OnceLock::new();

/// Whether lines are JSON objects (`--log-format json`).
static JSON: AtomicBool = AtomicBool::new(false);

/// Lines queued at most: 1024 lines are about 200 KiB, plenty to ride out a slow reader.
const QUEUE_LINES: usize = 1024;

/// Lines dropped because the queue was full (stderr not draining).
static DROPPED: AtomicU64 = AtomicU64::new(0);

enum Message {
    Line(Vec<u8>),
    /// Answered once every line queued before it has been written.
    Flush(SyncSender<()>),
}

struct Queue {
    sender: SyncSender<Message>,
    /// Taken by the writer thread when it starts.
    receiver: Mutex<Option<Receiver<Message>>>,
}

fn queue() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (sender, receiver) = sync_channel(QUEUE_LINES);
        Queue {
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    })
}

/// Queues one line; never blocks.
fn enqueue(line: Vec<u8>) {
    match queue().sender.try_send(Message::Line(line)) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Starts the thread that writes queued lines to stderr. Idempotent. Call it only once the
/// process may have threads (after the supervisor's fork).
pub fn start() {
    let Some(receiver) = queue().receiver.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    // Should the thread not start, lines are dropped and counted: logging is never worth
    // stopping for.
    let _ = std::thread::Builder::new()
        .name("log-writer".into())
        .stack_size(64 * 1024)
        .spawn(move || write_lines(receiver));
}

/// The writer thread: the only place that writes to stderr, and the only one that may block.
fn write_lines(receiver: Receiver<Message>) {
    let mut stderr = std::io::stderr();
    let mut reported = 0;
    for message in receiver {
        match message {
            Message::Line(line) => {
                let dropped = DROPPED.load(Ordering::Relaxed);
                if dropped > reported {
                    let note = format_line(
                        "WARN",
                        "log-lines-dropped",
                        &format!(
                            "{} log line(s) dropped: stderr was not draining",
                            dropped - reported
                        ),
                        &[("dropped", Value::from(dropped - reported))],
                    );
                    let _ = stderr.write_all(note.as_bytes());
                    reported = dropped;
                }
                // A reader that went away (EPIPE) or a closed fd: nothing to do about it.
                let _ = stderr.write_all(&line);
            }
            Message::Flush(done) => {
                let _ = done.try_send(());
            }
        }
    }
}

/// Waits up to `limit` for the queued lines to reach stderr. Used just before exiting, when
/// nothing is left to protect; a stderr that does not drain costs at most `limit`.
pub fn flush(limit: Duration) {
    start();
    let until = Instant::now() + limit;
    let (done, finished) = sync_channel(1);
    let mut message = Message::Flush(done);
    loop {
        match queue().sender.try_send(message) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if Instant::now() < until => {
                message = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = finished.recv_timeout(until.saturating_duration_since(Instant::now()));
}

/// The last line of a run that failed (formatted by the caller): queued like any other line and
/// flushed, waiting at most a second for a stderr that does not drain.
pub fn final_line(line: &str) {
    enqueue(line.as_bytes().to_vec());
    flush(Duration::from_secs(1));
}

/// One line in the current format, for lines that do not come from a tracing event.
fn format_line(
    level: &str,
    event: &str,
    message: &str,
    fields: &[(&'static str, Value)],
) -> String {
    let mut others = vec![("event", Value::from(event))];
    others.extend(fields.iter().cloned());
    render(
        JSON.load(Ordering::Relaxed),
        level,
        Fields {
            message: message.to_owned(),
            others,
        },
    )
}

/// One line: a JSON object, or `TIME leader-exec[ID] LEVEL message key=value…` with the store's
/// data escaped (`event` is for machines: the text message already says what happened).
fn render(json: bool, level: &str, mut fields: Fields) -> String {
    let time = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    if json {
        let mut object = Map::new();
        object.insert("time".into(), time.to_string().into());
        object.insert("level".into(), level.into());
        if let Some((lease, identity)) = CONTEXT.get() {
            object.insert("lease".into(), lease.as_str().into());
            object.insert("identity".into(), identity.as_str().into());
        }
        if let Some(index) = fields.others.iter().position(|(name, _)| *name == "event") {
            let (_, event) = fields.others.remove(index);
            object.insert("event".into(), event);
        }
        object.insert("message".into(), fields.message.into());
        for (name, value) in fields.others {
            object.insert(name.into(), value);
        }
        format!("{}\n", Value::Object(object))
    } else {
        let mut line = format!(
            "{time} {} {level:>5} {}",
            program(),
            escape(&fields.message)
        );
        for (name, value) in fields.others.into_iter().filter(|(n, _)| *n != "event") {
            match value {
                Value::String(s) => {
                    let _ = write!(line, " {name}={}", escape(&s));
                }
                other => {
                    let _ = write!(line, " {name}={other}");
                }
            }
        }
        line.push('\n');
        line
    }
}

/// `leader-exec[IDENTITY]` once the identity is known (several hosts' lines in one journal are
/// told apart by it), plain `leader-exec` before that and in the subcommands, which have none.
fn program() -> String {
    match CONTEXT.get() {
        Some((_, identity)) if !identity.is_empty() => format!("leader-exec[{}]", escape(identity)),
        _ => "leader-exec".to_owned(),
    }
}

pub fn set_context(lease: &str, identity: &str) {
    let _ = CONTEXT.set((lease.to_owned(), identity.to_owned()));
}

/// The log format on stderr (`--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Sets up the global logger: `verbose` and `quiet` count `-v` and `-q`; `LEADER_EXEC_LOG`
/// (RUST_LOG's `target=level,…` form) overrides them.
///
/// The filter is `Targets`, not `EnvFilter`: it reads the same comma-separated `target=level`
/// directives and bare levels, without span and field filters, and it does not link a regular
/// expression engine (about 220 KB of code, paid in resident pages by every instance; see
/// bench/MEMORY.md).
pub fn init(verbose: u8, quiet: u8, format: LogFormat) {
    let level = match (verbose, quiet) {
        (0, 0) => "warn",
        (1, _) => "info",
        (2, _) => "debug",
        (v, _) if v > 2 => "trace",
        (_, 1) => "error",
        _ => "off",
    };
    let filter = std::env::var("LEADER_EXEC_LOG")
        .ok()
        .and_then(|spec| spec.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            format!("leader_exec={level}")
                .parse()
                .expect("a target and a level parse")
        });
    let json = format == LogFormat::Json;
    JSON.store(json, Ordering::Relaxed);
    tracing_subscriber::fmt()
        // The builder's own ceiling is INFO; the filter below decides.
        .with_max_level(tracing::level_filters::LevelFilter::TRACE)
        .with_writer(|| QueuedLine(Vec::new()))
        // Its own error reports go to stderr with eprintln!, which panics on EPIPE.
        .log_internal_errors(false)
        .event_format(Format { json })
        .finish()
        .with(filter)
        .init();
}

/// One formatted event, queued as a whole when the formatter is done with it.
struct QueuedLine(Vec<u8>);

impl Write for QueuedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            enqueue(std::mem::take(&mut self.0));
        }
    }
}

/// Text logs carry identities and keys that any client of the store can write: control
/// characters are shown escaped so that they cannot move the cursor, retitle the terminal or
/// forge a line.
fn escape(text: &str) -> String {
    crate::escape::escape_str(text)
}

struct Format {
    json: bool,
}

impl<S, N> FormatEvent<S, N> for Format
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        writer.write_str(&render(
            self.json,
            event.metadata().level().as_str(),
            fields,
        ))
    }
}
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(&'static str, Value)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.others.push((field.name(), value.into()));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.others.push((field.name(), value.into()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.others.push((field.name(), value.into()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.others.push((field.name(), value.into()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.others
                .push((field.name(), format!("{value:?}").into()));
        }
    }
}

/// Log lines dropped so far because stderr did not drain (for the metrics).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}
