//! The serde deserializer: its own room, as the decoding direction, run on untrusted bytes.

use super::{CodecError, SINGLE_BYTE_MAX, U128_MARK, U16_MARK, U32_MARK, U64_MARK};
use serde::de::{self, IntoDeserializer, Visitor};

impl de::Error for CodecError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CodecError(msg.to_string())
    }
}

/// The decoding side: a cursor over one record's bytes. Every read is bounds-checked; a short or
/// malformed record is an error, never a panic.
pub(super) struct Reader<'de> {
    pub(super) bytes: &'de [u8],
    pub(super) pos: usize,
}

type DRes<T> = Result<T, CodecError>;

impl<'de> Reader<'de> {
    #[inline(always)]
    pub(super) fn take(&mut self, n: usize) -> DRes<&'de [u8]> {
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
    pub(super) fn byte(&mut self) -> DRes<u8> {
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
    pub(super) fn varint(&mut self, bits: u32) -> DRes<u64> {
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
    pub(super) fn len(&mut self) -> DRes<usize> {
        let n = self.varint(64)?;
        usize::try_from(n).map_err(|_| CodecError(format!("length {n} does not fit in memory")))
    }

    /// The element count of a sequence or map. Every element of every record takes at least
    /// one byte, so a count beyond the bytes left is a lie, refused here, before any visitor
    /// sizes anything by it.
    #[inline(always)]
    pub(super) fn count(&mut self) -> DRes<usize> {
        let at = self.pos;
        let n = self.len()?;
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(CodecError(format!(
                "a count of {n} at byte {at}, but only {left} bytes are left in the record"
            )));
        }
        Ok(n)
    }

    /// A size hint no bigger than the bytes left, so a damaged length cannot make a visitor
    /// reserve more memory than the record could possibly fill.
    pub(super) fn hint(&self, len: usize) -> usize {
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
        let len = self.count()?;
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
        let len = self.count()?;
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
