//! What a `zk://` URL and the credential flags say for ZooKeeper, parsed and checked before
//! anything is contacted.

use super::super::door;
use super::super::flags::{self, StoreFlags};
use super::{Target, ZooKeeper};
use crate::exit::Failure;
use crate::redact::redact_password;

pub fn is_zookeeper_url(endpoint: &str) -> bool {
    endpoint.to_ascii_lowercase().starts_with("zk://")
}

/// `--endpoints zk://HOST:PORT[,HOST:PORT…][/chroot]`: ZooKeeper's connect string behind a
/// scheme. The list was split at commas, which also separate its hosts: it is one URL again.
/// `--user NAME` with a password (`--password-file`, `LEADER_EXEC_PASSWORD`) authenticates with
/// the `digest` scheme; TLS is not supported with ZooKeeper.
pub fn parse(endpoints: Vec<String>, args: StoreFlags) -> Result<Target, Failure> {
    if !is_zookeeper_url(&endpoints[0])
        || endpoints.len() > 1 && endpoints[1..].iter().any(|e| e.contains("://"))
    {
        return Err(Failure::usage(
            "--endpoints: give one zk:// URL (several hosts go inside it: zk://a:2181,b:2181/chroot), not a mix of stores",
        ));
    }
    if args.connect_timeout.is_zero() {
        return Err(Failure::usage("--connect-timeout must be greater than 0"));
    }
    if args.cacert.is_some() || args.cert.is_some() || args.key.is_some() {
        return Err(Failure::usage(
            "--cacert/--cert/--key: TLS is not supported with ZooKeeper; reach it over a trusted network",
        ));
    }
    let url = endpoints.join(",");
    // ZooKeeper's connect string has no query: a `?` would end up in the chroot, and with it
    // whatever follows (a `password=`) in every message that names the chroot.
    if url.contains('?') {
        return Err(Failure::usage(
            "--endpoints: a zk:// URL takes no query (?...); credentials go in --user and --password-file",
        ));
    }
    let rest = &url["zk://".len()..];
    let (hosts, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if hosts.split(',').any(|h| h.trim().is_empty()) {
        return Err(Failure::usage(format!(
            "--endpoints {}: a host is empty; write zk://HOST:PORT[,HOST:PORT…][/chroot]",
            redact_password(&url).escape_debug()
        )));
    }
    for host in hosts.split(',') {
        if host.contains('@') {
            return Err(Failure::usage(
                "--endpoints: credentials do not go in a zk:// URL; use --user and --password-file",
            ));
        }
        let port_ok = host.rsplit_once(':').is_some_and(|(name, port)| {
            !name.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !port_ok {
            return Err(Failure::usage(format!(
                "--endpoints: {} is not HOST:PORT",
                redact_password(host).escape_debug()
            )));
        }
    }
    if chroot == "/" || chroot.ends_with('/') && !chroot.is_empty() || chroot.contains("//") {
        return Err(Failure::usage(format!(
            "--endpoints: the chroot {} must be an absolute path without a trailing '/'",
            redact_password(chroot).escape_debug()
        )));
    }
    let credentials = flags::credentials(args.user, args.password_file)?;
    Ok(Target {
        connect: format!("{hosts}{chroot}"),
        shown: redact_password(&url),
        digest: credentials.map(|c| format!("{}:{}", c.user, c.password)),
    })
}

door! {
    ZooKeeper { name: "ZooKeeper", schemes: ["zk"], spellings: [], aliases: ["zoo", "zk"] },
    target: Target,
    parse: parse,
}

#[cfg(test)]
mod tests {
    use super::super::super::any::Connection;
    use super::super::super::flags::tests::flags;
    use super::*;

    fn target(args: &[&str]) -> Target {
        match Connection::parse(flags(args)).map(|c| c.into_zookeeper()) {
            Ok(Some(target)) => target,
            _ => panic!("not ZooKeeper"),
        }
    }

    fn refused(args: &[&str]) -> String {
        match Connection::parse(flags(args)) {
            Err(failure) => failure.to_string(),
            Ok(_) => panic!("{args:?} accepted"),
        }
    }

    #[test]
    fn a_zk_url_is_a_connect_string_with_an_optional_chroot() {
        let t = target(&["--endpoints", "zk://zk1:2181,zk2:2181,zk3:2181/ops"]);
        assert_eq!(t.connect, "zk1:2181,zk2:2181,zk3:2181/ops");
        assert_eq!(t.digest, None);
        assert_eq!(
            target(&["--endpoints", "zk://127.0.0.1:2181"]).connect,
            "127.0.0.1:2181"
        );
        assert_eq!(
            target(&["--endpoints", "zk://a:1/deep/chroot"]).connect,
            "a:1/deep/chroot"
        );
    }

    #[test]
    fn bad_zk_urls_are_refused_with_what_is_wrong() {
        assert!(refused(&["--endpoints", "zk://a:2181,http://b:2379"]).contains("not a mix"));
        assert!(refused(&["--endpoints", "zk://a"]).contains("is not HOST:PORT"));
        assert!(refused(&["--endpoints", "zk://a:0"]).contains("is not HOST:PORT"));
        assert!(refused(&["--endpoints", "zk://,a:2181"]).contains("a host is empty"));
        assert!(refused(&["--endpoints", "zk://a:2181/ops/"]).contains("chroot"));
        assert!(refused(&["--endpoints", "zk://a:2181/"]).contains("chroot"));
        let secret = refused(&["--endpoints", "zk://u:hunter2@a:2181"]);
        assert!(
            secret.contains("credentials do not go in a zk:// URL"),
            "{secret}"
        );
        assert!(!secret.contains("hunter2"), "{secret}");
        for url in ["zk://a:2181/jobs?password=hunter2", "zk://a:2181?x=1"] {
            let message = refused(&["--endpoints", url]);
            assert!(message.contains("takes no query"), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
        }
        assert!(
            refused(&["--endpoints", "zk://a:2181", "--cacert", "/etc/hostname"])
                .contains("TLS is not supported with ZooKeeper")
        );
    }

    #[test]
    fn a_user_and_password_become_digest_credentials() {
        let t = target(&["--endpoints", "zk://a:2181", "--user", "jobs:s3cret"]);
        assert_eq!(t.digest.as_deref(), Some("jobs:s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
    }
}
