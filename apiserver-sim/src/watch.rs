//! Serving one watch: initial events, then the resource's event log as it grows,
//! with bookmarks, timeouts and the injected faults.
//!
//! Each watch is a task that reads the store's event log from its own position and
//! writes newline-delimited JSON events into a bounded channel, so a slow client
//! slows only its own watch. A client that falls behind the compaction window gets
//! a 410 Gone `ERROR` event, as from a real API server.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::Shared;
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::store::{Event, EventType, Filter, ResourceId, StoredObject};

/// Events read from the log per step.
const BATCH: usize = 1024;

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Start {
    /// Send the current state as `ADDED` events first (resourceVersion unset or
    /// `0`, or `sendInitialEvents=true`).
    CurrentState {
        /// Close the initial events with a bookmark annotated
        /// `k8s.io/initial-events-end` (streaming lists).
        end_bookmark: bool,
    },
    /// Send every change after this resourceVersion.
    After(u64),
}

/// A watch request, parsed.
#[derive(Debug)]
pub(crate) struct WatchRequest {
    pub(crate) id: ResourceId,
    pub(crate) def: Arc<ResourceDef>,
    pub(crate) filter: Filter,
    pub(crate) start: Start,
    pub(crate) bookmarks: bool,
    pub(crate) timeout: Option<Duration>,
    /// What the events carry.
    pub(crate) form: EventForm,
}

/// What a watch's events carry, as the client's `Accept` header asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventForm {
    /// The objects.
    Object,
    /// `PartialObjectMetadata`, bookmarks included.
    Metadata,
    /// A `Table` of one row per event, as kubectl's `get -w` asks: the column
    /// definitions in the first only, as kube-apiserver sends them.
    Table,
}

/// Writes one watch's events in its form, remembering whether a Table's
/// column definitions were sent.
struct Encoder {
    form: EventForm,
    def: Arc<ResourceDef>,
    headers_sent: bool,
}

impl Encoder {
    fn write_event(&mut self, buf: &mut BytesMut, event_type: EventType, object: &StoredObject) {
        let json = match self.form {
            EventForm::Object => object.json.clone(),
            EventForm::Metadata => object.partial_metadata_json(),
            EventForm::Table => {
                let mut table = crate::printers::table(&self.def, crate::printers::Page::default(), &[&object.value]);
                if self.headers_sent {
                    table["columnDefinitions"] = json!([]);
                }
                self.headers_sent = true;
                Bytes::from(crate::encoding::to_vec(&table))
            }
        };
        buf.reserve(json.len() + 32);
        buf.put_slice(b"{\"type\":\"");
        buf.put_slice(event_type.as_str().as_bytes());
        buf.put_slice(b"\",\"object\":");
        buf.put_slice(&json);
        buf.put_slice(b"}\n");
    }

    /// The events as this watch's filter sees them: an object that starts
    /// matching is `ADDED`, one that stops matching is `DELETED`. The events
    /// are the stored objects' (the filter selects by their fields); a
    /// resource served from another's storage writes them converted.
    fn encode(&mut self, events: &[Arc<Event>], filter: &Filter) -> Bytes {
        let mut buf = BytesMut::new();
        for event in events {
            let now = filter.matches(&event.object);
            let before = event
                .previous
                .as_deref()
                .is_some_and(|previous| filter.matches(previous));
            let seen_as = match (event.event_type, before, now) {
                (EventType::Added, _, true) => EventType::Added,
                (EventType::Modified, true, true) => EventType::Modified,
                (EventType::Modified, false, true) => EventType::Added,
                (EventType::Modified, true, false) => EventType::Deleted,
                (EventType::Deleted, before, now) if before || now => EventType::Deleted,
                _ => continue,
            };
            let object = event.object.converted(self.def.stored_as);
            self.write_event(&mut buf, seen_as, &object);
        }
        buf.freeze()
    }
}

