//! The prefill (flash) attention kernel (`cuda/ops/attention_prefill.rs`) against the
//! composed `scaled_dot_product_attention` on the CPU, in f32 from the same inputs: every
//! head dim, bf16 and f16, GQA / MQA / MHA, odd L and S (ragged tails, L ≠ S), causal
//! top-left and with offsets (bottom-right, past S, negative), bool and additive masks
//! broadcast over batch and heads with fully masked rows, batch > 1, the strided views the
//! models pass (queries a transposed [B, T, H, D], keys a KV-cache view), and a 32K-token
//! causal prompt that the composed path could not hold (its scores alone: 128 GiB).

use kiln::cuda::ops::attention_prefill;
use kiln::testing::{e, sdpa_matches_cpu, Case, Ctx, Pair};
use kiln::{DType, Device, Sdpa, Tensor};
use std::process::ExitCode;

type Res = std::result::Result<(), String>;

const CPU: Device = Device::Cpu;

/// The kernel's dtypes and a tolerance each (relative to the output's largest magnitude):
/// it computes in f32 from the same inputs as the CPU reference; its probabilities are
/// rounded to the dtype for P·V and its output once.
const DTYPES: [(DType, f64); 2] = [(DType::BF16, 1.6e-2), (DType::F16, 2e-3)];

/// The GPU result with `o` (checked to be the kernel's: it accepts the views and `o` has no
/// `kv_len`) against the CPU composed path on the f32 inputs with `oc` (`o` with CPU masks).
fn check(name: &str, q: Pair, k: Pair, v: Pair, o: &Sdpa, oc: &Sdpa, tol: f64) -> Res {
    if let Err(why) = attention_prefill::declines(q.0.layout(), k.0.layout(), v.0.layout(), q.0.dtype()) {
        return Err(format!("{name}: the kernel declined ({why})"));
    }
    if o.kv_len.is_some() {
        return Err(format!("{name}: kv_len is the composed path's"));
    }
    sdpa_matches_cpu(name, q, k, v, o, oc, tol)
}

/// Head layouts and causality (Hq, Hkv, L, S, causal offset) at every head dim and dtype.
fn shapes(cx: &mut Ctx) -> Res {
    let layouts = [
        (4, 1, 37, 53, None),        // MQA, ragged tails, L < S
        (6, 2, 129, 77, Some(0)),    // GQA, top-left causal with L > S
        (4, 4, 100, 300, Some(200)), // MHA, bottom-right (S − L)
        (4, 2, 200, 64, Some(-50)),  // negative offset: the first 50 rows see no key
        (2, 2, 9, 9, Some(0)),       // the smallest prompt
        (3, 3, 70, 40, Some(100)),   // past S: every key
    ];
    for (dt, tol) in DTYPES {
        for d in attention_prefill::HEAD_DIMS {
            for (hq, hkv, l, s, causal) in layouts {
                let (q, qc) = cx.pair(&[2, hq, l, d], dt, 1.0).map_err(e)?;
                let (k, kc) = cx.pair(&[2, hkv, s, d], dt, 1.0).map_err(e)?;
                let (v, vc) = cx.pair(&[2, hkv, s, d], dt, 1.0).map_err(e)?;
                let o = Sdpa {
                    is_causal: causal.is_some(),
                    causal_offset: causal.unwrap_or(0),
                    enable_gqa: true,
                    ..Sdpa::default()
                };
                let name = format!("{dt} d{d} {hq}q/{hkv}kv L{l} S{s} causal {causal:?}");
                check(&name, (&q, &qc), (&k, &kc), (&v, &vc), &o, &o, tol)?;
            }
        }
    }
    Ok(())
}

