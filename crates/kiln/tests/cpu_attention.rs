//! The CPU decode attention (`kiln::cpu::attention`, taken by `scaled_dot_product_attention`
//! for 1–8 queries) against the composed path on random inputs: odd sizes, grouped and
//! plain heads, keys and values read through a narrowed cache view, causal and `kv_len`,
//! f32, f64 (widened to f32) and bf16 / f16 (caches read as stored).

use kiln::settings::DECODE_ATTENTION;
use kiln::{DType, Device, Sdpa, Tensor};

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    assert_eq!(a.len(), b.len());
    a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn decode_attention_matches_composed() {
    let cpu = Device::Cpu;
    let (b, e, ev, cap, s) = (2, 13, 7, 20, 11);
    let len = Tensor::from_vec(vec![7i32], &[1], cpu).unwrap();
    let mut seed = 0;
    for dt in [DType::F32, DType::F64, DType::BF16, DType::F16] {
        for (hq, hkv, gqa) in [(6, 3, true), (4, 4, false)] {
            for l in [1, 3, 8] {
                for (causal, kv_len) in [(false, None), (true, None), (false, Some(&len)), (true, Some(&len))]
                {
                    seed += 3;
                    let q = Tensor::randn(&[b, hq, l, e], seed, dt, cpu).unwrap();
                    // The cache's first s positions, as the KV cache hands them over.
                    let k =
                        Tensor::randn(&[b, hkv, cap, e], seed + 1, dt, cpu).unwrap().narrow(2, 0, s).unwrap();
                    let v = Tensor::randn(&[b, hkv, cap, ev], seed + 2, dt, cpu)
                        .unwrap()
                        .narrow(2, 0, s)
                        .unwrap();
                    let o = Sdpa { is_causal: causal, enable_gqa: gqa, kv_len, ..Sdpa::default() };
                    let fast = q.scaled_dot_product_attention(&k, &v, &o).unwrap();
                    let composed = {
                        let _off = DECODE_ATTENTION.scoped(false);
                        q.scaled_dot_product_attention(&k, &v, &o).unwrap()
                    };
                    assert_eq!(fast.shape(), &[b, hq, l, ev]);
                    assert_eq!(fast.dtype(), dt);
                    // The kernel computes in f32; the composed path rounds scores and
                    // probabilities to the dtype.
                    let tol = match dt {
                        DType::F32 | DType::F64 => 1e-5,
                        DType::F16 => 1e-2,
                        _ => 4e-2,
                    };
                    let d = max_diff(&fast, &composed);
                    assert!(d <= tol, "{dt:?} hq={hq} l={l} causal={causal} kv_len={kv_len:?}: {d}");
                }
            }
        }
    }
}
