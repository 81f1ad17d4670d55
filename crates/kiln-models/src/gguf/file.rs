//! The GGUF container (llama.cpp's `gguf.h`, versions 2 and 3): a little-endian header,
//! typed metadata key-values, tensor infos, then the tensor data at an aligned offset.
//! The file is memory-mapped; tensors are read on demand.

use super::dequant::GgmlType;
use kiln::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An unsigned integer (any width).
    U64(u64),
    /// A signed integer (any width).
    I64(i64),
    /// A float (f32 or f64).
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// An array of values.
    Array(Vec<Value>),
}

impl Value {
    /// The value as u64, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as f64, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => None,
        }
    }

    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, if it is an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Where one tensor lies in the file, and how it is stored.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// PyTorch order (outermost first): GGUF's `ne` reversed.
    pub shape: Vec<usize>,
    /// How the values are stored.
    pub kind: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One memory-mapped GGUF file: its metadata and tensor table, tensors read on demand.
pub struct GgufFile {
    path: PathBuf,
    mmap: memmap2::Mmap,
    /// Metadata key-values (`general.architecture`, `llama.block_count`, …).
    pub metadata: BTreeMap<String, Value>,
    /// The tensors by their GGUF names (`blk.N.*`).
    pub tensors: BTreeMap<String, TensorInfo>,
    data_start: usize,
}

/// A cursor over the header bytes; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or("truncated header")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length or count, refused when it could not fit in the file.
    fn len(&mut self) -> std::result::Result<usize, String> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or_else(|| format!("implausible length {n}"))
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a string is not UTF-8".into())
    }

    fn value(&mut self, kind: u32) -> std::result::Result<Value, String> {
        Ok(match kind {
            0 => Value::U64(self.array::<1>()?[0] as u64),
            1 => Value::I64(self.array::<1>()?[0] as i8 as i64),
            2 => Value::U64(u16::from_le_bytes(self.array()?) as u64),
            3 => Value::I64(i16::from_le_bytes(self.array()?) as i64),
            4 => Value::U64(self.u32()? as u64),
            5 => Value::I64(i32::from_le_bytes(self.array()?) as i64),
            6 => Value::F64(f32::from_le_bytes(self.array()?) as f64),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                let inner = self.u32()?;
                let n = self.len()?;
                Value::Array((0..n).map(|_| self.value(inner)).collect::<std::result::Result<_, _>>()?)
            }
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            other => return Err(format!("unknown metadata type {other}")),
        })
    }
}

