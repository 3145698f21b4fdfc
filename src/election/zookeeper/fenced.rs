//! Writes fenced by the candidacy's own node (committed only while it exists), and the servers'
//! time the answers to our writes show (see records.rs).

use super::*;

impl ZooKeeper {
    /// A write that commits only while the candidacy's own node still exists (the fence): a
    /// candidate that led keeps leading while its node exists, since nobody can create a node
    /// ahead of it. `Ok(false)`: the node is gone. `ops` adds the writes after the check.
    /// Answers the servers' time stamped on the last node written, when the answer has it.
    pub(super) async fn fenced(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        ops: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<Result<Option<records::ServerTime>, zk::Error>, StoreError> {
        let mut writer = client
            .new_check_writer(&candidacy.key, None)
            .map_err(classify)?;
        ops(&mut writer).map_err(classify)?;
        match writer.commit().await {
            Ok(results) => Ok(Ok(results.iter().rev().find_map(|r| match r {
                zk::MultiWriteResult::Create { stat, .. }
                | zk::MultiWriteResult::SetData { stat } => records::ServerTime::of(stat),
                _ => None,
            }))),
            Err(zk::CheckWriteError::CheckFailed { .. }) => Ok(Err(zk::Error::RuntimeInconsistent)),
            Err(zk::CheckWriteError::OperationFailed { source, .. }) => Ok(Err(source)),
            Err(zk::CheckWriteError::RequestFailed { source }) => Err(classify(source)),
        }
    }

    /// Writes `path` fenced: `create` when it does not exist, `replace` when it does. Which one
    /// applies is read from the answers (a node may appear or go in between). `Ok(None)`: the
    /// fence said no; `Ok(Some(time))`: written, with the servers' time of the write if the
    /// answer had it.
    pub(super) async fn create_or_replace(
        &self,
        client: &zk::Client,
        candidacy: &Candidacy,
        path: &str,
        create: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
        replace: impl Fn(&mut zk::CheckWriter<'_>) -> Result<(), zk::Error>,
    ) -> Result<Option<Option<records::ServerTime>>, StoreError> {
        for _ in 0..3 {
            match self.fenced(client, candidacy, &create).await? {
                Ok(time) => return Ok(Some(time)),
                Err(zk::Error::RuntimeInconsistent) => return Ok(None),
                Err(zk::Error::NodeExists) => {}
                // The parents are made on the first write that needs them, not before every one.
                Err(zk::Error::NoNode) => {
                    client
                        .mkdir(
                            Self::parent(path),
                            &CreateMode::Persistent.with_acls(self.acls()),
                        )
                        .await
                        .map_err(classify)?;
                    continue;
                }
                Err(e) => return Err(classify(e)),
            }
            match self.fenced(client, candidacy, &replace).await? {
                Ok(time) => return Ok(Some(time)),
                Err(zk::Error::RuntimeInconsistent) => return Ok(None),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(classify(e)),
            }
        }
        Err(StoreError::Transient(format!(
            "ZooKeeper: {path} kept appearing and disappearing"
        )))
    }

    /// Keeps the servers' time a write of ours was stamped with (see records.rs).
    pub(super) fn observe(&self, stat: &zk::Stat) {
        if let Some(time) = records::ServerTime::of(stat) {
            *self.server_time.lock().expect("not poisoned") = Some(time);
        }
    }

    /// A lower bound of the servers' time now, if a write of this process has shown it.
    pub(super) fn server_now(&self) -> Option<i64> {
        self.server_time
            .lock()
            .expect("not poisoned")
            .map(|t| t.now())
    }
}
