//! `--metrics-file PATH`: the metrics plus this run's outcome, in the Prometheus text format that
//! node_exporter's textfile collector reads, rewritten on every change of state and at exit.
//!
//! Every write goes to a new temporary file in the same directory (`.NAME.RANDOM.tmp`, created
//! exclusively; the textfile collector ignores it: it reads `*.prom`) and is renamed over PATH,
//! so a reader sees the old file or the new one, never part of one. Something other than a
//! regular file at PATH (a planted link, a FIFO, a device) is never followed, read or replaced:
//! a warning, and the job runs without the file. Writing is done by a thread of its own: the
//! runtime thread only encodes the text (from memory) and hands it over, so a slow or hung disk
//! can delay nothing but the file. The first write happens before campaigning (a PATH that
//! cannot be written is exit 125); the last one at exit, waited for at most [`FINAL_WRITE_WAIT`].
//!
//! `leader_exec_last_success_timestamp_seconds` is carried over from the file an earlier run
//! left, so a run that stood by (or failed) keeps the time of the last success on this host.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::exit::Failure;
use crate::telemetry::metrics::Metrics;

/// How long leader-exec waits at exit for the last write.
pub const FINAL_WRITE_WAIT: Duration = Duration::from_secs(2);

const LAST_SUCCESS: &str = "leader_exec_last_success_timestamp_seconds";

struct MetricsFile {
    metrics: &'static Metrics,
    registry: Registry,
    outcome: Arc<Outcome>,
    writer: Arc<Writer>,
}

static FILE: OnceLock<MetricsFile> = OnceLock::new();
static CHANGED: LazyLock<tokio::sync::Notify> = LazyLock::new(tokio::sync::Notify::new);

/// This run's outcome; f64 values as bits, `NONE` while unknown.
#[derive(Debug)]
struct Outcome {
    start: AtomicU64,
    end: AtomicU64,
    exit_code: AtomicI64,
    last_success: AtomicU64,
    led: AtomicU64,
    token: AtomicI64,
}

const NONE: u64 = u64::MAX;

/// Hands the newest text to the writer thread.
struct Writer {
    slot: Mutex<Slot>,
    wake: Condvar,
}

#[derive(Default)]
struct Slot {
    pending: Option<String>,
    submitted: u64,
    written: u64,
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// At most this much of an earlier file is read back (ours are a few KiB).
const READ_LIMIT: u64 = 64 * 1024;

/// Reads `leader_exec_last_success_timestamp_seconds` from the file an earlier run left.
///
/// Whatever sits at PATH may have been planted by anyone who can write its directory: it is
/// opened without following a symbolic link and without blocking (a FIFO would otherwise hold
/// leader-exec before it campaigns), read only if it is a regular file, and only its first
/// [`READ_LIMIT`] bytes (`/dev/zero` has no end). Anything else reads as "no earlier success".
fn previous_success(path: &Path) -> Option<f64> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    // Not even opened when it is plainly not a regular file (opening some devices acts); the
    // check after opening is the one that counts.
    if unexpected_at(path).is_some() {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags::O_NOFOLLOW | libc_flags::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(READ_LIMIT).read_to_end(&mut bytes).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|line| line.starts_with(LAST_SUCCESS))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .find(|value| value.is_finite() && *value >= 0.0)
}

/// The open(2) flags std does not name.
mod libc_flags {
    pub const O_NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits();
    pub const O_NONBLOCK: i32 = nix::fcntl::OFlag::O_NONBLOCK.bits();
}

/// Why a write did not happen.
#[derive(Debug)]
enum WriteError {
    /// Something other than a regular file sits at PATH (a symbolic link, a directory, a FIFO,
    /// a device, a socket): it is left alone and the write skipped, with a warning.
    Unexpected(&'static str),
    Io(std::io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Unexpected(kind) => {
                write!(
                    f,
                    "{kind} sits there instead of a regular file; not written"
                )
            }
            WriteError::Io(e) => e.fmt(f),
        }
    }
}

impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> WriteError {
        WriteError::Io(e)
    }
}

/// What sits at `path`, when it is not a regular file we may replace.
fn unexpected_at(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(path).ok()?.file_type();
    Some(if kind.is_file() {
        return None;
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "something"
    })
}