impl GgufFile {
    /// Maps `path` and parses its header; a malformed file is an error naming it.
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        // SAFETY: the map is read-only; a file changed by another process while mapped
        // could show torn data, as with the safetensors reader.
        let mmap = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        let (metadata, tensors, data_start) =
            parse(&mmap).map_err(|msg| Error::File { path: path.display().to_string(), msg })?;
        Ok(GgufFile { path: path.to_path_buf(), mmap, metadata, tensors, data_start })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An error about this file.
    pub fn error(&self, msg: String) -> Error {
        Error::File { path: self.path.display().to_string(), msg }
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The stored bytes of tensor `info`.
    pub fn data(&self, info: &TensorInfo) -> &[u8] {
        let start = self.data_start + info.offset;
        &self.mmap[start..start + info.kind.bytes_for(info.numel())]
    }
}

type Parsed = (BTreeMap<String, Value>, BTreeMap<String, TensorInfo>, usize);

fn parse(buf: &[u8]) -> std::result::Result<Parsed, String> {
    let mut r = Reader { buf, pos: 0 };
    if r.take(4).ok() != Some(b"GGUF".as_slice()) {
        return Err("not a GGUF file (no \"GGUF\" magic)".into());
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} (kiln reads 2 and 3)"));
    }
    let n_tensors = r.len()?;
    let n_kv = r.len()?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string()?;
        let kind = r.u32()?;
        let v = r.value(kind).map_err(|e| format!("metadata {key:?}: {e}"))?;
        metadata.insert(key, v);
    }
    let mut infos = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = r.string()?;
        let n_dims = r.u32()? as usize;
        if n_dims > 4 {
            return Err(format!("tensor {name:?} has {n_dims} dims (at most 4)"));
        }
        let mut shape = (0..n_dims).map(|_| r.len()).collect::<std::result::Result<Vec<_>, _>>()?;
        shape.reverse();
        let code = r.u32()?;
        let kind = GgmlType::from_code(code).ok_or_else(|| {
            format!("tensor {name:?}: ggml type {code} is not supported ({})", GgmlType::SUPPORTED)
        })?;
        let offset = r.len()?;
        infos.push((name, TensorInfo { shape, kind, offset }));
    }
    let align = match metadata.get("general.alignment") {
        None => 32,
        Some(v) => {
            v.as_u64().filter(|a| a.is_power_of_two()).ok_or("general.alignment is not a power of two")?
                as usize
        }
    };
    let data_start = r.pos.next_multiple_of(align);
    let mut tensors = BTreeMap::new();
    for (name, info) in infos {
        let numel = info.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let bytes = numel.filter(|n| n % info.kind.block_len() == 0).map(|n| info.kind.bytes_for(n));
        let end = bytes.and_then(|b| (data_start + info.offset).checked_add(b));
        if end.is_none_or(|e| e > buf.len()) {
            return Err(format!("tensor {name:?} {:?} {:?} lies outside the file", info.shape, info.kind));
        }
        tensors.insert(name, info);
    }
    Ok((metadata, tensors, data_start))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a GGUF v3 file the way llama.cpp's writer lays it out.
    pub(crate) fn write(
        path: &Path,
        kv: &[(&str, u32, Vec<u8>)],
        tensors: &[(&str, &[usize], u32, Vec<u8>)],
    ) {
        let s = |t: &str| [(t.len() as u64).to_le_bytes().to_vec(), t.as_bytes().to_vec()].concat();
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend((kv.len() as u64).to_le_bytes());
        for (k, kind, v) in kv {
            out.extend(s(k));
            out.extend(kind.to_le_bytes());
            out.extend(v);
        }
        let mut offset = 0;
        for (name, shape, kind, data) in tensors {
            out.extend(s(name));
            out.extend((shape.len() as u32).to_le_bytes());
            for d in shape.iter().rev() {
                out.extend((*d as u64).to_le_bytes());
            }
            out.extend(kind.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset += data.len().next_multiple_of(32);
        }
        out.resize(out.len().next_multiple_of(32), 0);
        for (_, _, _, data) in tensors {
            out.extend(data);
            out.resize(out.len().next_multiple_of(32), 0);
        }
        std::fs::write(path, out).unwrap();
    }

    pub(crate) fn string(t: &str) -> Vec<u8> {
        [(t.len() as u64).to_le_bytes().to_vec(), t.as_bytes().to_vec()].concat()
    }

    #[test]
    fn reads_header_metadata_and_tensors() {
        let path = std::env::temp_dir().join(format!("kiln-gguf-{}.gguf", std::process::id()));
        let arr =
            [8u32.to_le_bytes().to_vec(), 2u64.to_le_bytes().to_vec(), string("a"), string("bc")].concat();
        let data: Vec<u8> =
            [1.5f32, -2.0, 3.25, 0.5, 7.0, 8.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        write(
            &path,
            &[
                ("general.architecture", 8, string("llama")),
                ("x.count", 4, 7u32.to_le_bytes().to_vec()),
                ("v", 9, arr),
            ],
            &[("t", &[2, 3], 0, data)],
        );
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get("general.architecture").unwrap().as_str(), Some("llama"));
        assert_eq!(f.get("x.count").unwrap().as_u64(), Some(7));
        assert_eq!(f.get("v").unwrap().as_array().unwrap()[1].as_str(), Some("bc"));
        let t = &f.tensors["t"];
        assert_eq!((t.shape.as_slice(), t.kind), ([2usize, 3].as_slice(), GgmlType::F32));
        assert_eq!(&f.data(t)[4..8], (-2.0f32).to_le_bytes());
        std::fs::write(&path, b"GGUF\x03\x00\x00\x00\x01").unwrap();
        let e = GgufFile::open(&path).err().unwrap().to_string();
        assert!(e.contains("truncated"), "{e}");
        std::fs::write(&path, b"safetensors").unwrap();
        assert!(GgufFile::open(&path).err().unwrap().to_string().contains("magic"));
        std::fs::remove_file(&path).ok();
    }
}
