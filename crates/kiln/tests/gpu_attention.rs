//! The decode attention kernel (`cuda/ops/attention_decode.rs`) against the composed
//! `scaled_dot_product_attention` on the CPU, in f32 from the same inputs: every head dim,
//! GQA / MQA / MHA, 1–8 queries, top-left causal, odd key counts, 1 and 32K keys, cache
//! views (positions 0..n of a larger capacity), the length read from the device (`kv_len`),
//! and a captured CUDA graph replayed after the length changed. See `common/mod.rs`.

use kiln::cuda::ops::attention_decode;
use kiln::testing::{e, sdpa_matches_cpu, Case, Ctx, Pair};
use kiln::{DType, Device, Sdpa, Tensor};
use std::process::ExitCode;

type Res = std::result::Result<(), String>;

const CPU: Device = Device::Cpu;

/// The kernel's dtypes and a tolerance each (relative to the output's largest magnitude):
/// it computes in f32 from the same inputs as the CPU reference, so only its output
/// rounding and summation order differ.
const DTYPES: [(DType, f64); 2] = [(DType::BF16, 1.6e-2), (DType::F16, 2e-3)];

/// The GPU result (checked to come from the kernel) against the CPU composed path on the
/// f32 inputs, `k` and `v` narrowed to `n` keys on the CPU side when given.
fn check(name: &str, q: Pair, (k, kc): Pair, (v, vc): Pair, o: &Sdpa, n: Option<usize>, tol: f64) -> Res {
    if let Err(why) = attention_decode::declines(q.0.layout(), k.layout(), v.layout(), q.0.dtype()) {
        return Err(format!("{name}: the kernel declined ({why})"));
    }
    let keys = |t: &Tensor| n.map_or(Ok(t.clone()), |n| t.narrow(-2, 0, n)).map_err(e);
    let (kc, vc) = (keys(kc)?, keys(vc)?);
    let oc = Sdpa { kv_len: None, ..*o };
    sdpa_matches_cpu(name, q, (k, &kc), (v, &vc), o, &oc, tol)
}

/// Head layouts (Hq, Hkv, L, S, causal) at every head dim and dtype.
fn shapes(cx: &mut Ctx) -> Res {
    let layouts = [
        (32, 8, 1, 1000, false), // Llama GQA
        (8, 1, 3, 37, false),    // MQA, 3 queries
        (4, 4, 1, 129, false),   // MHA
        (3, 3, 2, 64, false),    // MHA, 2 queries: 2 rows in a tile of 4
        (16, 2, 8, 333, false),  // 64 query rows: 8 tiles of 8
        (6, 2, 5, 9, true),      // causal, top-left with L < S
        (4, 2, 7, 5, true),      // causal with L > S
        (2, 1, 1, 1, false),     // one key
    ];
    for (dt, tol) in DTYPES {
        for d in attention_decode::HEAD_DIMS {
            for (hq, hkv, l, s, causal) in layouts {
                let (q, qc) = cx.pair(&[2, hq, l, d], dt, 1.0).map_err(e)?;
                let (k, kc) = cx.pair(&[2, hkv, s, d], dt, 1.0).map_err(e)?;
                let (v, vc) = cx.pair(&[2, hkv, s, d], dt, 1.0).map_err(e)?;
                let o = Sdpa { is_causal: causal, enable_gqa: true, ..Sdpa::default() };
                let name = format!("{dt} d{d} {hq}q/{hkv}kv L{l} S{s} causal={causal}");
                check(&name, (&q, &qc), (&k, &kc), (&v, &vc), &o, None, tol)?;
            }
        }
    }
    Ok(())
}

/// 32K keys (64 splits per group, merged by the second kernel) and keys and values as views of positions
/// 0..n of a cache of larger capacity, with the batch of keys broadcast and a scale.
fn long_and_views(cx: &mut Ctx) -> Res {
    let (q, qc) = cx.pair(&[1, 8, 1, 128], DType::BF16, 1.0).map_err(e)?;
    let (k, kc) = cx.pair(&[1, 2, 32768, 128], DType::BF16, 1.0).map_err(e)?;
    let (v, vc) = cx.pair(&[1, 2, 32768, 128], DType::BF16, 1.0).map_err(e)?;
    let o = Sdpa { enable_gqa: true, ..Sdpa::default() };
    check("bf16 32K keys", (&q, &qc), (&k, &kc), (&v, &vc), &o, None, 1.6e-2)?;
    for (dt, tol) in DTYPES {
        let (q, qc) = cx.pair(&[3, 12, 2, 96], dt, 1.0).map_err(e)?;
        let (k, kc) = cx.pair(&[1, 4, 700, 96], dt, 1.0).map_err(e)?;
        let (v, vc) = cx.pair(&[1, 4, 700, 96], dt, 1.0).map_err(e)?;
        let view = |t: &Tensor| t.narrow(2, 0, 411);
        let o = Sdpa { enable_gqa: true, scale: Some(0.05), ..Sdpa::default() };
        check(
            &format!("{dt} cache view 411 of 700, batch broadcast"),
            (&q, &qc),
            (&view(&k).map_err(e)?, &view(&kc).map_err(e)?),
            (&view(&v).map_err(e)?, &view(&vc).map_err(e)?),
            &o,
            None,
            tol,
        )?;
    }
    Ok(())
}

