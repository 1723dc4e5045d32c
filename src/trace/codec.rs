//! The record codec: bincode 2's standard configuration (little-endian varints) over serde. The
//! only file that knows the wire format, so the codec can be swapped without touching the format
//! around it.
//!
//! bincode defines the format; this file carries a serde serializer (`append`) and deserializer
//! (`decode`) of our own for it. On the recorder's hot path bincode's serializer (a writer
//! abstraction, an error check and an out-of-line varint call per field) cost about 1,600
//! instructions for a 51-byte launch record, a third of a recorded launch; its deserializer kept
//! the reader at about half the writer's speed on the H200 host. Ours are inlined end to end
//! into one function per record type. Both are checked against bincode: byte for byte on
//! encode, value for value (and error for error) on decode, over hand-made values at every
//! varint boundary, every frame of every trace in traces/, and mutated frames (the tests here
//! and in tests/recorder.rs).
//!
//! The two most frequent records, a launch's Begin and a unit End, are also written and read
//! without serde (`hot`, below), in the same bytes and under the same tests.

use super::call::{
    Arg, ArgBytes, Args, BufferId, Call, DevAddr, KernelId, Ret, SiteId, StreamId, StreamRef, Value,
};
use super::frame::{ArgRef, Begin, BeginRef, End, Frame, LaunchRef};
use serde::de::{self, Deserialize, IntoDeserializer, Visitor};
use serde::ser::{self, Serialize};

/// bincode's standard configuration (little-endian varints). Fixed-width integers were tried:
/// records grew 2.2x and the recorder got no faster.
const CONFIG: bincode::config::Configuration = bincode::config::standard();

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

impl ser::Error for CodecError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

impl de::Error for CodecError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

/// Append the encoding of `frame` (a `Frame`, or a borrowed view that encodes like one) to
/// `out`. Fails only for a type the format cannot express (a sequence of unknown length).
#[inline]
pub fn append<F: Serialize + ?Sized>(frame: &F, out: &mut Vec<u8>) -> Result<(), CodecError> {
    frame.serialize(Writer { out })
}

/// Encode `frame` into a new buffer.
pub fn encode_to_vec<F: Serialize + ?Sized>(frame: &F) -> Result<Vec<u8>, CodecError> {
    let mut v = Vec::new();
    append(frame, &mut v)?;
    Ok(v)
}

/// bincode's own encoding of `frame`: the reference `append` is tested against.
pub fn encode_with_bincode<F: Serialize + ?Sized>(frame: &F) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(frame, CONFIG).map_err(|e| CodecError(e.to_string()))
}

/// Decode exactly one frame from `bytes`; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let mut f = Frame::Stop;
    if hot::decode_into(bytes, &mut f) {
        return Ok(f);
    }
    let mut r = Reader { bytes, pos: 0 };
    let f = Frame::deserialize(&mut r)?;
    trailing(bytes.len(), r.pos)?;
    Ok(f)
}

/// bincode's own decoding of one frame: the reference `decode` is tested against.
pub fn decode_with_bincode(bytes: &[u8]) -> Result<Frame, CodecError> {
    let (f, used): (Frame, usize) =
        bincode::serde::decode_from_slice(bytes, CONFIG).map_err(|e| CodecError(e.to_string()))?;
    trailing(bytes.len(), used)?;
    Ok(f)
}

fn trailing(len: usize, used: usize) -> Result<(), CodecError> {
    if used != len {
        return Err(CodecError(format!(
            "{} trailing bytes after the record",
            len - used
        )));
    }
    Ok(())
}

pub use hot::{append_end, append_launch_begin};

/// The two records that make up most of a trace, a launch's Begin and a call's End, written
/// and read without serde, in the same bytes.
///
/// Through serde (even our own serializer) a 6-argument launch's Begin frame cost ~1,400
/// instructions to write, and reading a frame ~1,200 (a visitor per field, and the frame moved
/// through several return slots): the recorder's launch stayed above its 0.3 µs budget and the
/// reader slower than the writer on the H200 host. Here each field is one varint.
///
/// The variant indices below are what ties these bytes to the serde types: the tests encode
/// every variant both ways and decode both ways. The decoder is only a fast path: anything it
/// does not expect (another record, a non-canonical index, a damaged byte) it hands back to the
/// serde decoder, so its errors are always serde's, and its values are checked against it.
mod hot {
    use super::*;

