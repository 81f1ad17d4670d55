//! Element types: the `DType` tag, its PyTorch / safetensors names, and the `Elem` trait
//! that ties each tag to a Rust type for the CPU backend.

use crate::convert;
use half::{bf16, f16};
use num_complex::Complex32;

/// A tensor's element type. Names follow PyTorch (`torch.float8_e4m3fn`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `torch.bool`: one byte, 0 or 1 ([`Bool`]).
    Bool,
    /// `torch.uint8`.
    U8,
    /// `torch.uint16`.
    U16,
    /// `torch.uint32`.
    U32,
    /// `torch.uint64`.
    U64,
    /// `torch.int8`.
    I8,
    /// `torch.int16`.
    I16,
    /// `torch.int32`.
    I32,
    /// `torch.int64`.
    I64,
    /// `torch.float8_e4m3fn`: 4 exponent and 3 mantissa bits, no infinities ([`F8E4M3`]).
    F8E4M3,
    /// `torch.float8_e5m2`: 5 exponent and 2 mantissa bits ([`F8E5M2`]).
    F8E5M2,
    /// `torch.float16` (IEEE half).
    F16,
    /// `torch.bfloat16`.
    BF16,
    /// `torch.float32`.
    F32,
    /// `torch.float64`.
    F64,
    /// `torch.complex64`: two f32, real then imaginary.
    C64,
}

/// Stored as a raw byte with 0 = false, 1 = true (PyTorch's layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// float8_e4m3fn bits (no infinities, one NaN pattern per sign).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// float8_e5m2 bits (IEEE-like: infinities and NaNs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 16] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F8E4M3,
        DType::F8E5M2,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 | DType::C64 => 8,
        }
    }

    /// Whether this is a real floating-point type (float8 through f64; not complex).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2 | DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Whether this is a complex type.
    pub fn is_complex(self) -> bool {
        self == DType::C64
    }

    /// Whether this is a signed or unsigned integer type (not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
                | DType::I8
                | DType::I16
                | DType::I32
                | DType::I64
        )
    }

    /// Whether values are never negative: bool and the unsigned integers.
    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::Bool | DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// PyTorch's name, as in `torch.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F8E4M3 => "float8_e4m3fn",
            DType::F8E5M2 => "float8_e5m2",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
        }
    }

    /// Parses PyTorch names and the short forms users type (`bf16`, `f32`, `fp8`).
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.trim().trim_start_matches("torch.");
        Some(match s {
            "bool" => DType::Bool,
            "uint8" | "u8" => DType::U8,
            "uint16" | "u16" => DType::U16,
            "uint32" | "u32" => DType::U32,
            "uint64" | "u64" => DType::U64,
            "int8" | "i8" => DType::I8,
            "int16" | "i16" | "short" => DType::I16,
            "int32" | "i32" | "int" => DType::I32,
            "int64" | "i64" | "long" => DType::I64,
            "float8_e4m3fn" | "f8e4m3" | "fp8" | "e4m3" => DType::F8E4M3,
            "float8_e5m2" | "f8e5m2" | "e5m2" => DType::F8E5M2,
            "float16" | "f16" | "half" | "fp16" => DType::F16,
            "bfloat16" | "bf16" => DType::BF16,
            "float32" | "f32" | "float" | "fp32" => DType::F32,
            "float64" | "f64" | "double" => DType::F64,
            "complex64" | "c64" | "cfloat" => DType::C64,
            _ => return None,
        })
    }

    /// PyTorch's type-promotion category: bool < integer < float < complex.
    fn category(self) -> u8 {
        if self == DType::Bool {
            0
        } else if self.is_int() {
            1
        } else if self.is_float() {
            2
        } else {
            3
        }
    }

    /// `torch.result_type` for two tensors (no zero-dim special case).
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        let (ca, cb) = (a.category(), b.category());
        if ca != cb {
            let (hi, lo) = if ca > cb { (a, b) } else { (b, a) };
            // complex64 stays complex64 even with f64 (PyTorch promotes to complex128,
            // which kiln does not have).
            let _ = lo;
            return hi;
        }
        match (a, b) {
            (F16, BF16) | (BF16, F16) => F32,
            (F8E4M3, _) | (_, F8E4M3) | (F8E5M2, _) | (_, F8E5M2) => {
                let other = if matches!(a, F8E4M3 | F8E5M2) { b } else { a };
                if matches!(other, F8E4M3 | F8E5M2) {
                    F32
                } else {
                    other
                }
            }
            _ if a.is_float() => a.max(b),
            _ => promote_int(a, b),
        }
    }

    /// The float dtype an integer or bool input is computed in (PyTorch's default float).
    pub fn to_float(self) -> DType {
        if self.is_float() || self.is_complex() {
            self
        } else {
            DType::F32
        }
    }
}

