//! The local surfaces, attacked from the host itself: a textfile directory others can write
//! (planted links, FIFOs, devices at the metrics path), passwords in endpoint URLs (never shown,
//! never handed to the command), and an HTTP client that tries to lock the probes out.
//! `run-job` and install.sh against files others could have written are `security_files.rs`.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::*;

/// A 0600 file with `text`, standing for something a root cron job must never overwrite.
pub(crate) fn victim(scratch: &Scratch, name: &str, text: &str) -> std::path::PathBuf {
    let path = scratch.path(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

pub(crate) fn assert_untouched(path: &std::path::Path, text: &str) {
    assert_eq!(std::fs::read_to_string(path).unwrap(), text, "{path:?}");
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{path:?}");
}

fn warnings(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.contains("--metrics-file:"))
        .count()
}

#[test]
fn planted_links_in_the_textfile_directory_are_never_followed() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let dir = scratch.path("textfile");
    std::fs::create_dir(&dir).unwrap();

    // A link planted at the temporary name an earlier version used (`.NAME.PID.tmp`): the shell
    // learns its pid ($$), plants the link and execs leader-exec, which keeps that pid.
    let first = victim(&scratch, "first", "do not touch 1\n");
    let file = dir.join("job.prom");
    let mut args = lease_args(&endpoint, "planted");
    let file_arg = path_str(&file);
    args.extend(["--metrics-file", &file_arg]);
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ln -s '{}' '{}/.job.prom.'$$'.tmp' && exec \"$@\"",
            first.display(),
            dir.display()
        ))
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_leader-exec"))
        .args(&args)
        .arg("--")
        .args(scratch.job("a", "true"));
    let mut a = Instance::start_command(&mut command);
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    assert!(scratch.wait_record("end", "a", Duration::ZERO).is_some());
    assert_untouched(&first, "do not touch 1\n");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("leader_exec_run_exit_code{"), "{text}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );

    // A link planted at the target itself: left alone, one warning, the job still runs.
    let second = victim(&scratch, "second", "do not touch 2\n");
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&second, &file).unwrap();
    let mut b = Instance::start(&args, &scratch.job("b", "true"));
    assert_eq!(b.wait(Duration::from_secs(20)), Some(0), "{}", b.stderr());
    assert!(scratch.wait_record("end", "b", Duration::ZERO).is_some());
    assert_untouched(&second, "do not touch 2\n");
    assert_eq!(std::fs::read_link(&file).unwrap(), second);
    assert_eq!(warnings(&b.stderr()), 1, "{}", b.stderr());
    // Nothing but the link and the first run's leftover link is in the directory.
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[1], "job.prom", "{names:?}");
}

#[test]
fn a_fifo_or_a_device_at_the_metrics_path_does_not_hold_the_command() {
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let file = scratch.path("job.prom");
    let file_arg = path_str(&file);
    let mut args = lease_args(&endpoint, "fifo");
    args.extend(["--metrics-file", &file_arg]);

    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let started = Instant::now();
    let mut a = Instance::start(&args, &scratch.job("a", "true"));
    // Promptly: an earlier version blocked opening the FIFO before it campaigned.
    assert!(
        scratch
            .wait_record("start", "a", Duration::from_secs(10))
            .is_some(),
        "the command did not run within 10 s: {}",
        a.stderr()
    );
    assert_eq!(a.wait(Duration::from_secs(20)), Some(0), "{}", a.stderr());
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(warnings(&a.stderr()), 1, "{}", a.stderr());
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    // /dev/zero (through a link) reads without end: never read, never replaced.
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &file).unwrap();
    let mut b = Instance::start(&args, &scratch.job("b", "true"));
    assert!(
        scratch
            .wait_record("start", "b", Duration::from_secs(10))
            .is_some(),
        "the command did not run within 10 s: {}",
        b.stderr()
    );
    assert_eq!(b.wait(Duration::from_secs(20)), Some(0), "{}", b.stderr());
    assert_eq!(warnings(&b.stderr()), 1, "{}", b.stderr());
    assert_eq!(
        std::fs::read_link(&file).unwrap(),
        std::path::Path::new("/dev/zero")
    );

    // The device itself, where mknod is allowed (root).
    std::fs::remove_file(&file).unwrap();
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    if mknod(
        &file,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o644),
        makedev(1, 5),
    )
    .is_ok()
    {
        let mut c = Instance::start(&args, &scratch.job("c", "true"));
        assert!(
            scratch
                .wait_record("start", "c", Duration::from_secs(10))
                .is_some(),
            "the command did not run within 10 s: {}",
            c.stderr()
        );
        assert_eq!(c.wait(Duration::from_secs(20)), Some(0), "{}", c.stderr());
        assert_eq!(warnings(&c.stderr()), 1, "{}", c.stderr());
        assert!(
            std::fs::symlink_metadata(&file)
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }
}

