//! The files root acts on, attacked from the host itself: `run-job` refusing a configuration file
//! others could have written or replaced, and install.sh's servers (`--with-postgres`,
//! `--with-mysql`) writing nothing through a link another user planted.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::harness::*;
use crate::security::{assert_untouched, outcome, victim};

/// `packaging/run-job CONF` runs CONF as root shell code: it refuses a file (or the target of a
/// link, or a directory holding either) that anyone but root could have changed, with one line
/// and exit 125, before running anything from it. (`LEADER_EXEC_BIN=env` stands in for
/// leader-exec: `env -- /bin/sh -c COMMAND` runs the command.)
#[test]
fn run_job_refuses_a_conf_others_could_have_written() {
    let scratch = Scratch::new();
    let run_job = concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/run-job");
    let marker = scratch.path("ran");
    let dir = scratch.path("conf.d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = dir.join("job.conf");
    let body = format!("touch '{}'\nLEADER_EXEC_COMMAND='true'\n", marker.display());
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let run = |conf: &std::path::Path| {
        let _ = std::fs::remove_file(&marker);
        let mut command = Command::new(run_job);
        command
            .arg(conf)
            .env("LEADER_EXEC_LEASE", "job")
            .env("LEADER_EXEC_BIN", "env");
        let (code, _, stderr) = outcome(&mut command, &scratch.path("run-job"));
        (code, stderr, marker.exists())
    };
    let refused = |conf: &std::path::Path, needle: &str| {
        let (code, stderr, ran) = run(conf);
        assert_eq!(code, Some(125), "{needle}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("run-job: "), "{stderr}");
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
        assert!(!ran, "{needle}: the conf was run: {stderr}");
    };

    std::fs::write(&conf, &body).unwrap();
    set_mode(&conf, 0o600);
    let (code, stderr, ran) = run(&conf);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(ran && stderr.is_empty(), "{stderr}");

    for mode in [0o620, 0o660, 0o602, 0o666] {
        set_mode(&conf, mode);
        refused(&conf, "writable by group or others");
    }

    // A link (from a safe directory) to a group-writable file elsewhere.
    let elsewhere = scratch.path("elsewhere.conf");
    std::fs::write(&elsewhere, &body).unwrap();
    set_mode(&elsewhere, 0o664);
    let link = dir.join("link.conf");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    refused(&link, "writable by group or others");

    // A safe file in a directory others can write to (they could replace it).
    set_mode(&conf, 0o600);
    set_mode(&dir, 0o777);
    refused(&conf, "directory");
    set_mode(&dir, 0o775);
    refused(&conf, "directory");
    set_mode(&dir, 0o755);

    // A file that belongs to someone else (only root can give a file away).
    // Running as root: the files it creates are root's.
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&conf).unwrap()) == 0 {
        use std::os::unix::fs::chown;
        chown(&conf, Some(65534), None).unwrap();
        refused(&conf, "belongs to uid 65534");
        chown(&conf, Some(0), None).unwrap();
        chown(&dir, Some(65534), None).unwrap();
        refused(&conf, "belongs to uid 65534");
        chown(&dir, Some(0), None).unwrap();
    }

    // A readable file holding a password runs, with a warning.
    std::fs::write(&conf, format!("{body}LEADER_EXEC_PASSWORD=x\n")).unwrap();
    set_mode(&conf, 0o644);
    let (code, stderr, ran) = run(&conf);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(ran && stderr.contains("0600"), "{stderr}");
}

/// `run-job CONF` with `LEADER_EXEC_BIN=env` (as above): exit code, stderr, and whether CONF's
/// code ran (it touches `marker`).
fn run_job(
    scratch: &Scratch,
    conf: &std::path::Path,
    marker: &std::path::Path,
) -> (Option<i32>, String, bool) {
    let _ = std::fs::remove_file(marker);
    let mut command = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/run-job"));
    command
        .arg(conf)
        .env("LEADER_EXEC_LEASE", "job")
        .env("LEADER_EXEC_BIN", "env");
    let (code, _, stderr) = outcome(&mut command, &scratch.path("run-job"));
    (code, stderr, marker.exists())
}

