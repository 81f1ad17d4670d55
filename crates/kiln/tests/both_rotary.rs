//! The fused rotary-and-cache op on every device from one body (`kiln::device_cases!`):
//! each device's result against the rotary op and plain copies on the CPU twins, and the
//! same errors everywhere.

use kiln::testing::{e, same, tol_of, Ctx};
use kiln::{DType, HeadNorm, KvSlots, RotaryStart, Tensor};

/// A `[B, T, Hq + 2·Hkv, D + 3]` projection narrowed and seen as heads `[B, H, T, D]`: its
/// queries and keys turned (and normed), its keys and values written to random caches of a
/// larger capacity at a host and a device start; the reference writes the CPU rotary op's
/// keys and the values into the CPU twins of the caches, so positions outside the step
/// must stay as they were.
fn rotary_into_cache(cx: &mut Ctx) -> Result<(), String> {
    let (hq, hkv, cap, p, start) = (3, 2, 50, 64, 30);
    for dt in [DType::F32, DType::BF16, DType::F16] {
        for (d, r, t_len) in [(128, 128, 1), (64, 32, 5), (80, 80, 3)] {
            let (x, xc) = cx.pair(&[2, t_len, hq + 2 * hkv, d + 3], dt, 2.0).map_err(e)?;
            let view = |x: &Tensor| x.narrow(3, 3, d).and_then(|x| x.transpose(1, 2));
            let (x, xc) = (view(&x).map_err(e)?, view(&xc).map_err(e)?);
            let (cos, cosc) = cx.pair(&[p, r], dt, 1.0).map_err(e)?;
            let (sin, sinc) = cx.pair(&[p, r], dt, 1.0).map_err(e)?;
            let (w, wc) = cx.pair(&[2, d], dt, 1.0).map_err(e)?;
            let one = |w: &Tensor, i| w.narrow(0, i, 1).and_then(|w| w.reshape(&[d])).map_err(e);
            let ([w0, w1], [c0, c1]) = ([one(&w, 0)?, one(&w, 1)?], [one(&wc, 0)?, one(&wc, 1)?]);
            let pos = Tensor::from_slice(&[start as i64], &[1], cx.dev).map_err(e)?;
            for normed in [false, true] {
                let norm = |a, b| normed.then_some(HeadNorm { weights: [a, b], split: hq, eps: 1e-6 });
                let qk = xc.narrow(1, 0, hq + hkv).map_err(e)?;
                let turned = match norm(&c0, &c1) {
                    Some(n) => qk.rms_norm_rotary(n, &cosc, &sinc, RotaryStart::At(start)),
                    None => qk.rotary_embedding(&cosc, &sinc, RotaryStart::At(start)),
                }
                .map_err(e)?;
                for device_start in [false, true] {
                    let (k, kc) = cx.pair(&[2, hkv, cap, d], dt, 1.0).map_err(e)?;
                    let (v, vc) = cx.pair(&[2, hkv, cap, d], dt, 1.0).map_err(e)?;
                    let at = if device_start { RotaryStart::Device(&pos) } else { RotaryStart::At(start) };
                    let slots = KvSlots { keys: &k, values: &v };
                    let q = x.rotary_into_cache(hq, norm(&w0, &w1), &cos, &sin, at, slots).map_err(e)?;
                    let put = |cache: &Tensor, rows: Result<Tensor, kiln::Error>| {
                        cache.narrow(2, start, t_len).and_then(|c| c.copy_(&rows?)).map_err(e)
                    };
                    put(&kc, turned.narrow(1, hq, hkv))?;
                    put(&vc, xc.narrow(1, hq + hkv, hkv))?;
                    let name = format!(
                        "rotary_into_cache {dt} d{d} r{r} T{t_len} norm {normed} device start {device_start}"
                    );
                    let want_q = turned.narrow(1, 0, hq).and_then(|t| t.contiguous()).map_err(e)?;
                    same(&format!("{name}: queries"), &q, &want_q, tol_of(dt))?;
                    same(&format!("{name}: keys"), &k, &kc, tol_of(dt))?;
                    same(&format!("{name}: values"), &v, &vc, 0.0)?;
                }
            }
        }
    }
    Ok(())
}

