//! End to end on the CPU: a server on a loopback port serving the qwen3 fixture (tiny,
//! random weights, f32), driven over HTTP. Outputs are checked against
//! `kiln_models::generate` run directly, and against each other streamed or not, one at a
//! time or 32 at once; bad input, a full queue and a client that leaves are checked by
//! status, error body and the KV blocks that /metrics reports.

use kiln::{DType, Device};
use kiln_models::tokenizer::Tokenizer;
use kiln_models::{GenerateOptions, Model};
use kiln_serve::{ServeOptions, Server};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Qwen's ChatML template, for the fixture (which ships none).
const CHATML: &str =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\
                      {% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Positions of the test model: the fixture's 256, raised so that long generations
/// (the disconnect test) and prompts past the context are cheap to make.
const CONTEXT: usize = 4096;

/// The qwen3 fixture copied with a chat template and a longer context (its rotary
/// tables are computed, so only config.json changes), once per test process.
fn model_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = kiln_models::config::fixtures_dir().join("models/qwen3");
        let dir = std::env::temp_dir().join(format!("kiln-serve-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["model.safetensors", "tokenizer.json", "generation_config.json"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
        config["max_position_embeddings"] = json!(CONTEXT);
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        std::fs::write(dir.join("chat_template.jinja"), CHATML).unwrap();
        dir
    })
}

fn start(max_batch: usize, queue: usize) -> Server {
    let mut opts = ServeOptions::new(model_dir().to_path_buf(), Device::Cpu, DType::F32);
    (opts.port, opts.max_batch, opts.queue, opts.prefill_chunk) = (0, max_batch, queue, 8);
    Server::start(opts).unwrap()
}

fn url(server: &Server, path: &str) -> String {
    format!("http://{}{path}", server.addr())
}