/// Starts the watch; its response body is the receiver's chunks.
pub(crate) fn spawn(shared: Arc<Shared>, request: WatchRequest) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(8);
    shared.stats.watch_opened(&request.id);
    tokio::spawn(async move {
        let id = request.id.clone();
        run(&shared, request, &tx).await;
        shared.stats.watch_closed(&id);
    });
    rx
}

async fn run(shared: &Shared, request: WatchRequest, tx: &mpsc::Sender<Bytes>) {
    let store = &shared.store;
    let mut closing = shared.faults.closing();
    closing.borrow_and_update();
    let mut hanging = shared.faults.hanging();
    let mut stopping = shared.stopping.subscribe();
    let mut changed = store.subscribe();
    changed.borrow_and_update();
    let deadline = request.timeout.map(|timeout| Instant::now() + timeout);

    if shared.faults.take_expiry() {
        let error = ApiError::expired("too old resource version: injected expiry");
        let _ = tx.send(error_event(&error)).await;
        return;
    }

    let mut encoder = Encoder {
        form: request.form,
        def: Arc::clone(&request.def),
        headers_sent: false,
    };
    let mut position = match request.start {
        Start::After(rv) => rv,
        Start::CurrentState { end_bookmark } => {
            let Ok((objects, rv)) = store.snapshot(&request.id, &request.filter) else {
                return;
            };
            for chunk in objects.chunks(BATCH) {
                let mut buf = BytesMut::new();
                for object in chunk {
                    encoder.write_event(&mut buf, EventType::Added, object);
                }
                if tx.send(buf.freeze()).await.is_err() {
                    return;
                }
            }
            if end_bookmark && tx.send(bookmark(&request, rv, true)).await.is_err() {
                return;
            }
            rv
        }
    };
    let mut current = position;
    // The log of the objects' storage, which the filter selects in.
    let log = request
        .def
        .stored_as
        .map_or_else(|| request.id.clone(), |conversion| conversion.storage());
    let mut bookmark_timer =
        tokio::time::interval_at(Instant::now() + shared.bookmark_interval, shared.bookmark_interval);

    loop {
        if !*hanging.borrow_and_update() {
            loop {
                match store.events_after(&log, position, BATCH) {
                    Err(error) => {
                        let _ = tx.send(error_event(&error)).await;
                        return;
                    }
                    Ok((events, now)) if events.is_empty() => {
                        current = now;
                        break;
                    }
                    Ok((events, _)) => {
                        position = events.last().map_or(position, |event| event.resource_version);
                        let chunk = encoder.encode(&events, &request.filter);
                        if !chunk.is_empty() && tx.send(chunk).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        let timeout = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = changed.changed() => if result.is_err() { return },
            _ = closing.changed() => return,
            _ = stopping.changed() => return,
            _ = hanging.changed() => {}
            () = timeout => return,
            () = tx.closed() => return,
            _ = bookmark_timer.tick(), if request.bookmarks => {
                if !*hanging.borrow() && tx.send(bookmark(&request, current, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A `BOOKMARK` event at `rv`, of the watched kind or, for a metadata-only
/// watch, a `PartialObjectMetadata`.
fn bookmark(request: &WatchRequest, rv: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let (kind, api_version) = if request.form == EventForm::Metadata {
        ("PartialObjectMetadata".to_owned(), "meta.k8s.io/v1".to_owned())
    } else {
        (request.def.kind.clone(), request.def.api_version())
    };
    let object = json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
    line("BOOKMARK", &object)
}

/// An `ERROR` event carrying the error's `Status`.
pub(crate) fn error_event(error: &ApiError) -> Bytes {
    line("ERROR", &error.to_status())
}

/// One event's line: its type, then its object.
fn line(event_type: &str, object: &serde_json::Value) -> Bytes {
    let mut bytes = format!("{{\"type\":\"{event_type}\",\"object\":").into_bytes();
    bytes.extend(crate::encoding::to_vec(object));
    bytes.extend(b"}\n");
    Bytes::from(bytes)
}
