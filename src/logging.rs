//! Logs go to stderr only: stdout belongs to the command.
//!
//! Text: `TIME leader-exec LEVEL message key=value…`, one line per event.
//! JSON: one object per line with stable fields: `time` (RFC 3339, UTC), `level`, `lease`,
//! `identity`, `event` (a machine-readable name such as `elected` or `stepping-down`), `message`,
//! and the event's own fields (`token`, `pid`, `signal`, `reason`, …).
//!
//! By default only warnings and errors are printed, as befits a wrapper that runs from cron (which
//! mails any output): `-v` adds the lifecycle (campaigning, elected, exited), `-vv` debug.

use std::fmt;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::{LogArgs, LogFormat};

/// The lease and identity every line carries, known once the settings are validated.
static CONTEXT: OnceLock<(String, String)> = OnceLock::new();

pub fn set_context(lease: &str, identity: &str) {
    let _ = CONTEXT.set((lease.to_owned(), identity.to_owned()));
}

/// Sets up the global logger. `LEADER_EXEC_LOG` (RUST_LOG syntax) overrides -v/-q.
pub fn init(args: &LogArgs) {
    let level = match (args.verbose, args.quiet) {
        (0, 0) => "warn",
        (1, _) => "info",
        (2, _) => "debug",
        (v, _) if v > 2 => "trace",
        (_, 1) => "error",
        _ => "off",
    };
    let filter = std::env::var("LEADER_EXEC_LOG")
        .ok()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("leader_exec={level}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(Format {
            json: args.log_format == LogFormat::Json,
        })
        .init();
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
        let time = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        let level = event.metadata().level().as_str();
        let mut fields = Fields::default();
        event.record(&mut fields);
        if self.json {
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
            writeln!(writer, "{}", Value::Object(object))
        } else {
            write!(writer, "{time} leader-exec {level:>5} {}", fields.message)?;
            // The message already says what happened; `event` is for machines.
            for (name, value) in fields.others.into_iter().filter(|(n, _)| *n != "event") {
                match value {
                    Value::String(s) => write!(writer, " {name}={s}")?,
                    other => write!(writer, " {name}={other}")?,
                }
            }
            writeln!(writer)
        }
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