/// Bool and additive masks broadcast over batch and heads (and one per query head), a
/// query row that sees no key (0), a float mask of the inputs' dtype, and 5 queries with a
/// mask (the decode kernel takes none).
fn masks(cx: &mut Ctx) -> Res {
    for (dt, tol) in DTYPES {
        for (l, s, d) in [(45, 70, 64), (5, 33, 128), (130, 129, 40)] {
            let (q, qc) = cx.pair(&[2, 6, l, d], dt, 1.0).map_err(e)?;
            let (k, kc) = cx.pair(&[2, 3, s, d], dt, 1.0).map_err(e)?;
            let (v, vc) = cx.pair(&[2, 3, s, d], dt, 1.0).map_err(e)?;
            let dev = cx.dev;
            let gpu = |t: &Tensor| t.to_device(dev);
            // Bool [L, S]: a pattern with row 1 masked whole.
            let keep: Vec<f32> = (0..l * s)
                .map(|i| if i / s == 1 { 0.0 } else { ((i * 7 + i / s) % 3 != 0) as u8 as f32 })
                .collect();
            let keep =
                Tensor::from_vec(keep, &[l, s], CPU).and_then(|t| t.to_dtype(DType::Bool)).map_err(e)?;
            // Additive f32 [B, 1, L, S] (heads broadcast) with -inf entries; [Hq, L, S] in
            // the inputs' dtype (batch broadcast); bool [B, Hq, L, S].
            let (add, addc) = cx.pair(&[2, 1, l, s], DType::F32, 2.0).map_err(e)?;
            let cut = Tensor::from_vec(
                (0..l * s).map(|i| if i % 5 == 0 { f32::NEG_INFINITY } else { 0.0 }).collect(),
                &[l, s],
                CPU,
            )
            .map_err(e)?;
            let addc = addc.add(&cut).map_err(e)?;
            let add = add.add(&gpu(&cut).map_err(e)?).map_err(e)?;
            let (per_head, per_headc) = cx.pair(&[6, l, s], dt, 1.0).map_err(e)?;
            let (full, fullc) = cx.pair(&[2, 6, l, s], DType::F32, 1.0).map_err(e)?;
            let (full, fullc) = (full.gt_scalar(-0.5).map_err(e)?, fullc.gt_scalar(-0.5).map_err(e)?);
            let keep_gpu = gpu(&keep).map_err(e)?;
            let cases: [(&str, &Tensor, &Tensor); 4] = [
                ("bool [L, S]", &keep_gpu, &keep),
                ("additive f32 [B, 1, L, S]", &add, &addc),
                ("additive [Hq, L, S]", &per_head, &per_headc),
                ("bool [B, Hq, L, S]", &full, &fullc),
            ];
            for (what, m, mc) in cases {
                let o = Sdpa { attn_mask: Some(m), enable_gqa: true, ..Sdpa::default() };
                let oc = Sdpa { attn_mask: Some(mc), ..o };
                let name = format!("{dt} d{d} L{l} S{s} {what}");
                check(&name, (&q, &qc), (&k, &kc), (&v, &vc), &o, &oc, tol)?;
            }
            let o = Sdpa { attn_mask: Some(&keep_gpu), enable_gqa: true, ..Sdpa::default() };
            let y = q.scaled_dot_product_attention(&k, &v, &o).map_err(e)?;
            let row1 = y.narrow(2, 1, 1).and_then(|t| t.to_f64_vec()).map_err(e)?;
            if row1.iter().any(|&x| x != 0.0) {
                return Err(format!("{dt} L{l}: the fully masked row is not 0"));
            }
        }
    }
    Ok(())
}

/// The models' operands: queries a transposed `[B, T, Hq, D]` view of the projection, keys
/// and values the first `pos + T` positions of a cache of larger capacity, bottom-right
/// causal by the offset `pos`; and Wan VAE's single head read from a `[N, 1, HW, 3C]` row.
fn model_views(cx: &mut Ctx) -> Res {
    for (dt, tol) in DTYPES {
        let (b, t, pos, cap, hq, hkv, d) = (2, 75, 40, 256, 8, 2, 128);
        let (qkv, qkvc) = cx.pair(&[b, t, hq + 2 * hkv, d], dt, 1.0).map_err(e)?;
        let (kc_, kcc) = cx.pair(&[b, hkv, cap, d], dt, 1.0).map_err(e)?;
        let (vc_, vcc) = cx.pair(&[b, hkv, cap, d], dt, 1.0).map_err(e)?;
        let q = |x: &Tensor| x.narrow(2, 0, hq).and_then(|x| x.transpose(1, 2));
        let cache = |x: &Tensor| x.narrow(2, 0, pos + t);
        let o = Sdpa { is_causal: true, causal_offset: pos as isize, enable_gqa: true, ..Sdpa::default() };
        check(
            &format!("{dt} prompt of {t} after {pos} cached"),
            (&q(&qkv).map_err(e)?, &q(&qkvc).map_err(e)?),
            (&cache(&kc_).map_err(e)?, &cache(&kcc).map_err(e)?),
            (&cache(&vc_).map_err(e)?, &cache(&vcc).map_err(e)?),
            &o,
            &o,
            tol,
        )?;
        let (c, hw) = (64, 300);
        let (x, xc) = cx.pair(&[3, 1, hw, 3 * c], dt, 1.0).map_err(e)?;
        let part = |x: &Tensor, i: usize| x.narrow(3, i * c, c);
        let p = |i| -> std::result::Result<(Tensor, Tensor), String> {
            Ok((part(&x, i).map_err(e)?, part(&xc, i).map_err(e)?))
        };
        let ((q, qc), (k, kc), (v, vc)) = (p(0)?, p(1)?, p(2)?);
        let o = Sdpa::default();
        check(&format!("{dt} Wan VAE attention, d{c}"), (&q, &qc), (&k, &kc), (&v, &vc), &o, &o, tol)?;
    }
    Ok(())
}

