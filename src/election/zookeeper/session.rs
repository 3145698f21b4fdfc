//! The ZooKeeper session: connecting with the requested timeout, the current session, the `sync`
//! before every read that answers "who leads" to an operator, the timeout a reconnect
//! renegotiates, the watch on the candidacy's own node, the URL's chroot, and the ACLs of the nodes
//! leader-exec creates.

use super::*;

/// The ACL of every node leader-exec creates when it has credentials (Curator's ACL provider
/// model): all rights for the creator's authenticated identity (`auth` is the server's shorthand
/// for the ids the creating session authenticated as: `digest:NAME:HASH`), read for everyone, so
/// that `status` and `check` need no credentials. What keeps the line safe is the election
/// node's: without CREATE a client cannot plant a candidate ahead, and without DELETE on the
/// parent it cannot delete the leader's node. The same holds for `.leaders`, `.occurrences` and
/// the prefix's own nodes, created the same way.
pub(super) static CREATOR_ALL_ANYONE_READ: [Acl; 2] = [
    Acl::new_const(Permission::ALL, "auth", ""),
    Acl::new_const(Permission::READ, "world", "anyone"),
];

/// Whether an ACL gives every client (`world:anyone`) more than read.
pub(super) fn open_to_everyone(acls: &[Acl]) -> bool {
    acls.iter().any(|acl| {
        acl.scheme() == "world"
            && acl.id() == "anyone"
            && acl.permission() != Permission::READ
            && acl.permission() != Permission::NONE
    })
}

/// A session on which a `sync` was answered: the only way to [`ZooKeeper::holders_of`], so that
/// no observer reads the line without one (see [`ZooKeeper::synced`]).
pub(super) struct Synced(pub(super) zk::Client);

impl ZooKeeper {
    pub(super) async fn connect(&self) -> Result<zk::Client, StoreError> {
        let mut connector = zk::Client::connector().with_session_timeout(self.timing.ttl);
        if let Some(digest) = &self.target.digest {
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        match tokio::time::timeout(
            self.connect_timeout,
            connector.connect(&self.target.connect),
        )
        .await
        {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(classify(e)),
            Err(_) => Err(StoreError::Transient(format!(
                "ZooKeeper at {} did not establish a session within --connect-timeout ({})",
                self.target.shown,
                humantime::format_duration(self.connect_timeout)
            ))),
        }
    }

    /// The current session, or a new one when there is none or it has ended.
    pub(super) async fn client(&self) -> Result<zk::Client, StoreError> {
        if let Some(client) = self.session.lock().expect("not poisoned").as_ref()
            && !client.state().is_terminated()
        {
            return Ok(client.clone());
        }
        let client = self.connect().await?;
        *self.session.lock().expect("not poisoned") = Some(client.clone());
        Ok(client)
    }

    /// The ACL for every node this instance creates: see [`CREATOR_ALL_ANYONE_READ`]. Without
    /// credentials there is no identity to give rights to, and nodes are open (docs/zookeeper.md, ACLs).
    pub(super) fn acls(&self) -> Acls<'static> {
        if self.target.digest.is_some() {
            Acls::new(&CREATOR_ALL_ANYONE_READ)
        } else {
            Acls::anyone_all()
        }
    }