/// An unpredictable 64-bit number without a dependency: std seeds every `RandomState` from the
/// operating system's random source.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Writes `text` to a new temporary file next to `path` and renames it over `path`.
///
/// The directory may be writable by others (node_exporter's textfile directory often is), and
/// this may run as root: the temporary file has a random name (`.NAME.RANDOM.tmp`, which the
/// textfile collector ignores) and is created exclusively (`O_CREAT|O_EXCL`: fails on anything
/// already there, a symbolic link included, so no planted link is ever followed), mode 0644.
/// rename(2) replaces the directory entry at PATH and never follows a link there; still,
/// something other than a regular file at PATH is left alone ([`WriteError::Unexpected`]).
/// The directory's own path is the operator's choice and is used as given (a link to it is
/// followed; whoever can swap a component of it could also change the flag). Whoever can write
/// the directory can always replace PATH or our temporary file's entry with their own (a link,
/// say, for the collector to read); what they cannot do is make leader-exec write, create or
/// truncate anything but its own new file.
fn write_atomically(path: &Path, text: &str) -> Result<(), WriteError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    if let Some(kind) = unexpected_at(path) {
        return Err(WriteError::Unexpected(kind));
    }
    let mut attempt = 0;
    let (temp, mut file) = loop {
        let temp_name = format!(".{}.{:016x}.tmp", name.to_string_lossy(), random_u64());
        let temp = match dir {
            Some(dir) => dir.join(temp_name),
            None => PathBuf::from(temp_name),
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc_flags::O_NOFOLLOW)
            .mode(0o644)
            .open(&temp)
        {
            Ok(file) => break (temp, file),
            // A name taken (planted, or a collision): another random name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => {
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let result = (|| {
        // 0644 whatever the umask: node_exporter usually runs as another user.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        file.write_all(text.as_bytes())?;
        file.sync_data()?;
        if let Some(kind) = unexpected_at(path) {
            return Err(WriteError::Unexpected(kind));
        }
        std::fs::rename(&temp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Warns once per run that PATH holds something we leave alone.
fn warn_unexpected(path: &Path, error: &WriteError) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            event = "metrics-file-skipped",
            path = %crate::escape::escape_str(&path.to_string_lossy()),
            "--metrics-file: {error}; the command runs, the file is not written"
        );
    }
}

/// Sets up the file and writes it once: an unwritable PATH is a usage error (exit 125).
/// Call after the supervisor's fork (it starts a thread).
pub fn init(path: PathBuf, metrics: &'static Metrics) -> Result<(), Failure> {
    let outcome = Arc::new(Outcome {
        start: AtomicU64::new(unix_seconds(metrics.started_at).to_bits()),
        end: AtomicU64::new(NONE),
        exit_code: AtomicI64::new(-1),
        last_success: AtomicU64::new(previous_success(&path).unwrap_or(0.0).to_bits()),
        led: AtomicU64::new(0),
        token: AtomicI64::new(0),
    });
    let mut registry = metrics.sibling_registry();
    registry.register_collector(Box::new(OutcomeCollector(outcome.clone())));
    let file = MetricsFile {
        metrics,
        registry,
        outcome,
        writer: Arc::new(Writer {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
        }),
    };
    match write_atomically(&path, &file.render()) {
        Ok(()) => {}
        // Not ours to replace: the job still runs.
        Err(e @ WriteError::Unexpected(_)) => warn_unexpected(&path, &e),
        Err(e) => {
            return Err(Failure::usage(format!(
                "--metrics-file {}: {e}",
                path.display()
            )));
        }
    }
    let writer = file.writer.clone();
    std::thread::Builder::new()
        .name("metrics-file".into())
        .stack_size(128 * 1024)
        .spawn(move || write_loop(&path, &writer))
        .map_err(|e| Failure::usage(format!("--metrics-file: cannot start its writer: {e}")))?;
    let _ = FILE.set(file);
    crate::telemetry::metrics::on_change(|| CHANGED.notify_one());
    Ok(())
}

/// Rewrites the file after every change of state, from a task of the current runtime (never from
/// the state machine itself).
pub fn spawn_task() {
    if FILE.get().is_none() {
        return;
    }
    tokio::spawn(async {
        loop {
            CHANGED.notified().await;
            if let Some(file) = FILE.get() {
                file.submit(file.render());
            }
        }
    });
}

/// The run is over with `code`: writes the outcome, waiting at most [`FINAL_WRITE_WAIT`].
pub fn finish(code: u8) {
    let Some(file) = FILE.get() else { return };
    let now = SystemTime::now();
    let outcome = &file.outcome;
    outcome
        .end
        .store(unix_seconds(now).to_bits(), Ordering::Relaxed);
    outcome.exit_code.store(i64::from(code), Ordering::Relaxed);
    if code == 0 && file.metrics.led_once() {
        outcome
            .last_success
            .store(unix_seconds(now).to_bits(), Ordering::Relaxed);
    }
    let generation = file.submit(file.render());
    let writer = &file.writer;
    let Ok(slot) = writer.slot.lock() else { return };
    let _ = writer
        .wake
        .wait_timeout_while(slot, FINAL_WRITE_WAIT, |slot| slot.written < generation);
}

impl MetricsFile {
    fn render(&self) -> String {
        self.outcome
            .led
            .store(u64::from(self.metrics.led_once()), Ordering::Relaxed);
        self.outcome
            .token
            .store(self.metrics.token(), Ordering::Relaxed);
        self.metrics.encode_with(&self.registry)
    }

    /// Queues `text` (replacing any text not yet written); returns its generation.
    fn submit(&self, text: String) -> u64 {
        let Ok(mut slot) = self.writer.slot.lock() else {
            return 0;
        };
        slot.pending = Some(text);
        slot.submitted += 1;
        let generation = slot.submitted;
        drop(slot);
        self.writer.wake.notify_all();
        generation
    }
}

fn write_loop(path: &Path, writer: &Writer) {
    loop {
        let (text, generation) = {
            let Ok(slot) = writer.slot.lock() else { return };
            let Ok(mut slot) = writer.wake.wait_while(slot, |s| s.pending.is_none()) else {
                return;
            };
            (slot.pending.take().unwrap_or_default(), slot.submitted)
        };
        match write_atomically(path, &text) {
            Ok(()) => {}
            Err(e @ WriteError::Unexpected(_)) => warn_unexpected(path, &e),
            Err(e) => {
                tracing::warn!(event = "metrics-file-failed", error = %e, path = %path.display(), "could not write the metrics file")
            }
        }
        if let Ok(mut slot) = writer.slot.lock() {
            slot.written = generation;
        }
        writer.wake.notify_all();
    }
}

#[derive(Debug)]
struct OutcomeCollector(Arc<Outcome>);

impl Collector for OutcomeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let outcome = &self.0;
        let mut gauge = |name: &str, help: &str, value: f64| {
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)
        };
        let start = f64::from_bits(outcome.start.load(Ordering::Relaxed));
        gauge(
            "run_start_timestamp_seconds",
            "When this run of leader-exec started (Unix time)",
            start,
        )?;
        let end = outcome.end.load(Ordering::Relaxed);
        if end != NONE {
            let end = f64::from_bits(end);
            gauge(
                "run_end_timestamp_seconds",
                "When this run of leader-exec ended (Unix time)",
                end,
            )?;
            gauge(
                "run_duration_seconds",
                "How long this run of leader-exec took",
                (end - start).max(0.0),
            )?;
            gauge(
                "run_exit_code",
                "leader-exec's exit status for this run",
                outcome.exit_code.load(Ordering::Relaxed) as f64,
            )?;
        }
        gauge(
            "run_led",
            "1 if this run led the lease (ran the command), 0 if it stood by",
            outcome.led.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            "run_token",
            "The fencing token this run led with; 0 if it never led",
            outcome.token.load(Ordering::Relaxed) as f64,
        )?;
        gauge(
            "last_success_timestamp_seconds",
            "When a run on this host last led and exited 0 (Unix time); 0 if none has yet",
            f64::from_bits(outcome.last_success.load(Ordering::Relaxed)),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_success_is_read_back_and_writes_replace_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.prom");
        assert_eq!(previous_success(&path), None);
        write_atomically(
            &path,
            "# HELP x y\nleader_exec_last_success_timestamp_seconds{lease=\"a b\"} 1700000000.5\n",
        )
        .unwrap();
        assert_eq!(previous_success(&path), Some(1_700_000_000.5));
        write_atomically(&path, "other\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "other\n");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(matches!(
            write_atomically(&dir.path().join("missing/job.prom"), "x"),
            Err(WriteError::Io(_))
        ));
    }

    #[test]
    fn nothing_but_a_regular_file_is_read_or_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "secret\n").unwrap();
        let path = dir.path().join("job.prom");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        assert!(matches!(
            write_atomically(&path, "x\n"),
            Err(WriteError::Unexpected("a symbolic link"))
        ));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
        // Neither read through the link nor left a temporary file.
        assert_eq!(previous_success(&path), None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Would block forever without O_NONBLOCK and the file-type check.
        assert_eq!(previous_success(&path), None);
        assert!(matches!(
            write_atomically(&path, "x\n"),
            Err(WriteError::Unexpected("a FIFO"))
        ));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert_eq!(previous_success(&path), None);
    }

    #[test]
    fn temporary_names_are_unpredictable() {
        assert_ne!(random_u64(), random_u64());
    }
}