/// `run-job` walks CONF's path one component at a time: a symbolic link anyone but root could
/// replace — one that belongs to another user (in a sticky world-writable directory such as
/// /tmp, its owner may swap it at will), anywhere on the way, also as a directory or as the
/// second link of a chain — is refused with one line and 125 before anything from it runs. A
/// link, or a file, that belongs to root in such a directory is run.
#[test]
fn run_job_refuses_a_link_others_could_replace() {
    use std::os::unix::fs::{lchown, symlink};
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) != 0 {
        eprintln!("not root: links of another user cannot be made");
        return;
    }
    let scratch = Scratch::new();
    let marker = scratch.path("ran");
    let dir = scratch.path("conf.d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let conf = dir.join("job.conf");
    let body = format!("touch '{}'\nLEADER_EXEC_COMMAND='true'\n", marker.display());
    std::fs::write(&conf, &body).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A /tmp of its own: root's, world-writable and sticky.
    let tmp = scratch.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let nobody = 65534;
    let link = |name: &str, to: &std::path::Path, owner: u32| {
        let path = tmp.join(name);
        symlink(to, &path).unwrap();
        lchown(&path, Some(owner), Some(owner)).unwrap();
        path
    };

    let runs = |path: &std::path::Path| {
        let (code, stderr, ran) = run_job(&scratch, path, &marker);
        assert_eq!(code, Some(0), "{path:?}: {stderr}");
        assert!(ran && stderr.is_empty(), "{path:?}: {stderr}");
    };
    let refused = |path: &std::path::Path, needle: &str| {
        let (code, stderr, ran) = run_job(&scratch, path, &marker);
        assert_eq!(code, Some(125), "{path:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("run-job: "), "{stderr}");
        assert!(stderr.contains(needle), "{needle:?} not in {stderr}");
        assert!(!ran, "{path:?}: the conf was run: {stderr}");
    };

    // Root's link, and root's file, in the sticky directory: nobody else can replace them.
    runs(&link("root.conf", &conf, 0));
    let own = tmp.join("own.conf");
    std::fs::write(&own, &body).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o600)).unwrap();
    runs(&own);

    // Another user's link to root's safe file: its owner can point it elsewhere at any time.
    let theirs = link("theirs.conf", &conf, nobody);
    refused(&theirs, "belongs to uid 65534");
    // The same as a directory on the way.
    let theirs_dir = link("theirs.d", &dir, nobody);
    refused(&theirs_dir.join("job.conf"), "belongs to uid 65534");
    // Root's link to another user's link (a chain, relative).
    let chain = link("chain.conf", std::path::Path::new("theirs.conf"), 0);
    refused(&chain, "belongs to uid 65534");
    // Another user's directory holding root's link.
    let sub = tmp.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let in_sub = sub.join("job.conf");
    symlink(&conf, &in_sub).unwrap();
    std::os::unix::fs::chown(&sub, Some(nobody), Some(nobody)).unwrap();
    refused(&in_sub, "belongs to uid 65534");
    // A relative CONF through `..` is walked as well.
    let relative = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/run-job"))
        .current_dir(&dir)
        .arg("../tmp/theirs.conf")
        .env("LEADER_EXEC_LEASE", "job")
        .env("LEADER_EXEC_BIN", "env")
        .output()
        .unwrap();
    assert_eq!(relative.status.code(), Some(125), "{relative:?}");
    assert!(String::from_utf8_lossy(&relative.stderr).contains("belongs to uid 65534"));
    assert!(!marker.exists());
}

/// `install.sh --prefix PREFIX` with `args`, as root: the build is the test's own binary (a
/// `cargo` on PATH that builds nothing, and CARGO_TARGET_DIR holding the binary), the PostgreSQL
/// or MariaDB it starts on a free port. Dropped, it runs `install.sh --uninstall`, which stops
/// that server and removes its data.
struct Install {
    script: &'static str,
    prefix: std::path::PathBuf,
    env: Vec<(String, String)>,
}