/// Many key tiles: Llama-3.1-8B's heads over 1000 causal tokens, a scale of our own.
fn long(cx: &mut Ctx) -> Res {
    let (q, qc) = cx.pair(&[1, 32, 1000, 128], DType::BF16, 1.0).map_err(e)?;
    let (k, kc) = cx.pair(&[1, 8, 1000, 128], DType::BF16, 1.0).map_err(e)?;
    let (v, vc) = cx.pair(&[1, 8, 1000, 128], DType::BF16, 1.0).map_err(e)?;
    let o = Sdpa { is_causal: true, enable_gqa: true, scale: Some(0.1), ..Sdpa::default() };
    check("bf16 32q/8kv d128 1000 causal", (&q, &qc), (&k, &kc), (&v, &vc), &o, &o, 1.6e-2)
}

/// A 32K-token causal prompt with Llama-3.1-8B's heads: the output's first and last rows
/// against the CPU (those queries alone, offset to their positions), and the device's peak
/// allocation stays within a few times the operands (no 32K × 32K buffer).
fn prompt_32k(cx: &mut Ctx) -> Res {
    let n = 32768;
    let (q, qc) = cx.pair(&[1, 32, n, 128], DType::BF16, 1.0).map_err(e)?;
    let (k, kc) = cx.pair(&[1, 8, n, 128], DType::BF16, 1.0).map_err(e)?;
    let (v, vc) = cx.pair(&[1, 8, n, 128], DType::BF16, 1.0).map_err(e)?;
    let dev = kiln::cuda::device(0).map_err(e)?;
    dev.reset_peak();
    let before = dev.memory_stats().live_bytes;
    let o = Sdpa { is_causal: true, enable_gqa: true, ..Sdpa::default() };
    let y = q.scaled_dot_product_attention(&k, &v, &o).map_err(e)?;
    let grew = dev.memory_stats().peak_live_bytes.saturating_sub(before);
    if grew > 2 * q.numel() as u64 * 2 {
        return Err(format!("32K prompt: {grew} bytes allocated beyond the operands"));
    }
    let (kc, vc) = (kc.to_dtype(DType::F32).map_err(e)?, vc.to_dtype(DType::F32).map_err(e)?);
    for r0 in [0, 5000, n - 16] {
        let rows = |t: &Tensor| t.narrow(2, r0, 16);
        let oc = Sdpa { causal_offset: r0 as isize, ..o };
        let want = rows(&qc)
            .and_then(|q| q.to_dtype(DType::F32))
            .and_then(|q| q.scaled_dot_product_attention(&kc, &vc, &oc))
            .and_then(|t| t.to_dtype(DType::BF16))
            .map_err(e)?;
        let got = rows(&y).and_then(|t| t.to_device(CPU)).and_then(|t| t.contiguous()).map_err(e)?;
        kiln::testing::same(&format!("32K prompt rows {r0}..+16"), &got, &want, 1.6e-2)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("shapes", shapes),
        ("masks", masks),
        ("model_views", model_views),
        ("long", long),
        ("prompt_32k", prompt_32k),
    ];
    kiln::testing::run("gpu_prefill", cases)
}