async fn post(client: &Client, server: &Server, path: &str, body: Value) -> (StatusCode, Value) {
    let r = client.post(url(server, path)).json(&body).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

/// The `data:` payloads of a server-sent event stream, as they arrive.
struct Events {
    response: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(client: &Client, server: &Server, path: &str, body: Value) -> Events {
        let response = client.post(url(server, path)).json(&body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let kind = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Events { response, buf: String::new() }
    }

    async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data =
                    event.lines().filter_map(|l| l.strip_prefix("data: ")).collect::<Vec<_>>().join("\n");
                return Some(data);
            }
            let chunk = self.response.chunk().await.unwrap()?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Every chunk up to `[DONE]` (which must come).
    async fn all(mut self) -> Vec<Value> {
        let mut chunks = vec![];
        while let Some(data) = self.next().await {
            if data == "[DONE]" {
                assert!(self.next().await.is_none(), "nothing after [DONE]");
                return chunks;
            }
            chunks.push(serde_json::from_str(&data).unwrap());
        }
        panic!("the stream ended without [DONE]: {chunks:?}");
    }
}

/// A gauge or counter of /metrics.
async fn metric(client: &Client, server: &Server, name: &str) -> f64 {
    let text = client.get(url(server, "/metrics")).send().await.unwrap().text().await.unwrap();
    let line =
        text.lines().find(|l| l.starts_with(&format!("kiln_{name} "))).unwrap_or_else(|| panic!("{text}"));
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

/// Waits (up to 10 s) until no sequence runs and no KV block is held.
async fn assert_idle(client: &Client, server: &Server) {
    let t0 = Instant::now();
    loop {
        let (running, blocks) = (
            metric(client, server, "running_sequences").await,
            metric(client, server, "kv_blocks_in_use").await,
        );
        if running == 0.0 && blocks == 0.0 {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still {running} sequences, {blocks} KV blocks in use"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Greedy text of `prompt` (encoded as /v1/completions encodes it) from
/// `kiln_models::generate` run directly, and its token count.
fn reference(prompt: &str, max_tokens: usize) -> (String, usize) {
    let tok = Tokenizer::load(model_dir()).unwrap();
    let model = Model::load(model_dir(), Device::Cpu, DType::F32).unwrap();
    let ids = tok.encode(prompt, true).unwrap();
    let mut stream = tok.stream();
    let mut text = String::new();
    let stats = kiln_models::generate(&model, &ids, &GenerateOptions::greedy(max_tokens, vec![]), |id| {
        text.push_str(&stream.push(id)?);
        Ok(())
    })
    .unwrap();
    (text, stats.tokens.len())
}

fn greedy(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": "qwen3", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_streamed_or_not_equal_generate() {
    let server = start(4, 8);
    let client = Client::new();
    let (want, n) = reference("The quick brown fox", 20);
    assert_eq!(n, 20, "the fixture has no end-of-sequence token");

    let (status, body) = post(&client, &server, "/v1/completions", greedy("The quick brown fox", 20)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], want.as_str());
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    let prompt_tokens =
        Tokenizer::load(model_dir()).unwrap().encode("The quick brown fox", true).unwrap().len();
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20})
    );

    let mut req = greedy("The quick brown fox", 20);
    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let chunks = Events::open(&client, &server, "/v1/completions", req).await.all().await;
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
    assert_eq!(text, want);
    assert!(chunks.len() > 3, "the text came in pieces: {chunks:?}");
    let (last, usage) = (&chunks[chunks.len() - 2], &chunks[chunks.len() - 1]);
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(usage["usage"], body["usage"]);

    let models: Value = client.get(url(&server, "/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["object"], "model");
    let health = client.get(url(&server, "/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(metric(&client, &server, "generated_tokens_total").await, 40.0);
    assert_eq!(metric(&client, &server, "requests_total").await, 2.0);
    assert_idle(&client, &server).await;
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_apply_the_template_and_stop_strings() {
    let server = start(4, 8);
    let client = Client::new();
    let messages =
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]);
    let rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
    // The chat prompt is the rendered template, encoded without added special tokens
    // (the qwen3 tokenizer adds none, so `reference` encodes it the same way).
    let (want, _) = reference(rendered, 16);
    let req = json!({"messages": messages, "max_completion_tokens": 16, "temperature": 0, "seed": 3});
    let (status, body) = post(&client, &server, "/v1/chat/completions", req.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": want}));

    let mut streamed = req.clone();
    streamed["stream"] = json!(true);
    let chunks = Events::open(&client, &server, "/v1/chat/completions", streamed).await.all().await;
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, want);

    // A stop string from the middle of an output: the text ends just before it.
    let (want, _) = reference("The quick brown fox", 16);
    let chars: Vec<char> = want.chars().collect();
    assert!(chars.len() > 4, "{want:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = &want[..want.find(&stop).unwrap()];
    for stream in [false, true] {
        let mut r = greedy("The quick brown fox", 16);
        (r["stop"], r["stream"]) = (json!([stop, "never appears"]), json!(stream));
        let (text, reason) = if stream {
            let chunks = Events::open(&client, &server, "/v1/completions", r).await.all().await;
            let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
            (text, chunks.last().unwrap()["choices"][0]["finish_reason"].clone())
        } else {
            let (status, body) = post(&client, &server, "/v1/completions", r).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            (
                body["choices"][0]["text"].as_str().unwrap().to_string(),
                body["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!((text.as_str(), reason), (cut, json!("stop")), "stream: {stream}, stop {stop:?}");
    }
    assert_idle(&client, &server).await;
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_greedy_requests_equal_one_at_a_time() {
    // 16 decode slots for 32 requests: some wait, and all join and leave at different steps.
    let server = start(16, 64);
    let client = Client::new();
    let requests: Vec<Value> = (0..32)
        .map(|i| greedy(&format!("Request {i}: {}", "tell me more ".repeat(i % 5)), 4 + (i * 7) % 24))
        .collect();
    let mut alone = vec![];
    for r in &requests {
        let (status, body) = post(&client, &server, "/v1/completions", r.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        alone.push(body["choices"][0]["text"].as_str().unwrap().to_string());
    }
    let started = metric(&client, &server, "requests_total").await;
    let together = futures_util::future::join_all(requests.iter().map(|r| {
        let (client, r) = (client.clone(), r.clone());
        let server = &server;
        async move {
            let (status, body) = post(&client, server, "/v1/completions", r).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            body["choices"][0]["text"].as_str().unwrap().to_string()
        }
    }))
    .await;
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, t, "request {i}: alone vs with 31 others");
    }
    assert_eq!(metric(&client, &server, "requests_total").await, started + 32.0);
    assert_idle(&client, &server).await;
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_400_with_an_openai_error() {
    let server = start(2, 4);
    let client = Client::new();
    let long = "word ".repeat(CONTEXT + 10);
    let cases: [(&str, Value, Option<&str>); 12] = [
        ("/v1/completions", json!({"prompt": "hi", "max_tokens": 0}), Some("max_tokens")),
        ("/v1/completions", json!({"prompt": "hi", "max_tokens": 1_000_000}), Some("max_tokens")),
        ("/v1/completions", json!({"prompt": long, "max_tokens": 4}), Some("prompt")),
        ("/v1/completions", json!({"prompt": "hi", "frobnicate": true}), Some("frobnicate")),
        ("/v1/completions", json!({"prompt": "hi", "n": 2}), Some("n")),
        ("/v1/completions", json!({"prompt": "hi", "temperature": "hot"}), Some("temperature")),
        ("/v1/completions", json!({"prompt": "hi", "temperature": 7}), Some("temperature")),
        ("/v1/completions", json!({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}), Some("stop")),
        ("/v1/completions", json!({"max_tokens": 4}), Some("prompt")),
        ("/v1/completions", json!(["not", "an", "object"]), None),
        ("/v1/chat/completions", json!({"messages": []}), Some("messages")),
        ("/v1/chat/completions", json!({"prompt": "hi"}), Some("prompt")),
    ];
    for (path, body, param) in cases {
        let (status, err) = post(&client, &server, path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{err}");
        assert!(err["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{err}");
        assert_eq!(err["error"]["param"], json!(param), "{body}: {err}");
        assert!(err["error"].as_object().unwrap().contains_key("code"), "{err}");
    }
    let r = client.post(url(&server, "/v1/completions")).body("{\"prompt\": ").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let err: Value = r.json().await.unwrap();
    assert!(err["error"]["message"].as_str().unwrap().contains("not valid JSON"), "{err}");
    assert_eq!(metric(&client, &server, "requests_invalid_total").await, 13.0);
    assert_eq!(metric(&client, &server, "requests_total").await, 0.0);
    assert_idle(&client, &server).await;
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_503_and_a_client_that_leaves_frees_its_sequence() {
    // One sequence at a time, one place in the queue.
    let server = start(1, 1);
    let client = Client::new();
    let long = 2000;
    // Greedy to `long` without an end-of-sequence token on the fixture: had the stream
    // below not been cut off, it would have generated all of these.
    let mut a = greedy("Tell me a long story", long);
    a["stream"] = json!(true);
    let mut events = Events::open(&client, &server, "/v1/completions", a).await;
    let first = events.next().await.unwrap();
    assert!(first.contains("\"text\""), "{first}");
    // B waits in the queue behind A...
    let b = tokio::spawn({
        let (client, u) = (client.clone(), url(&server, "/v1/completions"));
        async move { client.post(u).json(&greedy("Then B", 5)).send().await.unwrap() }
    });
    let t0 = Instant::now();
    while metric(&client, &server, "queue_depth").await != 1.0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "B never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ... so C finds the queue full.
    let c = client.post(url(&server, "/v1/completions")).json(&greedy("C", 5)).send().await.unwrap();
    assert_eq!(c.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(c.headers()["retry-after"], "1");
    let err: Value = c.json().await.unwrap();
    assert_eq!(err["error"]["code"], "queue_full", "{err}");
    assert_eq!(metric(&client, &server, "requests_rejected_total").await, 1.0);
    assert!(metric(&client, &server, "kv_blocks_in_use").await > 0.0);

    // A's client leaves mid-stream: its sequence ends, B runs.
    drop(events);
    let b = b.await.unwrap();
    assert_eq!(b.status(), StatusCode::OK);
    let b: Value = b.json().await.unwrap();
    assert_eq!(b["usage"]["completion_tokens"], 5);
    assert_idle(&client, &server).await;
    let generated = metric(&client, &server, "generated_tokens_total").await;
    assert!(generated < (long / 2) as f64, "{generated} tokens: A's sequence ran on after its client left");
    server.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_lets_open_streams_finish() {
    // What Ctrl-C does: no new connections, open requests run to their end.
    let server = start(2, 4);
    let client = Client::new();
    let mut r = greedy("Drain me", 300);
    r["stream"] = json!(true);
    let mut events = Events::open(&client, &server, "/v1/completions", r).await;
    assert!(events.next().await.is_some());
    let addr = server.addr();
    let stopping = tokio::task::spawn_blocking(move || server.stop());
    let rest = events.all().await;
    assert_eq!(rest.last().unwrap()["choices"][0]["finish_reason"], "length");
    stopping.await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the port is closed after the drain");
}

/// A GGUF file served as `kiln generate` runs it: SmolLM2-135M-Instruct's Q4_1 file (from
/// `kiln_models::fetch`, skipped with the reason when it cannot be had), dequantised to
/// f32, its tokenizer and chat template from the metadata. The greedy outputs are
/// llama.cpp's tokens for the same prompts (`kiln-models/tests/smollm2_gguf.rs` says how
/// they were made), decoded by the file's tokenizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gguf_file_serves_llama_cpp_s_greedy_tokens() {
    let path = match kiln_models::fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: SmolLM2-135M GGUF not available ({why})");
            return;
        }
    };
    let tok = kiln_models::Checkpoint::open(&path).unwrap().tokenizer().unwrap();
    let text = |ids: &[u32]| {
        let mut stream = tok.stream();
        ids.iter().map(|&id| stream.push(id).unwrap()).collect::<String>()
    };
    let mut opts = ServeOptions::new(path, Device::Cpu, DType::F32);
    opts.port = 0;
    let server = Server::start(opts).unwrap();
    let client = Client::new();

    // " Paris.\n\nThe answer is: 201", 12 tokens (no end of sequence).
    let paris = [7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33];
    let req = json!({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0});
    let (status, body) = post(&client, &server, "/v1/completions", req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["text"], text(&paris).as_str());
    assert_eq!(body["choices"][0]["finish_reason"], "length");

    // The file's chat template (with its default system prompt); the reply ends at the
    // end-of-sequence token (id 2), which is not part of the text.
    let four = [504, 2988, 288, 451, 8170, 4119, 1732, 314, 216, 36, 30];
    let req = json!({"messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 12, "temperature": 0});
    let (status, body) = post(&client, &server, "/v1/chat/completions", req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], text(&four).as_str());
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_idle(&client, &server).await;
    server.stop().unwrap();
}
