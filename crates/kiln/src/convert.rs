//! Scalar conversions that must round exactly as PyTorch (c10) does: bf16 and the two
//! float8 formats. Wider values are first narrowed to f32, as PyTorch's casts go
//! through `float`. The float8 crate rounds differently at the saturation edge, hence
//! these hand-written bit routines (pinned by the `to_float8_e4m3fn` fixture).

/// f32 → bf16 bits, round to nearest even; every NaN becomes 0x7FC0.
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7FC0;
    }
    let u = x.to_bits();
    let bias = ((u >> 16) & 1) + 0x7FFF;
    (u.wrapping_add(bias) >> 16) as u16
}

pub(crate) fn f64_to_bf16_bits(x: f64) -> u16 {
    f32_to_bf16_bits(x as f32)
}

/// f32 → float8_e4m3fn bits. Not saturating: |x| ≥ 480 (and inf) gives NaN (0x7F),
/// values in [448, 480) round to 448; subnormals round to nearest even.
pub fn f32_to_e4m3(x: f32) -> u8 {
    const FP8_MAX: u32 = 1087 << 20;
    const DENORM_MASK: u32 = 141 << 23;
    let mut bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    bits ^= sign;
    let result: u8 = if bits >= FP8_MAX {
        0x7F
    } else if bits < (121 << 23) {
        let b = (f32::from_bits(bits) + f32::from_bits(DENORM_MASK)).to_bits();
        b.wrapping_sub(DENORM_MASK) as u8
    } else {
        let mant_odd = (bits >> 20) & 1;
        let b =
            bits.wrapping_add(((7u32).wrapping_sub(127) << 23).wrapping_add(0x7FFFF)).wrapping_add(mant_odd);
        (b >> 20) as u8
    };
    result | (sign >> 24) as u8
}

pub(crate) fn f64_to_e4m3(x: f64) -> u8 {
    f32_to_e4m3(x as f32)
}

pub(crate) fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((b >> 3) & 0xF) as i32;
    let mant = (b & 7) as f32;
    if exp == 15 && (b & 7) == 7 {
        return f32::NAN.copysign(sign);
    }
    let mag = if exp == 0 { mant * (2.0f32).powi(-9) } else { (1.0 + mant / 8.0) * (2.0f32).powi(exp - 7) };
    sign * mag
}

/// f32 → float8_e5m2 bits: overflow to ±inf, NaN stays NaN (0x7F | sign).
pub fn f32_to_e5m2(x: f32) -> u8 {
    const FP32_INF: u32 = 255 << 23;
    const FP8_MAX: u32 = 143 << 23;
    const DENORM_MASK: u32 = 134 << 23;
    let mut bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    bits ^= sign;
    let result: u8 = if bits >= FP8_MAX {
        if bits > FP32_INF {
            0x7F
        } else {
            0x7C
        }
    } else if bits < (113 << 23) {
        let b = (f32::from_bits(bits) + f32::from_bits(DENORM_MASK)).to_bits();
        b.wrapping_sub(DENORM_MASK) as u8
    } else {
        let mant_odd = (bits >> 21) & 1;
        let b =
            bits.wrapping_add(((15u32).wrapping_sub(127) << 23).wrapping_add(0xFFFFF)).wrapping_add(mant_odd);
        (b >> 21) as u8
    };
    result | (sign >> 24) as u8
}

pub(crate) fn f64_to_e5m2(x: f64) -> u8 {
    f32_to_e5m2(x as f32)
}

pub(crate) fn e5m2_to_f32(b: u8) -> f32 {
    half::f16::from_bits((b as u16) << 8).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_every_code_round_trips() {
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            if v.is_nan() {
                assert_eq!(b & 0x7F, 0x7F);
            } else if v == 0.0 {
                assert_eq!(b & 0x7F, 0);
            } else {
                assert_eq!(f32_to_e4m3(v), b, "code {b:#x} value {v}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(f32_to_e4m3(460.0), 0x7E);
        // Past the midpoint to the (NaN) code above 448, c10 rounds into NaN.
        assert_eq!(f32_to_e4m3(470.0), 0x7F);
        assert_eq!(f32_to_e4m3(480.0), 0x7F);
        assert_eq!(f32_to_e4m3(f32::INFINITY), 0x7F);
        assert_eq!(e4m3_to_f32(1), 2f32.powi(-9));
    }

    #[test]
    fn e5m2_every_code_round_trips() {
        for b in 0..=255u8 {
            let v = e5m2_to_f32(b);
            if !v.is_nan() && v != 0.0 {
                assert_eq!(f32_to_e5m2(v), b, "code {b:#x}");
            }
        }
        assert_eq!(f32_to_e5m2(1e9), 0x7C);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3F80);
        // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3F80);
        assert_eq!(f32_to_bf16_bits(1.0 + 3.0 * 2f32.powi(-8)), 0x3F82);
        assert_eq!(f32_to_bf16_bits(-f32::NAN), 0x7FC0);
    }
}
