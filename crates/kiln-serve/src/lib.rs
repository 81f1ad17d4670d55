//! `kiln serve`: an OpenAI-compatible HTTP server (axum on tokio) for one model.
//!
//! One engine thread owns the model ([`engine`]); the HTTP handlers ([`routes`]) check
//! requests ([`api`]) and talk to it through channels. Sequences join and leave the decode
//! batch between steps, prompts are prefilled in chunks between decode steps, and each
//! sequence's KV cache is accounted in blocks of one shared pool ([`blocks`]).

pub mod api;
pub mod blocks;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod routes;
pub mod stop;

use api::ModelInfo;
use engine::{Engine, Limits};
use kiln::{DType, Device, Error, Result};
use kiln_models::tokenizer::Tokenizer;
use kiln_models::{Checkpoint, GenerationConfig, Quantize, SamplingParams};
use metrics::Metrics;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// How to serve a model.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Hugging Face model folder (config.json, *.safetensors, tokenizer.json, and a chat
    /// template for `/v1/chat/completions`), or a GGUF file or a folder holding one
    /// ([`Checkpoint::open`]).
    pub model: PathBuf,
    /// Address to listen on.
    pub host: String,
    /// Port to listen on (0: any free one, see [`Server::addr`]).
    pub port: u16,
    /// Where the model runs.
    pub device: Device,
    /// Weights' and activations' dtype.
    pub dtype: DType,
    /// Most sequences in prefill or decode at once.
    pub max_batch: usize,
    /// Requests that may wait to start; more are answered 503.
    pub queue: usize,
    /// KV blocks in the pool (default: enough for `max_batch` sequences of the whole context).
    pub kv_blocks: Option<usize>,
    /// Positions per KV block.
    pub block_size: usize,
    /// Prompt tokens prefilled between two decode steps.
    pub prefill_chunk: usize,
}

impl ServeOptions {
    /// Options for `model` on `device` in `dtype`, listening on 127.0.0.1:8080, a batch of
    /// 32, a queue of 256, blocks of 16 positions, prefill chunks of 256 tokens.
    pub fn new(model: PathBuf, device: Device, dtype: DType) -> Self {
        ServeOptions {
            model,
            host: "127.0.0.1".into(),
            port: 8080,
            device,
            dtype,
            max_batch: 32,
            queue: 256,
            kv_blocks: None,
            block_size: 16,
            prefill_chunk: 256,
        }
    }
}

/// A running server: its address, and a way to stop it.
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: JoinHandle<Result<()>>,
}

