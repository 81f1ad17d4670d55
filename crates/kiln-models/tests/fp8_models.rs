//! FP8-weight models on the CPU, with the fixture models of fixtures/models:
//! `--quantize fp8` against the dense model (logits and weight bytes), FP8 checkpoints as
//! Hugging Face stores them (`weight_scale` / `weight_scale_inv`, per row, per tensor,
//! 128×128 blocks) against `--quantize fp8`, and the load errors of a bad FP8 checkpoint.

use kiln::fp8::{self, Granularity};
use kiln::{DType, Device, Tensor};
use kiln_models::config::{fixtures_dir, Config, MixerKind};
use kiln_models::{Model, Quantize, WeightBytes};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The families whose fixture checkpoints the FP8-checkpoint tests rewrite (linear weights
/// named `*_proj.weight`).
const ARCHS: [&str; 3] = ["llama", "qwen3", "qwen3_moe"];
/// The families `--quantize fp8` is checked on: all of them.
const QUANTIZE_ARCHS: [&str; 5] = ["llama", "qwen3", "qwen3_moe", "lfm2_moe", "qwen3_5_moe"];
const CPU: Device = Device::Cpu;

/// FP8 against dense: max |Δlogit| ≤ `fp8_rel_tol(arch)` · max |dense logit|. e4m3 keeps
/// 3 mantissa bits, so each weight and (per-row quantised) activation is off by up to
/// 2^-4 relative; through the fixtures' 2 layers (7 linears each) to the LM head this
/// measured (bf16, `--quantize fp8` vs dense, max |logit| ≈ 2.3–2.5): llama 9.5 %, qwen3
/// 11.8 %, and 25 % for qwen3_moe, where the perturbed hidden states flip some tokens'
/// top-2 expert choice (the FP8 expert path itself is checked against dequantised dense
/// experts in the moe module's unit tests). The per-tensor and block-scale checkpoints measured
/// 10–27 %. lfm2_moe measured 29 % and qwen3_5_moe 51 % (its random DeltaNet layers
/// amplify perturbations: see golden.rs). The bounds leave ~1.6× margin over the worst
/// measurement and still fail on a missing or wrong scale (off by ≥ 100 %), a mis-fused
/// or transposed weight, or a wrong expert (differences of the order of 2 × max |logit|).
fn fp8_rel_tol(arch: &str) -> f64 {
    match arch {
        "qwen3_moe" | "lfm2_moe" => 0.45,
        "qwen3_5_moe" => 0.8,
        _ => 0.2,
    }
}

fn rms(a: &[f32]) -> f64 {
    (a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / a.len() as f64).sqrt()
}

fn rms_diff(a: &[f32], b: &[f32]) -> f64 {
    (a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum::<f64>() / a.len() as f64).sqrt()
}

fn fixture(arch: &str) -> PathBuf {
    fixtures_dir().join("models").join(arch)
}

/// The golden prompt of the fixture, `[1, T]` int64.
fn input_ids(dir: &Path) -> Tensor {
    let g = kiln::io::safetensors::load(dir.join("golden.safetensors"), CPU).unwrap();
    g["input_ids"].clone()
}

/// Prefill logits of the golden prompt, as f32 values.
fn prefill(model: &Model, ids: &Tensor) -> Vec<f32> {
    let mut cache = model.new_cache(1, ids.shape()[1]).unwrap();
    let h = model.forward(ids, &mut cache).unwrap();
    model.logits(&h).unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

fn max_abs(a: &[f32]) -> f64 {
    a.iter().map(|x| x.abs() as f64).fold(0.0, f64::max)
}

fn max_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, |m, d| if d.is_nan() { f64::NAN } else { m.max(d) })
}

/// Σ N (output features) over every linear weight of the model: the mixer's projections
/// (attention: q (twice with an output gate), k, v, o; short conv: in 3·H, out H; Gated
/// DeltaNet: qkv, z, b, a, out), the dense MLP (gate_up fused: 2·I) or each expert's
/// gate_up and down, and a shared expert's.
fn sum_out_features(cfg: &Config) -> usize {
    let (h, d) = (cfg.hidden_size, cfg.head_dim);
    let q = if cfg.attn_output_gate { 2 } else { 1 } * cfg.num_heads * d;
    (0..cfg.num_layers)
        .map(|i| {
            let mixer = match cfg.mixer(i) {
                MixerKind::Attention => q + 2 * cfg.num_kv_heads * d + h,
                MixerKind::ShortConv => 4 * h,
                MixerKind::GatedDelta => {
                    let g = cfg.gated_delta.as_ref().unwrap();
                    g.conv_channels() + g.value_heads * (g.value_dim + 2) + h
                }
            };
            mixer
                + match (&cfg.moe, cfg.is_moe_layer(i)) {
                    (Some(m), true) => {
                        m.num_experts * (2 * m.intermediate_size + h)
                            + m.shared_expert_intermediate_size.map_or(0, |s| 2 * s + h)
                    }
                    _ => 2 * cfg.intermediate_size + h,
                }
        })
        .sum()
}

