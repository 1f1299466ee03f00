//! The inputs of one call, shared between a running version and its shadow
//! so that both decide on the same answers: the running version records each
//! answer of its cache queries and uncached reads as it gets it; the shadow,
//! making the same call at the same time, is answered what the running
//! version was answered for the same query (waiting for it while that call
//! runs), and reads for itself only what the running version did not ask.
//! Without this, the running version's writes (or a changing metrics API)
//! would reach the shadow's reads a moment later and show as differences
//! that are not in the code.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::bindings::kinformer::plugin::api::ReadError;
use super::bindings::kinformer::plugin::cache::{CacheError, ObjectList};

/// What an instance does with the inputs of the calls to come.
#[derive(Debug, Clone)]
pub enum SharedInputs {
    /// Record them into the call's (the running version).
    Record(Arc<CallInputs>),
    /// Answer from the call's (the shadow).
    Replay(Arc<CallInputs>),
}

/// One call's inputs, as the running version was answered.
#[derive(Debug, Default)]
pub struct CallInputs {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Each query, its answer, and whether the shadow was given it already.
    answers: Vec<(String, Answer, bool)>,
    /// The running version's call ended: no more answers come.
    done: bool,
}

/// An answer to one host call that reads.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    Object(Result<Option<String>, CacheError>),
    Objects(Result<ObjectList, CacheError>),
    Values(Result<Vec<String>, CacheError>),
    Read(Result<Option<String>, ReadError>),
}

impl Answer {
    pub(crate) fn object(self) -> Option<Result<Option<String>, CacheError>> {
        match self {
            Self::Object(answer) => Some(answer),
            _ => None,
        }
    }

    pub(crate) fn objects(self) -> Option<Result<ObjectList, CacheError>> {
        match self {
            Self::Objects(answer) => Some(answer),
            _ => None,
        }
    }

    pub(crate) fn values(self) -> Option<Result<Vec<String>, CacheError>> {
        match self {
            Self::Values(answer) => Some(answer),
            _ => None,
        }
    }

    pub(crate) fn read(self) -> Option<Result<Option<String>, ReadError>> {
        match self {
            Self::Read(answer) => Some(answer),
            _ => None,
        }
    }
}

impl CallInputs {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, query: String, answer: Answer) {
        self.state().answers.push((query, answer, false));
        self.changed.notify_all();
    }

    /// The running version's call ended.
    pub fn finish(&self) {
        self.state().done = true;
        self.changed.notify_all();
    }

    /// The running version's answer to the same query, the first not given
    /// yet; waits while its call runs, at most `limit`. `None` when it did
    /// not ask.
    pub(crate) fn answer(&self, query: &str, limit: Duration) -> Option<Answer> {
        let deadline = Instant::now() + limit;
        let mut state = self.state();
        loop {
            if let Some(found) = state
                .answers
                .iter_mut()
                .find(|(asked, _, given)| asked == query && !given)
            {
                found.2 = true;
                return Some(found.1.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if state.done || left.is_zero() {
                return None;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(text: &str) -> Answer {
        Answer::Object(Ok(Some(text.to_owned())))
    }

    fn text(answer: Option<Answer>) -> Option<String> {
        match answer {
            Some(Answer::Object(Ok(Some(text)))) => Some(text),
            _ => None,
        }
    }

    #[test]
    fn a_shadow_is_answered_what_the_running_version_was_once_per_query_and_waits_for_it() {
        let inputs = Arc::new(CallInputs::default());
        let recorder = Arc::clone(&inputs);
        let running = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            recorder.record("get a".into(), object("first"));
            recorder.record("get a".into(), object("second"));
            recorder.finish();
        });
        let limit = Duration::from_secs(5);
        assert_eq!(text(inputs.answer("get a", limit)).as_deref(), Some("first"));
        assert_eq!(text(inputs.answer("get a", limit)).as_deref(), Some("second"));
        running.join().unwrap();
        assert!(inputs.answer("get a", limit).is_none(), "asked twice only");
        assert!(inputs.answer("get b", limit).is_none(), "never asked");
    }
}