    /// The session for a read that answers "who leads" to an operator (`status`, `status --all`,
    /// `check`, `watch`, `resign`), after a `sync` of `path`.
    ///
    /// A server answers reads from its own copy, and a follower may lag behind the ensemble's
    /// leader: without the `sync` it could still show a deposed leader, and `check` would accept
    /// its token. `sync` makes the server catch up with the leader first, so the reads after it
    /// on this session see every write committed before the `sync` was sent. Should the session
    /// move to another server in between, the client refuses a server that has seen less than
    /// the session already has (the connect request carries the last zxid it saw).
    pub(super) async fn synced(&self, path: &str) -> Result<Synced, StoreError> {
        let client = self.client().await?;
        match client.sync(path).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(Synced(client)),
            Err(e) => Err(classify(e)),
        }
    }

    /// Completes when the server negotiated, on the session's current connection, a timeout
    /// shorter than `--renew-deadline + --kill-after + margin` (see `ZkKeeper` in store.rs); never for the
    /// subcommands, which need nothing.
    pub(super) async fn session_timeout_shrunk(&self) {
        let Some(client) = self.session_of() else {
            return std::future::pending().await;
        };
        let mut watcher = client.negotiated_session_timeout_watcher();
        let mut negotiated = watcher.timeout();
        while negotiated >= self.timing.needed {
            negotiated = watcher.changed().await;
        }
        tracing::warn!(
            event = "session-timeout-shrunk",
            negotiated_ms = negotiated.as_millis() as u64,
            "ZooKeeper renegotiated the session timeout on a new connection: {} is less than --renew-deadline + --kill-after + margin ({}); the server may now expire the session before the command is stopped, so it is stopped at once",
            humantime::format_duration(negotiated),
            humantime::format_duration(self.timing.needed)
        );
    }

    /// The nodes on the election's path (the prefix's nodes, the election, `.leaders`,
    /// `.occurrences`) that give everyone more than read: created without credentials, by an
    /// older leader-exec, or by another client. Their ACL is theirs, not ours to change.
    pub(super) async fn open_nodes(&self, client: &zk::Client) -> Vec<String> {
        let mut paths = Vec::new();
        let mut path = String::new();
        for part in self.base.split('/').filter(|p| !p.is_empty()) {
            path.push('/');
            path.push_str(part);
            paths.push(path.clone());
        }
        paths.push(self.election.clone());
        paths.push(format!("{}/.leaders", self.base));
        paths.push(format!("{}/{TOKENS}", self.base));
        paths.push(marker_path(&self.election));
        paths.push(format!("{}/.occurrences", self.base));
        let mut open = Vec::new();
        for path in paths {
            if let Ok((acls, _)) = client.get_acl(&path).await
                && open_to_everyone(&acls)
            {
                open.push(path);
            }
        }
        open
    }

    /// Completes once the candidacy's own node has been deleted (or its session ended).
    pub(super) async fn own_node_gone(&self, candidacy: &Candidacy) {
        let mut backoff = Backoff::new();
        loop {
            let Some(client) = self.session_of() else {
                return;
            };
            match client.check_and_watch_stat(&candidacy.key).await {
                Ok((None, _)) => return,
                Ok((Some(stat), _)) if stat.czxid != candidacy.place => return,
                Ok((Some(_), watcher)) => {
                    let event = watcher.changed().await;
                    if event.event_type == EventType::NodeDeleted
                        || event.session_state.is_terminated()
                    {
                        return;
                    }
                }
                // An expired session took its ephemeral nodes with it.
                Err(zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
                Err(e) => {
                    tracing::debug!(error = %classify(e), "watching our own node failed; trying again");
                    backoff.sleep().await;
                }
            }
        }
    }

    pub(super) fn session_of(&self) -> Option<zk::Client> {
        self.session.lock().expect("not poisoned").clone()
    }

    /// The URL's chroot (`/PATH`), or "" without one.
    pub(super) fn chroot(&self) -> &str {
        let connect = &self.target.connect;
        connect.find('/').map_or("", |i| &connect[i..])
    }

    /// Err naming the chroot if the URL has one and it does not exist. Every path this client
    /// reads is below the chroot, so below a missing one an election reads as one nobody stands
    /// in: a reader would report "no leader" for a typo in the URL.
    pub(super) async fn chroot_exists(&self, client: &zk::Client) -> Result<(), StoreError> {
        if self.chroot().is_empty() {
            return Ok(());
        }
        match client.check_stat("/").await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(StoreError::Fatal(format!(
                "ZooKeeper: the chroot {} of {} does not exist; create it first (/usr/share/zookeeper/bin/zkCli.sh -server {} create {})",
                self.chroot(),
                self.target.shown,
                crate::escape::shell_quote(self.connect_string_hosts()),
                crate::escape::shell_quote(self.chroot())
            ))),
            Err(e) => Err(classify(e)),
        }
    }

    pub(super) fn connect_string_hosts(&self) -> &str {
        self.target
            .connect
            .split('/')
            .next()
            .unwrap_or(&self.target.connect)
    }
}
