//! The serde serializer: its own room, as the encoding direction, written to match bincode's bytes.

use super::{CodecError, SINGLE_BYTE_MAX, U128_MARK, U16_MARK, U32_MARK, U64_MARK};
use serde::ser::{self, Serialize};

impl ser::Error for CodecError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

#[inline(always)]
pub(super) fn varint(out: &mut Vec<u8>, v: u64) {
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

pub(super) struct Writer<'a> {
    pub(super) out: &'a mut Vec<u8>,
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