fn promote_int(a: DType, b: DType) -> DType {
    use DType::*;
    let bits = |d: DType| d.size() * 8;
    match (a.is_unsigned(), b.is_unsigned()) {
        (true, true) | (false, false) => {
            if bits(a) >= bits(b) {
                a
            } else {
                b
            }
        }
        _ => {
            let (s, u) = if a.is_unsigned() { (a, b) } else { (b, a) };
            if bits(s) > bits(u) {
                s
            } else {
                // uint8 + int8 → int16, etc.; u64 with any signed → i64 (PyTorch errors
                // for uint64 vs signed in some versions; i64 is the closest defined result).
                match bits(u) {
                    8 => I16,
                    16 => I32,
                    _ => I64,
                }
            }
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the storage of one `DType`. Values convert through f64 (exact for
/// every real type but 64-bit integers beyond 2^53, which use `to_i64`/`from_i64`).
pub trait Elem: Copy + Send + Sync + 'static + bytemuck::Pod + std::fmt::Debug {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// The value as f64 (complex: the real part).
    fn to_f64(self) -> f64;
    /// `v` converted as PyTorch's cast to this dtype does: narrow floats round from f32,
    /// integers saturate to i64 (NaN to 0) then wrap to their width, bool is `v != 0`.
    fn from_f64(v: f64) -> Self;
    /// The value as i64: exact for the integer types, truncated through f64 for the others.
    fn to_i64(self) -> i64 {
        self.to_f64() as i64
    }
    /// `v` converted to this type: exact for the integer types (wrapping to narrower
    /// widths), through f64 for the others.
    fn from_i64(v: i64) -> Self {
        Self::from_f64(v as f64)
    }
    /// Integer view used by the CPU backend's exact integer arithmetic (wrapping back).
    fn to_i128(self) -> i128 {
        self.to_f64() as i128
    }
    /// `v` wrapped back to this type (integers) or rounded from f64 (others).
    fn from_i128(v: i128) -> Self {
        Self::from_f64(v as f64)
    }
    /// The imaginary part (0 for real types).
    fn im(self) -> f64 {
        0.0
    }
    /// The value `re + i·im` (real types drop `im`).
    fn from_complex(re: f64, _im: f64) -> Self {
        Self::from_f64(re)
    }
}

macro_rules! int_elem {
    ($t:ty, $d:ident, $via:ty) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[allow(clippy::unnecessary_cast)]
            fn from_f64(v: f64) -> Self {
                // Saturate to i64 (NaN → 0), then wrap to the width, as the GPU's
                // cvt-then-narrow does; u64 saturates directly.
                v as $via as $t
            }
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_i128(self) -> i128 {
                self as i128
            }
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    };
}
int_elem!(u8, U8, i64);
int_elem!(u16, U16, i64);
int_elem!(u32, U32, i64);
int_elem!(u64, U64, u64);
int_elem!(i8, I8, i64);
int_elem!(i16, I16, i64);
int_elem!(i32, I32, i64);
int_elem!(i64, I64, i64);

impl Elem for Bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    fn to_i64(self) -> i64 {
        (self.0 != 0) as i64
    }
    fn from_i64(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
    fn to_i128(self) -> i128 {
        (self.0 != 0) as i128
    }
    fn from_i128(v: i128) -> Self {
        Bool((v != 0) as u8)
    }
}

impl Elem for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Elem for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

// Narrow floats round from f32, as PyTorch does: a value first computed in f32 and then
// narrowed must not be double-rounded differently from PyTorch's `float → half` cast.
impl Elem for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f32(v as f32)
    }
}

impl Elem for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_bits(convert::f64_to_bf16_bits(v))
    }
}

impl Elem for F8E4M3 {
    const DTYPE: DType = DType::F8E4M3;
    fn to_f64(self) -> f64 {
        convert::e4m3_to_f32(self.0) as f64
    }
    fn from_f64(v: f64) -> Self {
        F8E4M3(convert::f64_to_e4m3(v))
    }
}

impl Elem for F8E5M2 {
    const DTYPE: DType = DType::F8E5M2;
    fn to_f64(self) -> f64 {
        convert::e5m2_to_f32(self.0) as f64
    }
    fn from_f64(v: f64) -> Self {
        F8E5M2(convert::f64_to_e5m2(v))
    }
}

impl Elem for Complex32 {
    const DTYPE: DType = DType::C64;
    fn to_f64(self) -> f64 {
        self.re as f64
    }
    fn from_f64(v: f64) -> Self {
        Complex32::new(v as f32, 0.0)
    }
    fn im(self) -> f64 {
        self.im as f64
    }
    fn from_complex(re: f64, im: f64) -> Self {
        Complex32::new(re as f32, im as f32)
    }
}

/// Runs `$body` with `$T` bound to the Rust type of `$dt`.
#[macro_export]
macro_rules! with_dtype {
    ($dt:expr, $T:ident, $body:expr) => {{
        use $crate::dtype::DType as __D;
        match $dt {
            __D::Bool => {
                type $T = $crate::dtype::Bool;
                $body
            }
            __D::U8 => {
                type $T = u8;
                $body
            }
            __D::U16 => {
                type $T = u16;
                $body
            }
            __D::U32 => {
                type $T = u32;
                $body
            }
            __D::U64 => {
                type $T = u64;
                $body
            }
            __D::I8 => {
                type $T = i8;
                $body
            }
            __D::I16 => {
                type $T = i16;
                $body
            }
            __D::I32 => {
                type $T = i32;
                $body
            }
            __D::I64 => {
                type $T = i64;
                $body
            }
            __D::F8E4M3 => {
                type $T = $crate::dtype::F8E4M3;
                $body
            }
            __D::F8E5M2 => {
                type $T = $crate::dtype::F8E5M2;
                $body
            }
            __D::F16 => {
                type $T = half::f16;
                $body
            }
            __D::BF16 => {
                type $T = half::bf16;
                $body
            }
            __D::F32 => {
                type $T = f32;
                $body
            }
            __D::F64 => {
                type $T = f64;
                $body
            }
            __D::C64 => {
                type $T = num_complex::Complex32;
                $body
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        use DType::*;
        assert_eq!(DType::promote(U8, I8), I16);
        assert_eq!(DType::promote(I32, F16), F16);
        assert_eq!(DType::promote(F16, BF16), F32);
        assert_eq!(DType::promote(Bool, I64), I64);
        assert_eq!(DType::promote(F32, F64), F64);
        assert_eq!(DType::promote(U32, U64), U64);
        assert_eq!(DType::promote(C64, F32), C64);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("bf16"), Some(DType::BF16));
        assert_eq!(DType::parse("nope"), None);
    }
}