    /// Positions of the variants these records use, in declaration order of their enums.
    const FRAME_BEGIN: u8 = 7;
    const FRAME_END: u8 = 8;
    const CALL_LAUNCH: u8 = 6;
    const CALL_LAUNCH_TYPED: u8 = 7;
    const ARG_BUF: u8 = 0;
    const ARG_VAL: u8 = 1;
    const ADDR_NULL: u8 = 0;
    const ADDR_BUF: u8 = 1;
    const ADDR_FREED: u8 = 2;
    const ADDR_UNKNOWN: u8 = 3;
    const STREAM_LEGACY: u8 = 0;
    const STREAM_ID: u8 = 1;
    /// `Ok(Value::Unit)`: `Result::Ok`'s index, then `Value::Unit`'s.
    const RET_UNIT: [u8; 2] = [0, 0];

    /// Append a launch's Begin frame: `head` with `launch` as its call.
    #[inline]
    pub fn append_launch_begin<'a, F: Fn(usize) -> ArgRef<'a>>(
        head: &BeginRef<'_, ()>,
        launch: &LaunchRef<F>,
        out: &mut Vec<u8>,
    ) {
        // One reservation for the usual record: 16 varints before the arguments, and ~12 bytes
        // per argument. (Writing by index into bytes sized ahead was tried: more instructions.)
        out.reserve(96 + 12 * launch.n_args);
        out.push(FRAME_BEGIN);
        varint(out, head.seq);
        varint(out, head.thread.into());
        varint(out, head.site.0.into());
        varint(out, head.t_ns);
        out.push(if launch.typed {
            CALL_LAUNCH_TYPED
        } else {
            CALL_LAUNCH
        });
        varint(out, launch.kernel.0.into());
        for v in launch.grid.iter().chain(&launch.block) {
            varint(out, (*v).into());
        }
        varint(out, launch.shared_mem.into());
        match launch.stream {
            StreamRef::Legacy => out.push(STREAM_LEGACY),
            StreamRef::Id(s) => {
                out.push(STREAM_ID);
                varint(out, s.0.into());
            }
        }
        varint(out, launch.n_args as u64);
        for i in 0..launch.n_args {
            match (launch.arg)(i) {
                ArgRef::Buf(a) => {
                    out.push(ARG_BUF);
                    dev_addr(out, a);
                }
                ArgRef::Val(b) => {
                    out.push(ARG_VAL);
                    varint(out, b.len() as u64);
                    out.extend_from_slice(b);
                }
            }
        }
    }

    #[inline(always)]
    fn dev_addr(out: &mut Vec<u8>, a: DevAddr) {
        let (buf, off) = match a {
            DevAddr::Null => return out.push(ADDR_NULL),
            DevAddr::Unknown { near: None } => return out.extend_from_slice(&[ADDR_UNKNOWN, 0]),
            DevAddr::Buf { buf, off } => {
                out.push(ADDR_BUF);
                (buf, off)
            }
            DevAddr::Freed { buf, off } => {
                out.push(ADDR_FREED);
                (buf, off)
            }
            DevAddr::Unknown {
                near: Some((buf, off)),
            } => {
                out.extend_from_slice(&[ADDR_UNKNOWN, 1]);
                (buf, off)
            }
        };
        varint(out, buf.0.into());
        varint(out, off);
    }

    /// Append a call's End frame.
    #[inline]
    pub fn append_end(
        seq: u64,
        dur_ns: u64,
        ret: &Ret,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        out.reserve(24);
        out.push(FRAME_END);
        varint(out, seq);
        varint(out, dur_ns);
        match ret {
            Ok(Value::Unit) => {
                out.extend_from_slice(&RET_UNIT);
                Ok(())
            }
            other => other.serialize(Writer { out }),
        }
    }