/// A start at the cache's end: known on the host it is an error on every device; read from
/// a CUDA tensor (inside a captured step) the queries still turn and the caches stay.
fn rotary_into_cache_past_the_end(cx: &mut Ctx) -> Result<(), String> {
    let (hq, hkv, cap, p) = (3, 2, 50, 64);
    let (x, xc) = cx.pair(&[1, hq + 2 * hkv, 1, 8], DType::F32, 1.0).map_err(e)?;
    let (cos, cosc) = cx.pair(&[p, 8], DType::F32, 1.0).map_err(e)?;
    let (k, kc) = cx.pair(&[1, hkv, cap, 8], DType::F32, 1.0).map_err(e)?;
    let (v, vc) = cx.pair(&[1, hkv, cap, 8], DType::F32, 1.0).map_err(e)?;
    let slots = KvSlots { keys: &k, values: &v };
    if x.rotary_into_cache(hq, None, &cos, &cos, RotaryStart::At(cap), slots).is_ok() {
        return Err("a host start at the cache's end was accepted".into());
    }
    let end = Tensor::from_slice(&[cap as i64], &[1], cx.dev).map_err(e)?;
    let got = x.rotary_into_cache(hq, None, &cos, &cos, RotaryStart::Device(&end), slots);
    if !cx.dev.is_cuda() {
        // A CPU start tensor is read on the host: the same error as a host start.
        return match got {
            Err(_) => Ok(()),
            Ok(_) => Err("a CPU start tensor at the cache's end was accepted".into()),
        };
    }
    let turned = xc
        .narrow(1, 0, hq)
        .and_then(|q| q.rotary_embedding(&cosc, &cosc, RotaryStart::At(cap)))
        .map_err(e)?;
    same("past the cache: queries", &got.map_err(e)?, &turned, 1e-6)?;
    same("past the cache: keys", &k, &kc, 0.0)?;
    same("past the cache: values", &v, &vc, 0.0)
}

/// Bad head counts, starts past the cache, a norm split that is not the query heads, and
/// caches that are strided or of another dtype: errors on every device.
fn rotary_into_cache_refuses(cx: &mut Ctx) -> Result<(), String> {
    let (b, t_len, hq, hkv, d, p, cap) = (2, 3, 4, 2, 8, 16, 10);
    let (x, _) = cx.pair(&[b, hq + 2 * hkv, t_len, d], DType::F32, 1.0).map_err(e)?;
    let (cos, _) = cx.pair(&[p, d], DType::F32, 1.0).map_err(e)?;
    let (w, _) = cx.pair(&[d], DType::F32, 1.0).map_err(e)?;
    let (keys, _) = cx.pair(&[b, hkv, cap, d], DType::F32, 1.0).map_err(e)?;
    let (values, _) = cx.pair(&[b, hkv, cap, d], DType::F32, 1.0).map_err(e)?;
    let slots = KvSlots { keys: &keys, values: &values };
    let refused = |what: &str, r: kiln::Result<Tensor>| match r {
        Err(_) => Ok(()),
        Ok(_) => Err(format!("{what} on {} was accepted", x.device())),
    };
    refused(
        "one query head too many",
        x.rotary_into_cache(hq + 1, None, &cos, &cos, RotaryStart::At(0), slots),
    )?;
    let past = RotaryStart::At(cap - t_len + 1);
    refused("positions past the cache", x.rotary_into_cache(hq, None, &cos, &cos, past, slots))?;
    let wrong_split = HeadNorm { weights: [&w, &w], split: hq - 1, eps: 1e-6 };
    let r = x.rotary_into_cache(hq, Some(wrong_split), &cos, &cos, RotaryStart::At(0), slots);
    refused("a norm split of Hq - 1", r)?;
    let strided =
        keys.transpose(0, 1).and_then(|k| k.contiguous()).and_then(|k| k.transpose(0, 1)).map_err(e)?;
    let f16 = keys.to_dtype(DType::F16).map_err(e)?;
    for (what, keys) in [("a strided key cache", strided), ("an f16 key cache", f16)] {
        let slots = KvSlots { keys: &keys, values: &values };
        refused(what, x.rotary_into_cache(hq, None, &cos, &cos, RotaryStart::At(0), slots))?;
    }
    Ok(())
}

kiln::device_cases!(rotary_into_cache, rotary_into_cache_past_the_end, rotary_into_cache_refuses);
