//! A scripted store for in-process tests of the run state machine (`run/tests.rs`): each call
//! takes the next answer from its script (an answer after a delay, an error, or no answer at
//! all), and every call is logged with its instant on tokio's (paused) clock.
//!
//! Single-threaded (`Rc<RefCell<…>>`), like the Runner itself. Calls the Runner does not make
//! are refused with `StoreError::Fatal`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use super::{
    Ahead, Campaign, Candidacy, Describe, Election, Handover, Keeper, Leader, LeaseTime,
    Observation, RawRecord, Read, Records, Renewal, StoreError, Turn,
};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Step<T> {
    /// This answer, after this long.
    After(Duration, T),
    /// No answer, ever (a hung store).
    Never,
}

impl<T> Step<T> {
    pub fn now(answer: T) -> Step<T> {
        Step::After(Duration::ZERO, answer)
    }
}

/// A call the fake store received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Campaign,
    CheckTurn,
    Renew,
    /// `release_claim`: the claim's release.
    Release,
}

/// The scripts: each call takes the front answer; an empty script answers with the default.
#[derive(Debug)]
pub struct Script {
    pub campaign: VecDeque<Step<Result<Candidacy, StoreError>>>,
    pub check_turn: VecDeque<Step<Result<Turn, StoreError>>>,
    pub renew: VecDeque<Step<Result<Renewal, StoreError>>>,
    /// Every renewal after `renew`: `Renewal::Alive` at once by default.
    pub renew_then: Step<Result<Renewal, StoreError>>,
    pub release: VecDeque<Step<Result<(), StoreError>>>,
    /// When (after the call) our key is deleted; `Never` by default.
    pub key_gone: Step<()>,
    /// When (after the call) `resign` asks this leader to hand over; `Never` by default.
    pub handover: Step<()>,
    /// What `lease_length` answers: None (`--ttl`) by default.
    pub lease_length: Option<Duration>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            campaign: VecDeque::new(),
            check_turn: VecDeque::new(),
            renew: VecDeque::new(),
            renew_then: Step::now(Ok(Renewal::Alive)),
            release: VecDeque::new(),
            key_gone: Step::Never,
            handover: Step::Never,
            lease_length: None,
        }
    }
}

/// The candidacy every campaign creates unless scripted otherwise.
pub fn candidacy() -> Candidacy {
    Candidacy {
        lease_id: Some(0x2a),
        key: "/leader-exec/test/2a".into(),
        place: 7,
        // Not a token until `check_turn` leads.
        token: 0,
    }
}

#[derive(Debug, Default)]
struct State {
    script: Script,
    calls: Vec<(Duration, Call)>,
}

/// The fake store. Clones share the script and the log.
#[derive(Clone, Debug)]
pub struct Fake {
    state: Rc<RefCell<State>>,
    origin: tokio::time::Instant,
}

impl Fake {
    /// Instants in the log count from here (use the same origin as the test's clock).
    pub fn new(script: Script) -> Fake {
        Fake {
            state: Rc::new(RefCell::new(State {
                script,
                calls: Vec::new(),
            })),
            origin: tokio::time::Instant::now(),
        }
    }

    /// Every call so far, with its instant.
    pub fn calls(&self) -> Vec<(Duration, Call)> {
        self.state.borrow().calls.clone()
    }

    /// The instants of the calls of one kind.
    pub fn times(&self, call: Call) -> Vec<Duration> {
        self.calls()
            .into_iter()
            .filter(|(_, c)| *c == call)
            .map(|(at, _)| at)
            .collect()
    }

    fn log(&self, call: Call) {
        let at = self.origin.elapsed();
        self.state.borrow_mut().calls.push((at, call));
    }

    fn next<T: Clone>(
        &self,
        pick: impl FnOnce(&mut Script) -> &mut VecDeque<Step<T>>,
        default: T,
    ) -> Step<T> {
        let mut state = self.state.borrow_mut();
        pick(&mut state.script)
            .pop_front()
            .unwrap_or(Step::now(default))
    }
}

async fn answer<T>(step: Step<T>) -> T {
    match step {
        Step::After(delay, answer) => {
            tokio::time::sleep(delay).await;
            answer
        }
        Step::Never => std::future::pending().await,
    }
}

fn refused<T>() -> Result<T, StoreError> {
    Err(StoreError::Fatal("not scripted in the fake store".into()))
}