/// Issue: `--quantize fp8` gives prefill logits close to the dense model's, and its linear
/// weights take exactly N·K bytes of e4m3 values + 4·N bytes of f32 per-row scales each,
/// i.e. half the bf16 bytes plus the scales.
#[test]
fn quantize_fp8_is_close_to_dense_and_halves_linear_bytes() {
    for arch in QUANTIZE_ARCHS {
        let dir = fixture(arch);
        let ids = input_ids(&dir);
        let dense = Model::load(&dir, CPU, DType::BF16).unwrap();
        let q = Model::load_quantized(&dir, CPU, DType::BF16, Quantize::Fp8).unwrap();
        let (a, b) = (prefill(&dense, &ids), prefill(&q, &ids));
        let (err, scale) = (max_diff(&a, &b), max_abs(&a));
        let (tol, rel_rms) = (fp8_rel_tol(arch), rms_diff(&a, &b) / rms(&a));
        println!(
            "{arch} bf16: fp8 vs dense max |Δlogit| {err:.4} (max |logit| {scale:.3}, {:.2} %), rms Δ / rms logit {:.2} %",
            100.0 * err / scale,
            100.0 * rel_rms
        );
        assert!(err <= tol * scale, "{arch}: max |Δlogit| {err} > {tol} · {scale}");
        // FP8 actually ran: the logits are not bit-identical to the dense ones.
        assert!(err > 0.0, "{arch}: fp8 logits equal the dense ones");

        let (d, f): (WeightBytes, WeightBytes) = (dense.weight_stats(), q.weight_stats());
        let n_sum = sum_out_features(&dense.config);
        println!(
            "{arch}: linear weights {} B bf16 -> {} B fp8 ({:.3}×); all weights {} B -> {} B",
            d.linear,
            f.linear,
            f.linear as f64 / d.linear as f64,
            d.total,
            f.total
        );
        assert_eq!(d.fp8, 0, "{arch}");
        assert_eq!(f.fp8, f.linear, "{arch}: every linear weight is fp8");
        assert_eq!(2 * f.linear, d.linear + 8 * n_sum, "{arch}: fp8 bytes = Σ (N·K + 4·N)");
        assert_eq!(f.total, d.total - d.linear + f.linear, "{arch}: the other weights are unchanged");
    }
}

/// Writes `dir`: the fixture `arch` with each linear weight (names ending `_proj.weight`)
/// replaced by float8_e4m3fn values and a scale made by `scale_for(name, weight)` (None:
/// keep dense), plus config.json (with `quantization_config` for quant_method fp8) and
/// generation_config.json.
fn write_fp8_checkpoint(
    arch: &str,
    dir: &Path,
    mut quantize: impl FnMut(&str, &Tensor) -> Option<(Tensor, String, Tensor)>,
) {
    let src = fixture(arch);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(src.join("generation_config.json"), dir.join("generation_config.json")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg["quantization_config"] = serde_json::json!({
        "quant_method": "fp8", "activation_scheme": "dynamic", "modules_to_not_convert": ["lm_head"],
    });
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let tensors = kiln::io::safetensors::load(src.join("model.safetensors"), CPU).unwrap();
    let mut out: HashMap<String, Tensor> = HashMap::new();
    for (name, t) in tensors {
        match name.ends_with("_proj.weight").then(|| quantize(&name, &t)).flatten() {
            Some((q, sname, s)) => {
                assert_eq!(q.dtype(), DType::F8E4M3);
                out.insert(name, q);
                out.insert(sname, s);
            }
            None => {
                out.insert(name, t);
            }
        }
    }
    let refs: Vec<(&str, &Tensor)> = out.iter().map(|(n, t)| (n.as_str(), t)).collect();
    kiln::io::safetensors::save(dir.join("model.safetensors"), &refs).unwrap();
}

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kiln-fp8-{tag}-{}", std::process::id()))
}

