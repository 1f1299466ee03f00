//! The inputs of one call, shared between a running version and its shadow
//! so that both decide on the same answers: the running version records each
//! answer of its cache queries and uncached reads as it gets it; the shadow,
//! making the same call at the same time, is answered what the running
//! version was answered for the same query (waiting for it while that call
//! runs), and reads for itself only what the running version did not ask.
//! Without this, the running version's writes (or a changing metrics API)
//! would reach the shadow's reads a moment later and show as differences
//! that are not in the code.
//!
//! Outbound HTTP is shared the same way, and for a second reason: a shadow
//! must not act on the outside world. The running version records each
//! response it got (status, headers, the body it read); the shadow's same
//! request (method, URL and body) is answered that response and never sent.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::v0_1::kinformer::plugin::api::ReadError;
use super::v0_1::kinformer::plugin::cache::{CacheError, ObjectList};
use kinformer_informers::Recover as _;

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
    /// Wakes the shadow's outbound requests, which wait in a task.
    recorded: tokio::sync::Notify,
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
    /// An outbound request: the response the running version got, or how
    /// its request ended without one.
    Http(Result<HttpAnswer, crate::outbound::Outcome>),
}

/// A response to an outbound request, as the version that sent it got it:
/// what its shadow's (or a replay's) same request is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body, as far as the version that sent the request read it.
    pub body: bytes::Bytes,
    /// Whether it read the body to its end.
    pub complete: bool,
}

impl HttpAnswer {
    /// A response read to its end.
    #[must_use]
    pub fn new(status: u16, headers: http::HeaderMap, body: bytes::Bytes) -> Self {
        Self {
            status,
            headers,
            body,
            complete: true,
        }
    }

    /// Marks the body as read only this far: the exchange ended early.
    #[must_use]
    pub fn truncated(mut self) -> Self {
        self.complete = false;
        self
    }
}

/// An outbound request (its method, URL and body's SHA-256, as
/// `GET URL SHA256`) and how it was answered.
pub type RecordedHttp = (String, Result<HttpAnswer, crate::outbound::Outcome>);

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

    pub(crate) fn http(self) -> Option<Result<HttpAnswer, crate::outbound::Outcome>> {
        match self {
            Self::Http(answer) => Some(answer),
            _ => None,
        }
    }
}

impl CallInputs {
    /// Inputs that answer outbound requests as `answers` say, each once, and
    /// nothing else: what a replay answers a plugin's requests from.
    #[must_use]
    pub fn answering(answers: impl IntoIterator<Item = RecordedHttp>) -> Arc<Self> {
        let inputs = Self::default();
        {
            let mut state = inputs.state();
            state.answers = answers
                .into_iter()
                .map(|(request, answer)| (http_query(&request), Answer::Http(answer), false))
                .collect();
            state.done = true;
        }
        Arc::new(inputs)
    }

    /// The outbound requests answered so far, in order: what `kinformer
    /// record --plugin` keeps.
    #[must_use]
    pub fn http_answers(&self) -> Vec<RecordedHttp> {
        self.state()
            .answers
            .iter()
            .filter_map(|(query, answer, _)| match answer {
                Answer::Http(answer) => Some((query.strip_prefix("http ").unwrap_or(query).to_owned(), answer.clone())),
                _ => None,
            })
            .collect()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().recover()
    }

    pub(crate) fn record(&self, query: String, answer: Answer) {
        self.state().answers.push((query, answer, false));
        self.changed.notify_all();
        self.recorded.notify_waiters();
    }

    /// The running version's call ended.
    pub fn finish(&self) {
        self.state().done = true;
        self.changed.notify_all();
        self.recorded.notify_waiters();
    }

    /// The first answer to `query` not given yet; `Err(done)` when there is
    /// none, `done` telling whether more may come.
    fn take(&self, query: &str) -> Result<Answer, bool> {
        let mut state = self.state();
        match state
            .answers
            .iter_mut()
            .find(|(asked, _, given)| asked == query && !given)
        {
            Some(found) => {
                found.2 = true;
                Ok(found.1.clone())
            }
            None => Err(state.done),
        }
    }

    /// As [`CallInputs::answer`], waiting in a task rather than a thread:
    /// for the shadow's outbound requests, which wait for the running
    /// version's response.
    pub(crate) async fn answer_async(&self, query: &str, limit: Duration) -> Option<Answer> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let recorded = self.recorded.notified();
            let mut recorded = std::pin::pin!(recorded);
            recorded.as_mut().enable();
            match self.take(query) {
                Ok(answer) => return Some(answer),
                Err(true) => return None,
                Err(false) => {}
            }
            if tokio::time::timeout_at(deadline, recorded).await.is_err() {
                return None;
            }
        }
    }

    /// The running version's answer to the same query, the first not given
    /// yet; waits while its call runs, at most `limit`. `None` when it did
    /// not ask.
    pub(crate) fn answer(&self, query: &str, limit: Duration) -> Option<Answer> {
        let deadline = Instant::now() + limit;
        loop {
            let done = match self.take(query) {
                Ok(answer) => return Some(answer),
                Err(done) => done,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if done || left.is_zero() {
                return None;
            }
            let state = self.state();
            // Anything recorded between `take` and here woke no one: look again.
            if state.done || state.answers.iter().any(|(asked, _, given)| asked == query && !given) {
                continue;
            }
            drop(self.changed.wait_timeout(state, left).recover());
        }
    }
}

/// The query an outbound request is recorded under.
pub(crate) fn http_query(request: &str) -> String {
    format!("http {request}")
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