/// `kv_len` on the device: shorter than the view, 0 (every row 0), past it (clamped), and
/// with top-left causal; the composed CPU path with `kv_len` agrees with narrowing.
fn device_length(cx: &mut Ctx) -> Res {
    for (dt, tol) in DTYPES {
        let (q, qc) = cx.pair(&[1, 8, 2, 64], dt, 1.0).map_err(e)?;
        let (k, kc) = cx.pair(&[1, 2, 513, 64], dt, 1.0).map_err(e)?;
        let (v, vc) = cx.pair(&[1, 2, 513, 64], dt, 1.0).map_err(e)?;
        for (n, causal) in [(300, false), (0, false), (5000, false), (1, true), (77, true)] {
            let len = Tensor::from_vec(vec![n as i32], &[1], CPU).map_err(e)?;
            let len_gpu = len.to_device(cx.dev).map_err(e)?;
            let o = Sdpa { kv_len: Some(&len_gpu), is_causal: causal, enable_gqa: true, ..Sdpa::default() };
            let name = format!("{dt} kv_len {n} of 513 causal={causal}");
            check(&name, (&q, &qc), (&k, &kc), (&v, &vc), &o, Some(n.min(513)), tol)?;
            // The CPU's composed kv_len is the same masking.
            let oc = Sdpa { kv_len: Some(&len), ..o };
            let composed = qc.scaled_dot_product_attention(&kc, &vc, &oc).map_err(e)?;
            let narrowed = Sdpa { kv_len: None, ..oc };
            let cut = |t: &Tensor| t.narrow(2, 0, n.min(513));
            let want = qc
                .scaled_dot_product_attention(&cut(&kc).map_err(e)?, &cut(&vc).map_err(e)?, &narrowed)
                .map_err(e)?;
            kiln::testing::same(&format!("{name} (CPU composed)"), &composed, &want, 1e-6)?;
        }
    }
    Ok(())
}

/// One capture, replayed after the length on the device grew: the output follows it.
fn graph_replay(cx: &mut Ctx) -> Res {
    let dev = kiln::cuda::device(0).map_err(e)?;
    let (q, qc) = cx.pair(&[1, 32, 1, 128], DType::BF16, 1.0).map_err(e)?;
    let (k, kc) = cx.pair(&[1, 8, 4096, 128], DType::BF16, 1.0).map_err(e)?;
    let (v, vc) = cx.pair(&[1, 8, 4096, 128], DType::BF16, 1.0).map_err(e)?;
    let len = Tensor::from_vec(vec![17i32], &[1], CPU).and_then(|t| t.to_device(cx.dev)).map_err(e)?;
    let o = Sdpa { kv_len: Some(&len), enable_gqa: true, ..Sdpa::default() };
    q.scaled_dot_product_attention(&k, &v, &o).map_err(e)?; // kernels loaded off the capture
    dev.begin_capture().map_err(e)?;
    let captured = q.scaled_dot_product_attention(&k, &v, &o);
    let graph = dev.end_capture().map_err(e)?;
    let y = captured.map_err(e)?;
    for n in [17usize, 18, 2049, 4096] {
        let now = Tensor::from_vec(vec![n as i32], &[1], CPU).and_then(|t| t.to_device(cx.dev)).map_err(e)?;
        len.copy_(&now).map_err(e)?;
        graph.replay().map_err(e)?;
        let cut = |t: &Tensor| t.narrow(2, 0, n).and_then(|t| t.to_dtype(DType::F32));
        let want = qc
            .to_dtype(DType::F32)
            .and_then(|q| {
                q.scaled_dot_product_attention(
                    &cut(&kc)?,
                    &cut(&vc)?,
                    &Sdpa { enable_gqa: true, ..Sdpa::default() },
                )
            })
            .and_then(|t| t.to_dtype(DType::BF16))
            .map_err(e)?;
        kiln::testing::same(
            &format!("graph replay at length {n}"),
            &y.to_device(CPU).map_err(e)?,
            &want,
            1.6e-2,
        )?;
    }
    Ok(())
}

fn main() -> ExitCode {
    // The kernel is off by default until this test has passed on a GPU.
    let _kernel = kiln::settings::DECODE_ATTENTION.scoped(true);
    let cases: &[Case] = &[
        ("shapes", shapes),
        ("long_and_views", long_and_views),
        ("device_length", device_length),
        ("graph_replay", graph_replay),
    ];
    kiln::testing::run("gpu_attention", cases)
}