/// The keeper of the fake store's lease: its renewals follow `Script::renew`.
pub struct FakeKeeper(Fake);

impl Keeper for FakeKeeper {
    fn renew(&mut self) -> impl Future<Output = Result<Renewal, StoreError>> {
        self.0.log(Call::Renew);
        let step = {
            let mut state = self.0.state.borrow_mut();
            let script = &mut state.script;
            script
                .renew
                .pop_front()
                .unwrap_or_else(|| script.renew_then.clone())
        };
        answer(step)
    }

    fn reset(&mut self) {}
}

impl Campaign for Fake {
    type Keeper = FakeKeeper;

    fn campaign(&self) -> impl Future<Output = Result<Candidacy, StoreError>> {
        self.log(Call::Campaign);
        answer(self.next(|s| &mut s.campaign, Ok(candidacy())))
    }

    fn keeper(&self, _candidacy: &Candidacy) -> FakeKeeper {
        FakeKeeper(self.clone())
    }

    /// By default the candidacy leads at once, with its place in line as its token (as on etcd).
    fn check_turn(&self, candidacy: &Candidacy) -> impl Future<Output = Result<Turn, StoreError>> {
        self.log(Call::CheckTurn);
        let leading = Turn::Leading {
            token: candidacy.place,
        };
        answer(self.next(|s| &mut s.check_turn, Ok(leading)))
    }

    async fn predecessor_gone(
        &self,
        _candidacy: &Candidacy,
        _ahead: &Ahead,
    ) -> Result<(), StoreError> {
        // Look again soon: the script decides what the next look says.
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }

    fn key_gone(&self, _candidacy: &Candidacy) -> impl Future<Output = ()> {
        answer(self.state.borrow().script.key_gone.clone())
    }

    fn release_claim(
        &self,
        _candidacy: &Candidacy,
    ) -> impl Future<Output = Result<(), StoreError>> {
        self.log(Call::Release);
        answer(self.next(|s| &mut s.release, Ok(())))
    }

    async fn hold_claim(
        &self,
        candidacy: &Candidacy,
        _bound: Duration,
    ) -> Result<Option<Candidacy>, StoreError> {
        Ok(Some(candidacy.clone()))
    }

    fn lease_length(&self) -> Option<Duration> {
        self.state.borrow().script.lease_length
    }
}

impl Read for Fake {
    async fn read_election(&self) -> Result<Observation, StoreError> {
        refused()
    }

    async fn changed_since(&self, _seen: &Observation) -> Result<(), StoreError> {
        refused()
    }

    async fn list_elections(&self, _prefix: &str) -> Result<Vec<Election>, StoreError> {
        refused()
    }

    async fn lease_time(&self, _leader: &Leader) -> Result<Option<LeaseTime>, StoreError> {
        refused()
    }
}

impl Records for Fake {
    async fn read_record(&self, _key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        refused()
    }

    async fn write_fenced(
        &self,
        _candidacy: &Candidacy,
        _key: &str,
        _value: Vec<u8>,
        _retention: Duration,
    ) -> Result<bool, StoreError> {
        refused()
    }

    async fn list_records(&self, _prefix: &str) -> Result<Vec<RawRecord>, StoreError> {
        refused()
    }

    async fn put_on_lease_fenced(
        &self,
        _candidacy: &Candidacy,
        _key: &str,
        _value: Vec<u8>,
    ) -> Result<bool, StoreError> {
        // The leader's state record for `status`: accepted.
        Ok(true)
    }
}

impl Handover for Fake {
    fn handover_requested(
        &self,
        _candidacy: &Candidacy,
        _key: &str,
        _poll: Duration,
    ) -> impl Future<Output = ()> {
        answer(self.state.borrow().script.handover.clone())
    }

    async fn remove_claim(&self, _leader: &Leader) -> Result<bool, StoreError> {
        refused()
    }
}

impl Describe for Fake {
    fn store_name(&self) -> &'static str {
        "fake"
    }

    fn shown(&self) -> String {
        "fake://".into()
    }

    fn addresses(&self) -> Vec<(String, u16)> {
        Vec::new()
    }

    fn restart_resets_leases(&self) -> bool {
        false
    }

    fn delete_record_hint(&self, key: &str) -> String {
        format!("delete {key}")
    }
}