impl Install {
    fn new(scratch: &Scratch) -> Install {
        let bin = scratch.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("cargo"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(bin.join("cargo"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let target = scratch.path("target");
        std::fs::create_dir_all(target.join("release")).unwrap();
        std::fs::copy(
            env!("CARGO_BIN_EXE_leader-exec"),
            target.join("release/leader-exec"),
        )
        .unwrap();
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
        Install {
            script: concat!(env!("CARGO_MANIFEST_DIR"), "/install.sh"),
            prefix: scratch.path("prefix"),
            env: vec![
                ("PATH".into(), path),
                ("CARGO_TARGET_DIR".into(), path_str(&target)),
                ("POSTGRES_PORT".into(), free_port().to_string()),
                ("MYSQL_PORT".into(), free_port().to_string()),
            ],
        }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.script)
            .arg("--prefix")
            .arg(&self.prefix)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        let _ = self.run(&["--uninstall"]);
    }
}

/// `install.sh FLAG` run as root writes nothing through a link in a directory the server's user
/// (`user`, or anyone else) owns: with its data directory's parent (`dir` under the prefix) left
/// by an earlier attempt and each of `logs` there a link to a file of root's, a parent of another
/// user's is refused, and a parent of the server's user is used with the links removed by that
/// user (the install succeeds: `then` is given the parent and the user's uid to check what was
/// made); root's file is untouched either way.
fn install_as_root_follows_no_link(
    flag: &str,
    user: &str,
    dir: &str,
    logs: &[&str],
    then: impl FnOnce(&std::path::Path, u32),
) {
    use std::os::unix::fs::{MetadataExt, chown, lchown, symlink};
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("not root: install.sh {flag} runs its server as root would not");
        return;
    }
    let uid = Command::new("id")
        .args(["-u", user])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or_else(|| panic!("Debian's {user} user"));
    let scratch = Scratch::new();
    // The server's user must reach the prefix.
    std::fs::set_permissions(scratch.path("."), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = victim(&scratch, "victim", "root's own\n");
    let install = Install::new(&scratch);
    let home = install.prefix.join(dir);
    let plant = |owner: u32| {
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        for log in logs {
            let log = home.join(log);
            symlink(&victim, &log).unwrap();
            lchown(&log, Some(owner), Some(owner)).unwrap();
        }
        chown(&home, Some(owner), Some(owner)).unwrap();
    };

    plant(65534);
    let out = install.run(&[flag]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_untouched(&victim, "root's own\n");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr.contains("belongs to uid 65534"), "{stderr}");

    plant(uid);
    let out = install.run(&[flag]);
    assert_untouched(&victim, "root's own\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    then(&home, uid);
}

/// `install.sh --with-postgres`: `initdb.log` planted; what it made is the postgres user's.
#[test]
fn install_with_postgres_follows_no_link_of_another_user() {
    use std::os::unix::fs::MetadataExt;
    let logs = ["initdb.log"];
    let dir = "var/lib/leader-exec-postgres";
    install_as_root_follows_no_link("--with-postgres", "postgres", dir, &logs, |home, uid| {
        let pg_hba = std::fs::read_to_string(home.join("data/pg_hba.conf")).unwrap();
        assert!(pg_hba.contains("host leader_exec leader_exec"), "{pg_hba}");
        let owner = std::fs::metadata(home.join("data/pg_hba.conf"))
            .unwrap()
            .uid();
        assert_eq!(owner, uid);
    });
}

/// `install.sh --with-mysql`: `install-db.log` and `mariadb.log` planted; what it made (the
/// data, the log, the server's pid file) is the mysql user's, and no link.
#[test]
fn install_with_mysql_follows_no_link_of_another_user() {
    use std::os::unix::fs::MetadataExt;
    let logs = ["install-db.log", "mariadb.log"];
    let dir = "var/lib/leader-exec-mysql";
    install_as_root_follows_no_link("--with-mysql", "mysql", dir, &logs, |home, uid| {
        for made in ["data/mysql", "mariadb.log", "mariadbd.pid"] {
            let meta = std::fs::symlink_metadata(home.join(made)).unwrap();
            assert!(!meta.file_type().is_symlink(), "{made}");
            assert_eq!(meta.uid(), uid, "{made}");
        }
    });
}