    /// Decode `bytes` into `out` if it is one of the hot records, whole and well-formed; on
    /// `false` the serde decoder takes it (and `out` holds nothing of value). The frame is
    /// built in place: a launch's inline arguments are a few hundred bytes, and moving them
    /// from a local into the call, the call into the frame and the frame into the result was a
    /// third of a decode.
    #[inline]
    pub fn decode_into(bytes: &[u8], out: &mut Frame) -> bool {
        let mut r = Reader { bytes, pos: 0 };
        let whole = match r.byte() {
            Ok(FRAME_BEGIN) => launch_begin(&mut r, out).is_some(),
            Ok(FRAME_END) => end(&mut r, out).is_some(),
            _ => false,
        };
        whole && r.pos == bytes.len()
    }

    fn end(r: &mut Reader<'_>, out: &mut Frame) -> Option<()> {
        let seq = r.varint(64).ok()?;
        let dur_ns = r.varint(64).ok()?;
        if r.take(2).ok()? != RET_UNIT {
            return None;
        }
        *out = Frame::End(End {
            seq,
            dur_ns,
            ret: Ok(Value::Unit),
        });
        Some(())
    }

    #[inline(always)]
    fn u32v(r: &mut Reader<'_>) -> Option<u32> {
        r.varint(32).ok().map(|v| v as u32)
    }

    fn launch_begin(r: &mut Reader<'_>, out: &mut Frame) -> Option<()> {
        let seq = r.varint(64).ok()?;
        let thread = r.varint(16).ok()? as u16;
        let site = SiteId(u32v(r)?);
        let t_ns = r.varint(64).ok()?;
        let typed = match r.byte().ok()? {
            CALL_LAUNCH => false,
            CALL_LAUNCH_TYPED => true,
            _ => return None,
        };
        let kernel = KernelId(u32v(r)?);
        let grid = [u32v(r)?, u32v(r)?, u32v(r)?];
        let block = [u32v(r)?, u32v(r)?, u32v(r)?];
        let shared_mem = u32v(r)?;
        let stream = match r.byte().ok()? {
            STREAM_LEGACY => StreamRef::Legacy,
            STREAM_ID => StreamRef::Id(StreamId(u32v(r)?)),
            _ => return None,
        };
        let n = r.len().ok()?;
        let call = Call::new_launch(typed, kernel, grid, block, shared_mem, stream, Args::new());
        *out = Frame::Begin(Begin {
            seq,
            thread,
            site,
            t_ns,
            call,
        });
        let Frame::Begin(Begin {
            call: Call::Launch { args, .. } | Call::LaunchTyped { args, .. },
            ..
        }) = out
        else {
            unreachable!("a launch was just stored")
        };
        // No more than the record's bytes: a damaged count cannot reserve much.
        args.reserve(r.hint(n));
        for _ in 0..n {
            args.push(match r.byte().ok()? {
                ARG_BUF => Arg::Buf(read_dev_addr(r)?),
                ARG_VAL => {
                    let len = r.len().ok()?;
                    Arg::Val(ArgBytes::from(r.take(len).ok()?))
                }
                _ => return None,
            });
        }
        Some(())
    }

    #[inline(always)]
    fn read_dev_addr(r: &mut Reader<'_>) -> Option<DevAddr> {
        let tag = r.byte().ok()?;
        #[inline(always)]
        fn near(r: &mut Reader<'_>) -> Option<(BufferId, u64)> {
            Some((BufferId(u32v(r)?), r.varint(64).ok()?))
        }
        Some(match tag {
            ADDR_NULL => DevAddr::Null,
            ADDR_BUF => {
                let (buf, off) = near(r)?;
                DevAddr::Buf { buf, off }
            }
            ADDR_FREED => {
                let (buf, off) = near(r)?;
                DevAddr::Freed { buf, off }
            }
            ADDR_UNKNOWN => match r.byte().ok()? {
                0 => DevAddr::Unknown { near: None },
                1 => DevAddr::Unknown {
                    near: Some(near(r)?),
                },
                _ => return None,
            },
            _ => return None,
        })
    }
}

// bincode's varint markers: values up to 250 are one byte; above, a marker byte and then the
// value as a little-endian u16, u32, u64 or u128.
const SINGLE_BYTE_MAX: u64 = 250;
const U16_MARK: u8 = 251;
const U32_MARK: u8 = 252;
const U64_MARK: u8 = 253;
const U128_MARK: u8 = 254;