/// Every form a password can take in `--endpoints` (and `LEADER_EXEC_ENDPOINTS`), against a port
/// nothing listens on: the run form (with `-v` logs and a metrics file), `status --json` and
/// `check` fail with 125, and nothing they print or write holds the password, whether the
/// endpoint is refused as written (no port, not an endpoint) or accepted and unreachable.
#[test]
fn a_password_in_an_endpoint_is_never_shown() {
    let scratch = Scratch::new();
    let port = free_port().to_string();
    let secret = "hunter2Secret";
    let forms = [
        format!("postgres://jobs:{secret}@127.0.0.1:{port}/ops"),
        format!("postgresql://jobs:{secret}@127.0.0.1:{port}/ops?sslmode=disable"),
        format!("postgres://127.0.0.1:{port}/ops?password={secret}"),
        format!(
            "postgres://127.0.0.1:{port}/ops?sslmode=disable&password={secret}&connect_timeout=1"
        ),
        format!("postgres://127.0.0.1:{port}/ops?pass%77ord={secret}"),
        format!("postgres://127.0.0.1:{port}/ops?PassWord={secret}"),
        format!("postgres://jobs:{secret}@127.0.0.1:{port}/ops?password={secret}"),
        format!("http://127.0.0.1:{port}/?password={secret}"),
        format!("http://root:{secret}@127.0.0.1:{port}"),
        format!("root:{secret}@127.0.0.1:{port}"),
        format!("host=127.0.0.1 port={port} password={secret}"),
        format!("zk://digest:{secret}@127.0.0.1:{port}/jobs"),
        format!("zk://127.0.0.1:{port}?password={secret}"),
        format!("zk://127.0.0.1:{port}/jobs?password={secret}"),
        // libpq's key=value form with a password holding '?' (no URL for that), quoted too.
        format!("host=127.0.0.1 port={port} password=a?{secret} dbname=ops"),
        format!("host=127.0.0.1 port={port} password='a b?{secret}'"),
        // An etcd endpoint without a port ("has no port"), with and without a scheme.
        format!("http://127.0.0.1/?password={secret}"),
        format!("https://127.0.0.1?pwd={secret}"),
        format!("127.0.0.1/?password={secret}"),
    ];
    // One thread per form: each mostly waits out --connect-timeout.
    let threads: Vec<_> = forms
        .into_iter()
        .enumerate()
        .map(|(i, form)| {
            let metrics = scratch.path(&format!("job{i}.prom"));
            std::thread::spawn(move || {
                let form = &form;
                let metrics_arg = path_str(&metrics);
                let run = vec![
                    "-v",
                    "--lease",
                    "pw",
                    "--connect-timeout",
                    "1s",
                    "--metrics-file",
                    &metrics_arg,
                    "--",
                    "true",
                ];
                let status = vec![
                    "status",
                    "--lease",
                    "pw",
                    "--json",
                    "--connect-timeout",
                    "1s",
                ];
                let check = vec![
                    "check",
                    "--lease",
                    "pw",
                    "--token",
                    "1",
                    "--connect-timeout",
                    "1s",
                ];
                let runs = [
                    ("run", run.clone(), false),
                    ("run", run, true),
                    ("status --json", status, false),
                    ("check", check, true),
                ];
                for (what, args, via_env) in runs {
                    let _ = std::fs::remove_file(&metrics);
                    let mut command = leader_exec();
                    if via_env {
                        command.env("LEADER_EXEC_ENDPOINTS", form);
                    } else {
                        command.args(["--endpoints", form]);
                    }
                    let (code, stdout, stderr) = outcome(command.args(&args), &metrics);
                    // Refused, or unreachable at start: 125 for the run form, status and check.
                    assert_eq!(code, Some(125), "{what} {form}: {stderr}");
                    assert!(
                        !stdout.contains(secret) && !stderr.contains(secret),
                        "{what} {form} (env: {via_env}) shows the password:\n{stdout}\n{stderr}"
                    );
                    assert!(!stderr.trim().is_empty(), "{what} {form}: says nothing");
                    // Accepted on the command line: a warning that `ps` shows it.
                    if what == "run"
                        && !via_env
                        && form.starts_with("postgres")
                        && !stderr.contains("not a valid PostgreSQL URL")
                    {
                        assert!(stderr.contains("(ps, /proc)"), "{form}: {stderr}");
                    }
                    if let Ok(text) = std::fs::read_to_string(&metrics) {
                        assert!(!text.contains(secret), "{what} {form}: in the metrics file");
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Runs `command` to its end (at most 30 s): exit code, stdout, stderr. Output goes to files
/// beside `near`.
pub(crate) fn outcome(
    command: &mut Command,
    near: &std::path::Path,
) -> (Option<i32>, String, String) {
    let out = near.with_extension("out");
    let err = near.with_extension("err");
    let mut child = KillOnDrop(
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut code = None;
    let finished = wait_for(Duration::from_secs(30), || {
        code = child.0.try_wait().unwrap().map(|s| s.code());
        code.is_some()
    });
    assert!(finished, "{command:?}: still running after 30 s");
    (
        code.flatten(),
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&err).unwrap_or_default(),
    )
}

/// The command sees `LEADER_EXEC_ENDPOINTS` (it may run `leader-exec check`) without the
/// password it held, as it never sees `LEADER_EXEC_PASSWORD`. (The test server trusts every
/// connection, so the passwords given are accepted and ignored.)
#[test]
fn the_command_sees_no_password_of_the_endpoints() {
    let postgres = Postgres::start();
    let scratch = Scratch::new();
    let secret = "hunter2Secret";
    let port = postgres.port;
    let environ = scratch.path("environ");
    let record = format!("cat /proc/self/environ > '{}'", environ.display());
    for (i, endpoints) in [
        format!("postgres://postgres:{secret}@127.0.0.1:{port}/postgres"),
        format!("postgres://postgres@127.0.0.1:{port}/postgres?password={secret}"),
    ]
    .iter()
    .enumerate()
    {
        for via in ["LEADER_EXEC_ENDPOINTS", "ETCDCTL_ENDPOINTS"] {
            let _ = std::fs::remove_file(&environ);
            let mut command = leader_exec();
            command
                .env(via, endpoints)
                .env("LEADER_EXEC_PASSWORD", secret)
                .args(["--lease", &format!("env{i}"), "--", "sh", "-c", &record]);
            let (code, _, stderr) = outcome(&mut command, &scratch.path("run"));
            assert_eq!(code, Some(0), "{stderr}");
            let environ = std::fs::read(&environ).unwrap();
            let environ = String::from_utf8_lossy(&environ);
            let vars: Vec<&str> = environ.split('\0').collect();
            assert!(
                !environ.contains(secret),
                "the command saw the password: {vars:?}"
            );
            let shown = format!("{via}=postgres://postgres@127.0.0.1:{port}/postgres");
            assert!(vars.contains(&shown.as_str()), "{shown} not in {vars:?}");
            assert!(vars.iter().any(|v| v.starts_with("LEADER_TOKEN=")));
            assert!(!stderr.contains(secret), "{stderr}");
        }
    }
}

/// On an etcd with authentication, however leader-exec is given the password, the command's
/// environment does not hold it: `ETCDCTL_USER=NAME:PASS` reaches the command as
/// `ETCDCTL_USER=NAME`, `LEADER_EXEC_PASSWORD` not at all, and neither `--user NAME:PASS` nor a
/// `--password-file`'s contents are in it. Each run authenticates (exit 0), so the password was
/// used, and leader-exec's own output never shows it.
#[test]
fn the_command_sees_no_etcd_password() {
    let secret = "s3cretRootPw";
    let etcd = etcd_with_root_password(secret);
    let user = format!("root:{secret}");
    let scratch = Scratch::new();
    let environ = scratch.path("environ");
    let password_file = scratch.path("password");
    std::fs::write(&password_file, format!("{secret}\n")).unwrap();
    let record = format!("cat /proc/self/environ > '{}'", environ.display());
    let password_file = path_str(&password_file);
    // The environment given, the flags given, and the command's ETCDCTL_USER.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], Option<&'a str>);
    let cases: [Case; 4] = [
        (&[("ETCDCTL_USER", &user)], &[], Some("ETCDCTL_USER=root")),
        (
            &[("ETCDCTL_USER", "root"), ("LEADER_EXEC_PASSWORD", secret)],
            &[],
            Some("ETCDCTL_USER=root"),
        ),
        (
            &[],
            &["--user", "root", "--password-file", &password_file],
            None,
        ),
        (&[], &["--user", &user], None),
    ];
    for (i, (vars, args, expected)) in cases.into_iter().enumerate() {
        let _ = std::fs::remove_file(&environ);
        let mut command = leader_exec();
        command
            .env_remove("ETCDCTL_USER")
            .env_remove("LEADER_EXEC_PASSWORD")
            .envs(vars.iter().copied())
            .args([
                "--endpoints",
                &etcd.endpoint(),
                "--lease",
                &format!("env{i}"),
            ])
            .args(args)
            .args(["--", "sh", "-c", &record]);
        let (code, stdout, stderr) = outcome(&mut command, &scratch.path("run"));
        assert_eq!(code, Some(0), "{vars:?} {args:?}: {stderr}");
        let environ = std::fs::read(&environ).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        let seen: Vec<&str> = environ.split('\0').collect();
        assert!(
            !environ.contains(secret),
            "{vars:?} {args:?}: the command saw the password: {seen:?}"
        );
        assert!(!seen.iter().any(|v| v.starts_with("LEADER_EXEC_PASSWORD=")));
        if let Some(expected) = expected {
            assert!(seen.contains(&expected), "{expected} not in {seen:?}");
        }
        assert!(seen.iter().any(|v| v.starts_with("LEADER_TOKEN=")));
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stdout}{stderr}"
        );
    }
}

/// An etcd with authentication on, whose user `root` has the password `secret`.
fn etcd_with_root_password(secret: &str) -> Etcd {
    let etcd = Etcd::start();
    let user = format!("root:{secret}");
    for args in [
        &["user", "add", user.as_str()][..],
        &["user", "grant-role", "root", "root"][..],
        &["auth", "enable"][..],
    ] {
        let out = etcd.ctl(args);
        assert!(out.status.success(), "etcdctl {args:?}: {out:?}");
    }
    etcd
}

/// Run as `nobody`, the command (`nobody` too) cannot read the credentials leader-exec was given
/// in its environment through /proc of its parent (the supervisor, a fork of leader-exec that
/// holds the same environment) or of its grandparent (leader-exec): both are non-dumpable, so
/// their `environ` and `mem` are root's. And root, who still may, finds no secret in either
/// `environ` either: leader-exec overwrote them once read.
#[test]
fn the_command_cannot_read_leader_exec_s_credentials_through_proc() {
    let secret = "pr0cSecretPw";
    let etcd = etcd_with_root_password(secret);
    let scratch = Scratch::new();
    let user = format!("root:{secret}");
    // What the command can read of its parent and grandparent, then it waits for a line on
    // its stdin (the test looks at both processes meanwhile).
    let probe = r#"gp=$(cut -d" " -f4 /proc/$PPID/stat)
        for p in $PPID $gp; do
          echo "process $p $(cat /proc/$p/comm)"
          for f in environ cmdline; do
            if v=$(tr "\0" " " < /proc/$p/$f); then echo "read $p $f $v"; else echo "refused $p $f"; fi
          done
          if true < /proc/$p/mem; then echo "read $p mem"; else echo "refused $p mem"; fi
        done
        echo probed
        read line"#;
    let cases: [&[(&str, &str)]; 2] = [
        &[("ETCDCTL_USER", &user)],
        &[("ETCDCTL_USER", "root"), ("LEADER_EXEC_PASSWORD", secret)],
    ];
    for (i, vars) in cases.into_iter().enumerate() {
        let out = scratch.path(&format!("probe{i}.out"));
        let err = scratch.path(&format!("probe{i}.err"));
        let mut child = KillOnDrop(
            leader_exec_as_nobody()
                .envs(vars.iter().copied())
                .args(["--endpoints", &etcd.endpoint()])
                .args(["--lease", &format!("proc{i}"), "--", "sh", "-c", probe])
                .stdin(std::process::Stdio::piped())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .unwrap(),
        );
        let read = || std::fs::read_to_string(&out).unwrap_or_default();
        assert!(
            wait_for(Duration::from_secs(20), || read().contains("probed\n")),
            "{vars:?}: the command did not probe: {}{}",
            read(),
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        let probed = read();
        let processes: Vec<(i32, &str)> = probed
            .lines()
            .filter_map(|l| l.strip_prefix("process "))
            .filter_map(|l| {
                let (pid, comm) = l.split_once(' ')?;
                Some((pid.parse().ok()?, comm))
            })
            .collect();
        let comms: Vec<&str> = processes.iter().map(|&(_, comm)| comm).collect();
        assert_eq!(comms, ["lx-supervisor", "leader-exec"], "{probed}");
        for &(pid, _) in &processes {
            for file in ["environ", "mem"] {
                let refused = format!("refused {pid} {file}");
                assert!(probed.lines().any(|l| l == refused), "{vars:?}: {probed}");
            }
            // Root reads both environments: the secret is no longer in them.
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
            assert!(
                !String::from_utf8_lossy(&environ).contains(secret),
                "{vars:?}: {pid}'s environment holds the secret"
            );
        }
        assert!(!probed.contains(secret), "{vars:?}: {probed}");
        use std::io::Write;
        let _ = child.0.stdin.take().unwrap().write_all(b"done\n");
        let finished = wait_for(Duration::from_secs(10), || {
            child.0.try_wait().unwrap().is_some()
        });
        assert!(finished, "{vars:?}: leader-exec did not exit");
        assert_eq!(
            child.0.wait().unwrap().code(),
            Some(0),
            "{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
    }
}

/// One GET /healthz on a new connection: answered 200 within `limit`?
fn probe(port: u16, limit: Duration) -> bool {
    use std::io::{Read, Write};
    let started = Instant::now();
    let Ok(mut stream) =
        std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), limit)
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(limit));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.1 200") && started.elapsed() <= limit
}

/// One client holds every slot of `--http` — keep-alive connections it uses slowly, sending a
/// request head a byte at a time — and floods new idle connections, while a probe asks
/// `/healthz` on a new connection every 100 ms: at least 95 % of the probes are answered
/// within 1 s.
#[test]
fn one_client_cannot_lock_the_probes_out() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = lease_args(&endpoint, "probes");
    args.extend(["--http", &listen]);
    let mut leader = Instance::start(&args, &scratch.job("a", "sleep 60"));
    scratch
        .wait_record("start", "a", Duration::from_secs(15))
        .expect("the command started");
    assert!(
        wait_for(Duration::from_secs(5), || probe(
            port,
            Duration::from_secs(1)
        )),
        "/healthz never answered: {}",
        leader.stderr()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let connect = move || {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .ok()?;
        Some(stream)
    };
    // 16 slow users: one whole request, then the next head a byte every 200 ms; reconnect
    // when closed.
    let slow: Vec<_> = (0..16)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Some(mut stream) = connect() else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
                    let _ = stream.read(&mut [0; 65536]);
                    for byte in b"GET /metrics HTTP/1.1\r\nHost: slow\r\n".iter().cycle() {
                        if stop.load(Ordering::SeqCst)
                            || stream.write_all(&[*byte]).is_err()
                            || matches!(stream.read(&mut [0; 1024]), Ok(0))
                        {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    // A flood of idle connections, 50 a second, up to 200 held at once.
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    held.push_back(stream);
                }
                if held.len() > 200 {
                    held.pop_front();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Let the attack take every slot first.
    std::thread::sleep(Duration::from_secs(2));
    let mut answered = 0;
    let total = 100;
    for _ in 0..total {
        let started = Instant::now();
        if probe(port, Duration::from_secs(1)) {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(100).saturating_sub(started.elapsed()));
    }
    stop.store(true, Ordering::SeqCst);
    eprintln!("{answered} of {total} probes answered within 1 s");
    for thread in slow {
        thread.join().unwrap();
    }
    flood.join().unwrap();
    assert!(
        answered * 100 >= total * 95,
        "{answered} of {total} probes answered within 1 s"
    );
    // The leader renewed throughout (a 1.5 s renew deadline): still running its first command.
    assert!(leader.running(), "{}", leader.stderr());
    assert_eq!(
        scratch
            .history()
            .iter()
            .filter(|r| r.kind == "start")
            .count(),
        1
    );
}

/// An idle kept-alive connection, and one that sends its request head a byte every 200 ms, are
/// closed once the 3 s header timeout has passed: neither holds a slot for long.
#[test]
fn idle_and_byte_by_byte_connections_are_closed_after_the_header_timeout() {
    use std::io::{Read, Write};
    let etcd = Etcd::start();
    let scratch = Scratch::new();
    let endpoint = etcd.endpoint();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = lease_args(&endpoint, "idle");
    args.extend(["--http", &listen]);
    let leader = Instance::start(&args, &scratch.job("a", "sleep 60"));
    assert!(
        wait_for(Duration::from_secs(15), || probe(
            port,
            Duration::from_secs(1)
        )),
        "/healthz never answered: {}",
        leader.stderr()
    );
    let closed_after = |slow: bool| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = [0u8; 4096];
        assert!(stream.read(&mut answer).unwrap() > 0);
        let started = Instant::now();
        let mut head = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n".iter().cycle();
        while started.elapsed() < Duration::from_secs(10) {
            if slow && stream.write_all(&[*head.next().unwrap()]).is_err() {
                break;
            }
            match stream.read(&mut answer) {
                Ok(0) => break,
                Ok(_) => {}
                // The 200 ms read timeout: still open.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        started.elapsed()
    };
    for slow in [false, true] {
        let elapsed = closed_after(slow);
        eprintln!("slow: {slow}: closed after {elapsed:?}");
        assert!(
            elapsed < Duration::from_millis(4500),
            "slow: {slow}: still open after {elapsed:?}"
        );
    }
}