impl Server {
    /// Loads the model, binds the address and starts serving (on threads of its own);
    /// returns once requests can be answered.
    pub fn start(opts: ServeOptions) -> Result<Server> {
        if opts.max_batch == 0 || opts.queue == 0 || opts.block_size == 0 || opts.prefill_chunk == 0 {
            return Err(Error::invalid(
                "serve",
                "max_batch, queue, block_size and prefill_chunk must be ≥ 1",
            ));
        }
        let checkpoint = Checkpoint::open(&opts.model)?;
        let config = checkpoint.config()?;
        let gen = checkpoint.generation_config(&config)?;
        let tokenizer = Arc::new(checkpoint.tokenizer()?);
        let template = match checkpoint.chat_template() {
            Ok(Some(t)) => Some(t),
            Ok(None) => {
                tracing::warn!("/v1/chat/completions is off: the model has no chat template");
                None
            }
            Err(e) => {
                tracing::warn!("/v1/chat/completions is off: {e}");
                None
            }
        };
        let model_context = config.max_position_embeddings.min(kiln_models::decoder::MAX_POSITIONS);
        let kv_blocks = opts.kv_blocks.unwrap_or(opts.max_batch * model_context.div_ceil(opts.block_size));
        let limits = Limits {
            max_batch: opts.max_batch,
            prefill_chunk: opts.prefill_chunk,
            block_size: opts.block_size,
            kv_blocks,
        };
        let metrics = Arc::new(Metrics::default());
        let (jobs, engine) =
            spawn_engine(&opts, gen.eos_token_ids.clone(), tokenizer.clone(), limits, metrics.clone())?;

        let info = ModelInfo {
            name: checkpoint.name(),
            // A sequence fits the model's positions and the whole pool.
            context: model_context.min(kv_blocks * opts.block_size),
            tokenizer,
            template,
            defaults: default_sampling(&gen),
        };
        let state = Arc::new(routes::AppState::new(info, jobs, metrics, opts.queue));
        let place = format!("{}:{}", opts.host, opts.port);
        let io = move |e: std::io::Error| Error::Io { path: place.clone(), source: e };
        // Bound here, outside any runtime, so that `start` may be called from async code.
        let listener = std::net::TcpListener::bind((opts.host.as_str(), opts.port)).map_err(&io)?;
        listener.set_nonblocking(true).map_err(&io)?;
        let addr = listener.local_addr().map_err(&io)?;
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(&io)?;
        let (stop, stopped) = oneshot::channel();
        let thread_io = io.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-http".into())
            .spawn(move || {
                let shutdown = async {
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: finishing open requests"),
                        _ = stopped => {}
                    }
                };
                let served = rt.block_on(async {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    axum::serve(listener, routes::router(state)).with_graceful_shutdown(shutdown).await
                });
                // The router (and with it the job sender) is gone: the engine ends once idle.
                let joined = engine.join().map_err(|_| Error::invalid("serve", "the engine thread panicked"));
                served.map_err(thread_io)?;
                joined
            })
            .map_err(&io)?;
        Ok(Server { addr, stop: Some(stop), thread })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking connections, lets open requests finish, and waits for the end.
    pub fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wait()
    }

    /// Waits until the server ends (Ctrl-C, or [`Server::stop`] from elsewhere).
    pub fn wait(self) -> Result<()> {
        self.thread.join().map_err(|_| Error::invalid("serve", "the server thread panicked"))?
    }
}

/// Starts the engine thread, which loads the model; returns once it is loaded.
fn spawn_engine(
    opts: &ServeOptions,
    eos: Vec<u32>,
    tokenizer: Arc<Tokenizer>,
    limits: Limits,
    metrics: Arc<Metrics>,
) -> Result<(std::sync::mpsc::Sender<engine::Job>, JoinHandle<()>)> {
    let (jobs, jobs_rx) = std::sync::mpsc::channel();
    let (loaded_tx, loaded) = std::sync::mpsc::channel();
    let (path, device, dtype) = (opts.model.clone(), opts.device, opts.dtype);
    let load = move || Checkpoint::open(&path)?.load(device, dtype, Quantize::None);
    let engine = std::thread::Builder::new()
        .name("kiln-engine".into())
        .spawn(move || match load() {
            Ok(model) => {
                let _ = loaded_tx.send(Ok(()));
                Engine::new(model, &tokenizer, eos, limits, metrics).run(jobs_rx);
            }
            Err(e) => {
                let _ = loaded_tx.send(Err(e));
            }
        })
        .map_err(|e| Error::Io { path: "kiln-engine thread".into(), source: e })?;
    loaded.recv().map_err(|_| Error::invalid("serve", "the engine thread ended while loading"))??;
    Ok((jobs, engine))
}

/// Sampling for requests that set none: the model's generation_config.json where it
/// samples, else OpenAI's defaults (temperature 1, no top-k or top-p).
fn default_sampling(gen: &GenerationConfig) -> SamplingParams {
    let sample = |v: Option<f64>, off: f64| v.filter(|_| gen.do_sample).unwrap_or(off);
    SamplingParams {
        temperature: sample(gen.temperature, 1.0),
        top_k: gen.top_k.filter(|_| gen.do_sample).unwrap_or(0),
        top_p: sample(gen.top_p, 1.0),
        repetition_penalty: gen.repetition_penalty.unwrap_or(1.0),
        seed: 0,
    }
}

/// Serves until Ctrl-C, then lets open requests finish.
pub fn run(opts: ServeOptions) -> Result<()> {
    let (device, dtype) = (opts.device, opts.dtype);
    let server = Server::start(opts)?;
    eprintln!("serving on http://{} ({dtype} on {device}); Ctrl-C stops", server.addr());
    server.wait()
}