#[inline(always)]
fn varint(out: &mut Vec<u8>, v: u64) {
    if v <= SINGLE_BYTE_MAX {
        out.push(v as u8);
    } else if v <= u64::from(u16::MAX) {
        out.push(U16_MARK);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(U32_MARK);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(U64_MARK);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn varint128(out: &mut Vec<u8>, v: u128) {
    match u64::try_from(v) {
        Ok(v) => varint(out, v),
        Err(_) => {
            out.push(U128_MARK);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// Signed integers are zigzag-mapped (0, -1, 1, -2, ...) before the varint.
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

type Res = Result<(), CodecError>;

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = CodecError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn is_human_readable(&self) -> bool {
        false
    }
    #[inline(always)]
    fn serialize_bool(self, v: bool) -> Res {
        self.out.push(u8::from(v));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i8(self, v: i8) -> Res {
        self.out.push(v as u8);
        Ok(())
    }
    #[inline(always)]
    fn serialize_i16(self, v: i16) -> Res {
        varint(self.out, zigzag(v.into()));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i32(self, v: i32) -> Res {
        varint(self.out, zigzag(v.into()));
        Ok(())
    }
    #[inline(always)]
    fn serialize_i64(self, v: i64) -> Res {
        varint(self.out, zigzag(v));
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Res {
        varint128(self.out, ((v << 1) ^ (v >> 127)) as u128);
        Ok(())
    }
    #[inline(always)]
    fn serialize_u8(self, v: u8) -> Res {
        self.out.push(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_u16(self, v: u16) -> Res {
        varint(self.out, v.into());
        Ok(())
    }
    #[inline(always)]
    fn serialize_u32(self, v: u32) -> Res {
        varint(self.out, v.into());
        Ok(())
    }
    #[inline(always)]
    fn serialize_u64(self, v: u64) -> Res {
        varint(self.out, v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Res {
        varint128(self.out, v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Res {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Res {
        self.out.extend_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn serialize_char(self, v: char) -> Res {
        self.out
            .extend_from_slice(v.encode_utf8(&mut [0u8; 4]).as_bytes());
        Ok(())
    }
    #[inline]
    fn serialize_str(self, v: &str) -> Res {
        self.serialize_bytes(v.as_bytes())
    }
    #[inline]
    fn serialize_bytes(self, v: &[u8]) -> Res {
        varint(self.out, v.len() as u64);
        self.out.extend_from_slice(v);
        Ok(())
    }
    #[inline(always)]
    fn serialize_none(self) -> Res {
        self.out.push(0);
        Ok(())
    }
    #[inline(always)]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Res {
        self.out.push(1);
        value.serialize(self)
    }
    #[inline(always)]
    fn serialize_unit(self) -> Res {
        Ok(())
    }
    #[inline(always)]
    fn serialize_unit_struct(self, _: &'static str) -> Res {
        Ok(())
    }
    #[inline(always)]
    fn serialize_unit_variant(self, _: &'static str, index: u32, _: &'static str) -> Res {
        varint(self.out, index.into());
        Ok(())
    }
    #[inline(always)]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Res {
        value.serialize(self)
    }
    #[inline(always)]
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        value: &T,
    ) -> Res {
        varint(self.out, index.into());
        value.serialize(self)
    }
    #[inline(always)]
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, CodecError> {
        let len = len.ok_or_else(|| CodecError("a sequence must know its length".into()))?;
        varint(self.out, len as u64);
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple(self, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        index: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self, CodecError> {
        varint(self.out, index.into());
        Ok(self)
    }
    #[inline(always)]
    fn serialize_map(self, len: Option<usize>) -> Result<Self, CodecError> {
        self.serialize_seq(len)
    }
    #[inline(always)]
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, CodecError> {
        Ok(self)
    }
    #[inline(always)]
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self, CodecError> {
        // Fields without names: laid out like a tuple variant's.
        self.serialize_tuple_variant(name, index, variant, len)
    }
    fn collect_str<T: std::fmt::Display + ?Sized>(self, _: &T) -> Res {
        // As bincode: a string of unknown length cannot be written ahead of its length.
        Err(CodecError("collect_str is not supported".into()))
    }
}

/// Every compound is its elements in order, with nothing between or after them.
macro_rules! compound {
    ($($tr:ident :: $method:ident ($($key:ident),*)),* $(,)?) => {$(
        impl ser::$tr for Writer<'_> {
            type Ok = ();
            type Error = CodecError;
            #[inline(always)]
            fn $method<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)* value: &T) -> Res {
                $(let _ = $key;)*
                value.serialize(Writer { out: &mut *self.out })
            }
            #[inline(always)]
            fn end(self) -> Res {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(name),
    SerializeStructVariant::serialize_field(name),
);

impl ser::SerializeMap for Writer<'_> {
    type Ok = ();
    type Error = CodecError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Res {
        key.serialize(Writer {
            out: &mut *self.out,
        })
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Res {
        value.serialize(Writer {
            out: &mut *self.out,
        })
    }
    fn end(self) -> Res {
        Ok(())
    }
}

/// The decoding side: a cursor over one record's bytes. Every read is bounds-checked; a short or
/// malformed record is an error, never a panic.
struct Reader<'de> {
    bytes: &'de [u8],
    pos: usize,
}

type DRes<T> = Result<T, CodecError>;

impl<'de> Reader<'de> {
    #[inline(always)]
    fn take(&mut self, n: usize) -> DRes<&'de [u8]> {
        match self
            .pos
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.pos..end))
        {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(CodecError(format!(
                "record ends after {} bytes, {n} more needed at byte {}",
                self.bytes.len(),
                self.pos
            ))),
        }
    }

    #[inline(always)]
    fn byte(&mut self) -> DRes<u8> {
        match self.bytes.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(CodecError(format!(
                "record ends after {} bytes, 1 more needed",
                self.bytes.len()
            ))),
        }
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> DRes<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    /// A varint of a type `bits` wide: markers for wider types are errors, as in bincode.
    #[inline(always)]
    fn varint(&mut self, bits: u32) -> DRes<u64> {
        let b = self.byte()?;
        if u64::from(b) <= SINGLE_BYTE_MAX {
            return Ok(b.into());
        }
        let v = match b {
            U16_MARK => u16::from_le_bytes(self.array()?).into(),
            U32_MARK if bits >= 32 => u32::from_le_bytes(self.array()?).into(),
            U64_MARK if bits >= 64 => u64::from_le_bytes(self.array()?),
            _ => {
                return Err(CodecError(format!(
                    "varint marker {b} is not valid for a {bits}-bit integer at byte {}",
                    self.pos - 1
                )))
            }
        };
        Ok(v)
    }

    fn varint128(&mut self) -> DRes<u128> {
        if self.bytes.get(self.pos) == Some(&U128_MARK) {
            self.pos += 1;
            return Ok(u128::from_le_bytes(self.array()?));
        }
        Ok(self.varint(64)?.into())
    }

    #[inline(always)]
    fn len(&mut self) -> DRes<usize> {
        let n = self.varint(64)?;
        usize::try_from(n).map_err(|_| CodecError(format!("length {n} does not fit in memory")))
    }

    /// A size hint no bigger than the bytes left, so a damaged length cannot make a visitor
    /// reserve more memory than the record could possibly fill.
    fn hint(&self, len: usize) -> usize {
        len.min(self.bytes.len() - self.pos)
    }
}

fn unzig(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

macro_rules! unsigned {
    ($($method:ident $visit:ident $t:ty, $bits:expr;)*) => {$(
        #[inline(always)]
        fn $method<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
            v.$visit(self.varint($bits)? as $t)
        }
    )*};
}

macro_rules! signed {
    ($($method:ident $visit:ident $t:ty, $bits:expr;)*) => {$(
        #[inline(always)]
        fn $method<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
            let z = unzig(self.varint($bits)?);
            let x = <$t>::try_from(z)
                .map_err(|_| CodecError(format!("{z} is out of range for {}", stringify!($t))))?;
            v.$visit(x)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &mut Reader<'de> {
    type Error = CodecError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> DRes<V::Value> {
        Err(CodecError("the format is not self-describing".into()))
    }
    #[inline(always)]
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        match self.byte()? {
            0 => v.visit_bool(false),
            1 => v.visit_bool(true),
            b => Err(CodecError(format!("{b} is not a boolean"))),
        }
    }
    #[inline(always)]
    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_i8(self.byte()? as i8)
    }
    #[inline(always)]
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_u8(self.byte()?)
    }
    unsigned! {
        deserialize_u16 visit_u16 u16, 16;
        deserialize_u32 visit_u32 u32, 32;
        deserialize_u64 visit_u64 u64, 64;
    }
    signed! {
        deserialize_i16 visit_i16 i16, 16;
        deserialize_i32 visit_i32 i32, 32;
        deserialize_i64 visit_i64 i64, 64;
    }
    fn deserialize_u128<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_u128(self.varint128()?)
    }
    fn deserialize_i128<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let z = self.varint128()?;
        v.visit_i128(((z >> 1) as i128) ^ -((z & 1) as i128))
    }
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_f32(f32::from_le_bytes(self.array()?))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_f64(f64::from_le_bytes(self.array()?))
    }
    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let first = self.bytes.get(self.pos).copied().unwrap_or(0);
        let width = match first {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1, // invalid or missing: the checks below say which
        };
        let b = self.take(width)?;
        let c = std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.chars().next())
            .ok_or_else(|| CodecError(format!("{b:02x?} is not a UTF-8 character")))?;
        v.visit_char(c)
    }
    #[inline]
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let n = self.len()?;
        let b = self.take(n)?;
        let s = std::str::from_utf8(b).map_err(|e| CodecError(format!("string: {e}")))?;
        v.visit_borrowed_str(s)
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        self.deserialize_str(v)
    }
    #[inline]
    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let n = self.len()?;
        v.visit_borrowed_bytes(self.take(n)?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        self.deserialize_bytes(v)
    }
    #[inline(always)]
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        match self.byte()? {
            0 => v.visit_none(),
            1 => v.visit_some(self),
            b => Err(CodecError(format!("option tag {b} is neither 0 nor 1"))),
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        v.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> DRes<V::Value> {
        v.visit_unit()
    }
    #[inline(always)]
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> DRes<V::Value> {
        v.visit_newtype_struct(self)
    }
    #[inline]
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let len = self.len()?;
        v.visit_seq(Elements { r: self, left: len })
    }
    #[inline(always)]
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> DRes<V::Value> {
        v.visit_seq(Elements { r: self, left: len })
    }
    #[inline(always)]
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        v: V,
    ) -> DRes<V::Value> {
        v.visit_seq(Elements { r: self, left: len })
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> DRes<V::Value> {
        let len = self.len()?;
        v.visit_map(Elements { r: self, left: len })
    }
    #[inline(always)]
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> DRes<V::Value> {
        // A struct is its fields in order, like a tuple.
        self.deserialize_tuple(fields.len(), v)
    }
    #[inline(always)]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> DRes<V::Value> {
        v.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> DRes<V::Value> {
        Err(CodecError("the format has no identifiers".into()))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> DRes<V::Value> {
        Err(CodecError("the format cannot skip a value".into()))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// A sequence, tuple, struct or map: `left` more elements follow, back to back.
struct Elements<'a, 'de> {
    r: &'a mut Reader<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;
    #[inline(always)]
    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> DRes<Option<T::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.r.hint(self.left))
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = CodecError;
    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> DRes<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.r).map(Some)
    }
    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> DRes<V::Value> {
        seed.deserialize(&mut *self.r)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.r.hint(self.left))
    }
}

impl<'de> de::EnumAccess<'de> for &mut Reader<'de> {
    type Error = CodecError;
    type Variant = Self;
    #[inline(always)]
    fn variant_seed<V: de::DeserializeSeed<'de>>(self, seed: V) -> DRes<(V::Value, Self)> {
        let index = self.varint(32)? as u32;
        let v = seed.deserialize(IntoDeserializer::<CodecError>::into_deserializer(index))?;
        Ok((v, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Reader<'de> {
    type Error = CodecError;
    fn unit_variant(self) -> DRes<()> {
        Ok(())
    }
    #[inline(always)]
    fn newtype_variant_seed<T: de::DeserializeSeed<'de>>(self, seed: T) -> DRes<T::Value> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> DRes<V::Value> {
        v.visit_seq(Elements { r: self, left: len })
    }
    #[inline(always)]
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> DRes<V::Value> {
        self.tuple_variant(fields.len(), v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use std::collections::BTreeMap;

    fn same<T: Serialize + std::fmt::Debug>(v: &T) {
        assert_eq!(
            encode_to_vec(v).unwrap(),
            encode_with_bincode(v).unwrap(),
            "{v:?}"
        );
    }

    /// Around every varint boundary, for every integer width, signed and unsigned.
    #[test]
    fn integers_encode_as_bincode_does() {
        let edges: [u128; 12] = [
            0,
            1,
            250,
            251,
            255,
            256,
            65_535,
            65_536,
            u32::MAX as u128,
            u32::MAX as u128 + 1,
            u64::MAX as u128,
            u64::MAX as u128 + 1,
        ];
        for e in edges {
            same(&(e as u8));
            same(&(e as u16));
            same(&(e as u32));
            same(&(e as u64));
            same(&e);
            same(&(e as usize));
            for s in [e as i128, -(e as i128), -(e as i128) - 1] {
                same(&(s as i8));
                same(&(s as i16));
                same(&(s as i32));
                same(&(s as i64));
                same(&s);
            }
        }
        same(&i64::MIN);
        same(&i128::MIN);
        same(&u128::MAX);
    }

    #[derive(Serialize, Debug)]
    enum E {
        Unit,
        New(u32),
        Tuple(i16, char),
        Struct { a: Option<u64>, b: Vec<String> },
    }

    #[derive(Serialize, Debug)]
    struct Everything {
        flag: bool,
        f: f32,
        d: f64,
        c: char,
        s: String,
        bytes: serde_bytes_like::Bytes,
        arr: [u8; 5],
        tuple: (u16, i32),
        list: Vec<E>,
        map: BTreeMap<String, u32>,
        none: Option<u8>,
        unit: (),
    }

    mod serde_bytes_like {
        #[derive(Debug)]
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    #[test]
    fn every_serde_shape_encodes_as_bincode_does() {
        let v = Everything {
            flag: true,
            f: -1.5,
            d: std::f64::consts::PI,
            c: 'é',
            s: "héllo".repeat(80),
            bytes: serde_bytes_like::Bytes((0..300u32).map(|i| i as u8).collect()),
            arr: [1, 2, 3, 250, 255],
            tuple: (70_000u32 as u16, -70_000),
            list: vec![
                E::Unit,
                E::New(300),
                E::Tuple(-2, '\u{1F980}'),
                E::Struct {
                    a: Some(1 << 40),
                    b: vec!["x".into(), String::new()],
                },
            ],
            map: [("a".to_string(), 1), ("b".to_string(), 70_000)].into(),
            none: None,
            unit: (),
        };
        same(&v);
    }

    fn edges() -> impl Iterator<Item = u64> {
        [
            0u64,
            250,
            251,
            65_535,
            65_536,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            u64::MAX,
        ]
        .into_iter()
    }

    fn every_arg() -> Vec<Arg> {
        let mut v = vec![
            Arg::Buf(DevAddr::Null),
            Arg::Buf(DevAddr::Unknown { near: None }),
        ];
        for (id, off) in [(0u32, 0u64), (251, 65_536), (u32::MAX, u64::MAX)] {
            let buf = BufferId(id);
            v.push(Arg::Buf(DevAddr::Buf { buf, off }));
            v.push(Arg::Buf(DevAddr::Freed { buf, off }));
            v.push(Arg::Buf(DevAddr::Unknown {
                near: Some((buf, off)),
            }));
        }
        for len in [0usize, 4, 8, 9, 300] {
            v.push(Arg::Val(ArgBytes::from(&vec![0xa5u8; len][..])));
        }
        v
    }

    /// The hand-written launch Begin against bincode's encoding of the `Frame` it stands for,
    /// and back through both decoders, at every varint boundary and with every argument shape.
    #[test]
    fn launch_begin_by_hand_is_bincodes_frame() {
        let all = every_arg();
        let mut n = 0;
        for (k, e) in edges().enumerate() {
            let small = e.min(u32::MAX as u64) as u32;
            for typed in [false, true] {
                for stream in [StreamRef::Legacy, StreamRef::Id(StreamId(small))] {
                    let args: Args = all.iter().skip(k % 3).cloned().collect();
                    let (seq, t_ns) = (e, e.rotate_left(k as u32));
                    let (kernel, grid, block, shared_mem) =
                        (KernelId(small), [small, 1, 251], [32, small, 65_536], small);
                    let call =
                        Call::new_launch(typed, kernel, grid, block, shared_mem, stream, args);
                    let begin = Begin {
                        seq,
                        thread: e as u16,
                        site: SiteId(small),
                        t_ns,
                        call,
                    };
                    let mut ours = Vec::new();
                    let (head, view) = begin.launch_parts().expect("a launch");
                    append_launch_begin(&head, &view, &mut ours);
                    let frame = Frame::Begin(begin.clone());
                    assert_eq!(ours, encode_with_bincode(&frame).unwrap(), "{frame:?}");
                    let mut into = Frame::Stop;
                    assert!(hot::decode_into(&ours, &mut into));
                    assert_eq!(into, frame);
                    assert_eq!(decode_with_bincode(&ours).unwrap(), frame);
                    n += 1;
                }
            }
        }
        assert_eq!(n, 32);
    }

    #[test]
    fn end_by_hand_is_bincodes_frame() {
        let rets: Vec<Ret> = vec![
            Ok(Value::Unit),
            Ok(Value::Count(70_000)),
            Ok(Value::Stream(StreamRef::Id(StreamId(3)))),
            Err(super::super::call::ErrorRec {
                code: Some(700),
                message: "an illegal memory access was encountered".into(),
            }),
        ];
        for e in edges() {
            for ret in &rets {
                let mut ours = Vec::new();
                append_end(e, e / 3, ret, &mut ours).unwrap();
                let frame = Frame::End(End {
                    seq: e,
                    dur_ns: e / 3,
                    ret: ret.clone(),
                });
                assert_eq!(ours, encode_with_bincode(&frame).unwrap(), "{frame:?}");
                assert_eq!(decode(&ours).unwrap(), frame);
                // Only the unit result takes the fast path; the rest are serde's.
                assert_eq!(
                    hot::decode_into(&ours, &mut Frame::Stop),
                    *ret == Ok(Value::Unit)
                );
            }
        }
    }

    /// Every one-byte change and every cut of hot records: the decoder gives bincode's value
    /// or, where bincode refuses the bytes, an error.
    #[test]
    fn damaged_hot_records_decode_as_bincode_does() {
        // Every argument shape, with value bytes cut to 9 to keep the record short.
        let args: Args = every_arg()
            .into_iter()
            .map(|a| match a {
                Arg::Val(b) => Arg::Val(ArgBytes::from(&b[..b.len().min(9)])),
                other => other,
            })
            .collect();
        let launch = Begin {
            seq: 1 << 33,
            thread: 1,
            site: SiteId(300),
            t_ns: 12_345,
            call: Call::new_launch(
                true,
                KernelId(2),
                [1, 1, 1],
                [256, 1, 1],
                0,
                StreamRef::Id(StreamId(1)),
                args,
            ),
        };
        let (head, view) = launch.launch_parts().expect("a launch");
        let mut begin = Vec::new();
        append_launch_begin(&head, &view, &mut begin);
        let mut end = Vec::new();
        append_end(70_000, 251, &Ok(Value::Unit), &mut end).unwrap();
        let mut checked = 0;
        for rec in [begin, end] {
            let mut variants: Vec<Vec<u8>> = (0..rec.len()).map(|n| rec[..n].to_vec()).collect();
            for i in 0..rec.len() {
                for b in [0u8, 1, 2, 3, 7, 8, 250, 251, 252, 253, 254, 255] {
                    let mut m = rec.clone();
                    m[i] = b;
                    variants.push(m);
                }
            }
            for m in variants {
                match decode_with_bincode(&m) {
                    Ok(f) => assert_eq!(decode(&m).unwrap(), f, "{m:?}"),
                    Err(_) => assert!(decode(&m).is_err(), "{m:?}"),
                }
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
    }
}