/// Issue: an FP8 checkpoint as Hugging Face stores it loads and runs in FP8. Per-row
/// scales stored as `weight_scale_inv` `[N, 1]` or `weight_scale` `[N]` give exactly the
/// weights `--quantize fp8` makes, so the logits must be equal; with a few per-tensor
/// (scalar) scales mixed in (o_proj, and gate_proj next to a per-row up_proj, which the
/// gate_up fusion must convert), they must stay within the FP8 tolerance.
#[test]
fn fp8_checkpoint_matches_quantize_on_load() {
    for arch in ARCHS {
        let ids = input_ids(&fixture(arch));
        let want =
            prefill(&Model::load_quantized(&fixture(arch), CPU, DType::BF16, Quantize::Fp8).unwrap(), &ids);
        let dense = prefill(&Model::load(&fixture(arch), CPU, DType::BF16).unwrap(), &ids);

        let dir = temp_dir(&format!("{arch}-row"));
        let mut i = 0;
        write_fp8_checkpoint(arch, &dir, |name, w| {
            let (q, s) = fp8::quantize(w, Granularity::Row).unwrap();
            i += 1;
            let n = s.shape()[0];
            Some(if i % 2 == 0 {
                (q, format!("{name}_scale_inv"), s)
            } else {
                (q, format!("{name}_scale"), s.reshape(&[n]).unwrap())
            })
        });
        let m = Model::load(&dir, CPU, DType::BF16).unwrap();
        let st = m.weight_stats();
        assert!(st.fp8 > 0 && st.fp8 == st.linear, "{arch}: {st:?}");
        let got = prefill(&m, &ids);
        let err = max_diff(&got, &want);
        println!("{arch}: per-row fp8 checkpoint vs --quantize fp8: max |Δlogit| {err:e}");
        assert_eq!(err, 0.0, "{arch}: per-row checkpoint differs from --quantize fp8");
        std::fs::remove_dir_all(&dir).ok();

        let dir = temp_dir(&format!("{arch}-tensor"));
        write_fp8_checkpoint(arch, &dir, |name, w| {
            let per_tensor = name.ends_with("o_proj.weight") || name.ends_with("gate_proj.weight");
            let g = if per_tensor { Granularity::Tensor } else { Granularity::Row };
            let (q, s) = fp8::quantize(w, g).unwrap();
            if per_tensor {
                assert_eq!(s.shape(), &[] as &[usize]);
            }
            Some((q, format!("{name}_scale_inv"), s))
        });
        let got = prefill(&Model::load(&dir, CPU, DType::BF16).unwrap(), &ids);
        let (err, scale) = (max_diff(&got, &want), max_abs(&dense));
        let err_dense = max_diff(&got, &dense);
        println!(
            "{arch}: fp8 checkpoint with per-tensor scales vs --quantize fp8: max |Δlogit| {err:.4}, vs dense {err_dense:.4} (max |logit| {scale:.3})"
        );
        assert!(err > 0.0, "{arch}: per-tensor scales were not used");
        let tol = fp8_rel_tol(arch);
        assert!(err <= tol * scale && err_dense <= tol * scale, "{arch}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// `w` `[N, K]` quantised with one scale per 128×128 block, as DeepSeek-V3 / Qwen3-FP8
/// checkpoints store it: e4m3 values and `weight_scale_inv` `[⌈N/128⌉, ⌈K/128⌉]`.
fn quantize_blocks(w: &Tensor) -> (Tensor, Tensor) {
    const B: usize = 128;
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let v = w.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let (sn, sk) = (n.div_ceil(B), k.div_ceil(B));
    let mut scales = vec![0f32; sn * sk];
    for r in 0..n {
        for c in 0..k {
            let s = &mut scales[(r / B) * sk + c / B];
            *s = s.max(v[r * k + c].abs());
        }
    }
    let scales: Vec<f32> = scales.into_iter().map(|a| a.max(1e-12) / 448.0).collect();
    let scaled: Vec<f32> = (0..n * k).map(|i| v[i] / scales[(i / k / B) * sk + (i % k) / B]).collect();
    let q = Tensor::from_vec(scaled, &[n, k], CPU).unwrap().to_dtype(DType::F8E4M3).unwrap();
    (q, Tensor::from_vec(scales, &[sn, sk], CPU).unwrap())
}

/// 128×128 block scales (`[⌈N/128⌉, ⌈K/128⌉]`; the llama fixture's MLP has I = 160, so
/// its gate/up/down scales are [2, 1] and [1, 2] blocks with different scales per block)
/// are converted to per-row scales on load: logits within the FP8 tolerance of the dense
/// model and of `--quantize fp8`.
#[test]
fn fp8_checkpoint_with_block_scales() {
    for arch in ARCHS {
        let ids = input_ids(&fixture(arch));
        let dense = prefill(&Model::load(&fixture(arch), CPU, DType::BF16).unwrap(), &ids);
        let want =
            prefill(&Model::load_quantized(&fixture(arch), CPU, DType::BF16, Quantize::Fp8).unwrap(), &ids);
        let dir = temp_dir(&format!("{arch}-block"));
        let mut multi_block = 0;
        write_fp8_checkpoint(arch, &dir, |name, w| {
            let (q, s) = quantize_blocks(w);
            multi_block += usize::from(s.numel() > 1);
            Some((q, format!("{name}_scale_inv"), s))
        });
        if arch == "llama" {
            assert_eq!(multi_block, 2 * 3, "llama: gate, up, down of 2 layers have 2 blocks");
        }
        let m = Model::load(&dir, CPU, DType::BF16).unwrap();
        assert_eq!(m.weight_stats().fp8, m.weight_stats().linear, "{arch}");
        let got = prefill(&m, &ids);
        let scale = max_abs(&dense);
        let (e_dense, e_q) = (max_diff(&got, &dense), max_diff(&got, &want));
        println!("{arch}: block-scale fp8 checkpoint: max |Δlogit| vs dense {e_dense:.4}, vs --quantize fp8 {e_q:.4} (max |logit| {scale:.3})");
        let tol = fp8_rel_tol(arch);
        assert!(e_dense <= tol * scale && e_q <= tol * scale, "{arch}");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A bad FP8 checkpoint fails with one error naming every bad tensor, as a dense one:
/// a weight without its scale, a mis-shaped FP8 weight, a scale that fits no layout.
#[test]
fn bad_fp8_checkpoints_name_their_tensors() {
    let dir = temp_dir("bad");
    write_fp8_checkpoint("qwen3", &dir, |name, w| {
        let (q, s) = fp8::quantize(w, Granularity::Row).unwrap();
        Some(match name {
            "model.layers.0.self_attn.k_proj.weight" => (q, "unrelated.scale".into(), s),
            "model.layers.1.mlp.up_proj.weight" => {
                (q.reshape(&[64, 128]).unwrap(), format!("{name}_scale_inv"), s)
            }
            "model.layers.1.self_attn.q_proj.weight" => {
                (q, format!("{name}_scale_inv"), Tensor::ones(&[3], DType::F32, CPU).unwrap())
            }
            _ => (q, format!("{name}_scale_inv"), s),
        })
    });
    let e = Model::load(&dir, CPU, DType::BF16).err().expect("must fail").to_string();
    println!("{e}");
    assert!(e.contains("3 bad tensor"), "{e}");
    assert!(e.contains("model.layers.0.self_attn.k_proj.weight: ") && e.contains("weight_scale"), "{e}");
    assert!(e.contains("model.layers.1.mlp.up_proj.weight: [64, 128] float8_e4m3fn"), "{e}");
    assert!(e.contains("model.layers.1.self_attn.q_proj.weight: "), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `quantization_config.modules_to_not_convert` keeps the named layers dense under
/// `--quantize fp8`: exactly their bf16 bytes remain dense.
#[test]
fn modules_to_not_convert_stay_dense() {
    let dir = temp_dir("keep");
    write_fp8_checkpoint("llama", &dir, |_, _| None);
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["quantization_config"]["modules_to_not_convert"] =
        serde_json::json!(["lm_head", "layers.1.self_attn"]);
    std::fs::write(&path, cfg.to_string()).unwrap();
    let m = Model::load_quantized(&dir, CPU, DType::BF16, Quantize::Fp8).unwrap();
    let c = &m.config;
    let (h, qd, kvd) = (c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    let attn_bf16 = 2 * (qd * h + 2 * kvd * h + h * qd);
    let st = m.weight_stats();
    assert_eq!(st.linear - st.fp8, attn_bf16, "{st:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn quantize_option_parses() {
    assert_eq!(Quantize::parse("fp8").unwrap(), Quantize::Fp8);
    assert_eq!("none".parse::<Quantize>().unwrap(), Quantize::None);
    let e = Quantize::parse("int4").unwrap_err().to_string();
    assert!(e.contains("\"int4\"") && e.contains("none, fp8"), "{e}");
}
