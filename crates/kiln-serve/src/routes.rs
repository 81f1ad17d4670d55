//! The HTTP routes: OpenAI's completion routes (JSON or server-sent events), the model
//! list, health and Prometheus metrics. A handler checks its body, takes a queue place
//! (or answers 503), hands a [`Job`] to the engine and relays its [`Event`]s.

use crate::api::{self, Endpoint, ModelInfo, Parsed};
use crate::engine::{Event, Finish, Job};
use crate::error::ApiError;
use crate::metrics::Metrics;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// What every handler shares.
pub struct AppState {
    /// The served model, for checking and encoding requests.
    pub info: ModelInfo,
    /// Jobs for the engine thread.
    pub jobs: Sender<Job>,
    /// Counters and gauges.
    pub metrics: Arc<Metrics>,
    /// Requests that may wait to start; more are answered 503.
    pub queue: usize,
    /// Numbers the responses' ids.
    next_id: AtomicU64,
}

impl AppState {
    /// State for a server of `info`'s model with a queue of `queue` places.
    pub fn new(info: ModelInfo, jobs: Sender<Job>, metrics: Arc<Metrics>, queue: usize) -> Self {
        AppState { info, jobs, metrics, queue, next_id: AtomicU64::new(0) }
    }
}

type Shared = Arc<AppState>;

/// Every route of the server.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(|s: State<Shared>, b: Bytes| complete(s, b, Endpoint::Chat)))
        .route("/v1/completions", post(|s: State<Shared>, b: Bytes| complete(s, b, Endpoint::Completion)))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn models(State(s): State<Shared>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": s.info.name, "object": "model", "created": now(), "owned_by": "kiln"}]}),
    )
}

async fn metrics(State(s): State<Shared>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render())
}

/// Seconds since the Unix epoch.
fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn complete(State(s): State<Shared>, body: Bytes, endpoint: Endpoint) -> Response {
    let (stream_to, events) = match submit(&s, &body, endpoint) {
        Ok(started) => started,
        Err(e) => return e.into_response(),
    };
    let reply = Arc::new(Reply {
        endpoint,
        id: format!("{}-{}", endpoint.id_prefix(), s.next_id.fetch_add(1, Relaxed)),
        created: now(),
        model: s.info.name.clone(),
    });
    match stream_to {
        Some(StreamTo { include_usage }) => stream(reply, events, include_usage).into_response(),
        None => collect(&reply, events).await,
    }
}

/// How a streamed answer ends.
struct StreamTo {
    include_usage: bool,
}

/// Checks the body and queues its job; the job's events come out of the receiver.
fn submit(
    s: &AppState,
    body: &[u8],
    endpoint: Endpoint,
) -> Result<(Option<StreamTo>, UnboundedReceiver<Event>), ApiError> {
    let Parsed { prompt, max_tokens, sampling, stop, stream, include_usage } =
        api::parse(body, endpoint, &s.info).inspect_err(|_| {
            s.metrics.invalid.fetch_add(1, Relaxed);
        })?;
    if !s.metrics.try_enqueue(s.queue) {
        s.metrics.rejected.fetch_add(1, Relaxed);
        return Err(ApiError::overloaded());
    }
    let (tx, rx) = unbounded_channel();
    let job = Job { prompt, max_tokens, sampling, stop, events: tx };
    if s.jobs.send(job).is_err() {
        s.metrics.queued.fetch_sub(1, Relaxed);
        return Err(ApiError::internal("the engine has stopped"));
    }
    s.metrics.requests.fetch_add(1, Relaxed);
    Ok((stream.then_some(StreamTo { include_usage }), rx))
}

impl Endpoint {
    fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        }
    }
}

/// The parts every response object of one request shares.
struct Reply {
    endpoint: Endpoint,
    id: String,
    created: u64,
    model: String,
}

impl Reply {
    /// A response object with `choices` (and `usage` when given).
    fn object(&self, streamed: bool, choices: Value, usage: Option<&Finish>) -> Value {
        let object = match (self.endpoint, streamed) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        };
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices});
        if let Some(f) = usage {
            v["usage"] = json!({
                "prompt_tokens": f.prompt_tokens,
                "completion_tokens": f.completion_tokens,
                "total_tokens": f.prompt_tokens + f.completion_tokens,
            });
        }
        v
    }

    /// The one choice holding `text`: a chat message (or delta when streamed) or a text.
    fn choice(&self, streamed: bool, text: &str, finish: Option<&Finish>) -> Value {
        let reason = finish.map(|f| f.reason.as_str());
        match (self.endpoint, streamed) {
            (Endpoint::Chat, false) => {
                json!([{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}])
            }
            (Endpoint::Chat, true) if text.is_empty() => {
                json!([{"index": 0, "delta": {}, "finish_reason": reason}])
            }
            (Endpoint::Chat, true) => {
                json!([{"index": 0, "delta": {"content": text}, "finish_reason": reason}])
            }
            (Endpoint::Completion, _) => {
                json!([{"index": 0, "text": text, "logprobs": null, "finish_reason": reason}])
            }
        }
    }

    fn chunk(&self, text: &str, finish: Option<&Finish>) -> SseEvent {
        SseEvent::default().data(self.object(true, self.choice(true, text, finish), None).to_string())
    }
}

/// Waits for the whole output and answers one JSON object.
async fn collect(reply: &Reply, mut events: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Done(f) => {
                return Json(reply.object(false, reply.choice(false, &text, Some(&f)), Some(&f)))
                    .into_response()
            }
            Event::Failed(msg) => return ApiError::internal(msg).into_response(),
        }
    }
    ApiError::internal("the engine stopped before the output ended").into_response()
}

/// Relays the output as server-sent events: OpenAI's chunks, then `[DONE]`. Dropping the
/// stream (the client went away) drops the receiver, which ends the sequence.
fn stream(reply: Arc<Reply>, events: UnboundedReceiver<Event>, include_usage: bool) -> impl IntoResponse {
    let head = match reply.endpoint {
        Endpoint::Chat => vec![SseEvent::default().data(
            reply.object(true, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]), None).to_string(),
        )],
        Endpoint::Completion => vec![],
    };
    let done = || SseEvent::default().data("[DONE]");
    let body = stream::unfold(Some(events), move |events| {
        let reply = reply.clone();
        async move {
            let mut events = events?;
            let (out, more) = match events.recv().await {
                Some(Event::Text(t)) => (vec![reply.chunk(&t, None)], true),
                Some(Event::Done(f)) => {
                    let mut out = vec![reply.chunk("", Some(&f))];
                    if include_usage {
                        out.push(
                            SseEvent::default().data(reply.object(true, json!([]), Some(&f)).to_string()),
                        );
                    }
                    out.push(done());
                    (out, false)
                }
                Some(Event::Failed(msg)) => (
                    vec![SseEvent::default().data(ApiError::internal(msg).body().to_string()), done()],
                    false,
                ),
                None => (vec![], false),
            };
            Some((out, more.then_some(events)))
        }
    });
    let body = stream::iter([head]).chain(body).flat_map(stream::iter).map(Ok::<_, Infallible>);
    Sse::new(body)
}
