//! Model families built on kiln tensors: Hugging Face checkpoint loading (config,
//! safetensors, tokenizer, chat template; Hub ids from the Hugging Face cache), the Llama /
//! Qwen3 / Qwen3-MoE / LFM2-MoE / Qwen3.5-MoE decoders, a pre-allocated KV cache and the
//! convolution / recurrent layer states, on-device
//! sampling, decode steps replayed as CUDA graphs and the generate loop; the Wan video VAE.

pub mod causal_conv;
pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod config_check;
pub mod decoder;
pub mod fetch;
pub mod fp8_weight;
pub mod gated_delta;
pub mod generate;
pub mod gguf;
pub mod golden;
pub mod graph_decode;
pub mod hub;
pub mod kv_cache;
pub mod layers;
pub mod loader;
pub mod moe;
pub mod parallel;
pub mod sampling;
pub mod short_conv;
pub mod state;
pub mod tokenizer;
pub mod wan_vae;

pub use checkpoint::Checkpoint;
pub use config::{Arch, Config, GenerationConfig};
pub use decoder::Model;
pub use fp8_weight::Fp8Weight;
pub use generate::{generate, GenerateOptions, GenerateStats};
pub use layers::{LinearWeight, WeightBytes};
pub use loader::Quantize;
pub use sampling::SamplingParams;
