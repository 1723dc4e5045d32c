//! A record body's field kinds, written (`put`) and read (`Fields`) by the same name: the
//! record table (`record.rs`) names each field's kind once, and its encoder and decoder are
//! made from that name, so the two cannot drift apart.

use std::borrow::Cow;

use crate::{LogError, On};

/// A launch's parameter layout, (offset, size) pairs; `None` when the driver gave none.
pub(crate) type Layout<'a> = Option<Cow<'a, [(u32, u32)]>>;

/// Writers, one per field kind; each takes the field as a `match` on the record binds it.
pub(crate) mod put {
    use super::*;

    pub fn u64(out: &mut Vec<u8>, v: &u64) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u32(out: &mut Vec<u8>, v: &u32) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i32(out: &mut Vec<u8>, v: &i32) {
        out.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u8(out: &mut Vec<u8>, v: &u8) {
        out.push(*v);
    }

    pub fn flag(out: &mut Vec<u8>, v: &bool) {
        out.push(u8::from(*v));
    }

    /// A u64 length, then the bytes.
    pub fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        u64(out, &(b.len() as u64));
        out.extend_from_slice(b);
    }

    /// A u32 length, then the bytes (names and paths).
    pub fn str(out: &mut Vec<u8>, b: &[u8]) {
        u32(out, &(b.len() as u32));
        out.extend_from_slice(b);
    }

    pub fn pairs(out: &mut Vec<u8>, b: &[u8]) {
        bytes(out, b)
    }

    pub fn ids(out: &mut Vec<u8>, b: &[u8]) {
        bytes(out, b)
    }

    pub fn on(out: &mut Vec<u8>, on: &On) {
        u64(out, &on.stream);
        flag(out, &on.sync);
    }

    pub fn dims(out: &mut Vec<u8>, d: &[u32; 3]) {
        for v in d {
            u32(out, v);
        }
    }

    pub fn u32x4(out: &mut Vec<u8>, d: &[u32; 4]) {
        for v in d {
            u32(out, v);
        }
    }

    /// A u32 count, then the values.
    pub fn list64(out: &mut Vec<u8>, l: &[u64]) {
        u32(out, &(l.len() as u32));
        for v in l {
            u64(out, v);
        }
    }

    /// A u32 count, then the values.
    pub fn list32(out: &mut Vec<u8>, l: &[u32]) {
        u32(out, &(l.len() as u32));
        for v in l {
            u32(out, v);
        }
    }

    /// A launch's parameter layout: a u32 count (`u32::MAX` for none known), then the
    /// (offset, size) pairs.
    pub fn layout(out: &mut Vec<u8>, l: &Layout<'_>) {
        let n = l.as_ref().map_or(u32::MAX, |l| l.len() as u32);
        u32(out, &n);
        for (o, s) in l.as_deref().unwrap_or(&[]) {
            u32(out, o);
            u32(out, s);
        }
    }
}

/// A record's body, read field by field; every read names what it reads, for the error when
/// the body ends first.
pub(crate) struct Fields<'a> {
    pub b: &'a [u8],
    pub at: usize,
    /// The record's offset in the file, for errors.
    pub offset: u64,
}

impl<'a> Fields<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn short(&self, what: &'static str) -> LogError {
        LogError::Field {
            offset: self.offset,
            what,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LogError> {
        if n > self.left() {
            return Err(self.short(what));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], LogError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, LogError> {
        Ok(self.take(1, what)?[0])
    }

    pub fn flag(&mut self, what: &'static str) -> Result<bool, LogError> {
        Ok(self.u8(what)? != 0)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, LogError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn i32(&mut self, what: &'static str) -> Result<i32, LogError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, LogError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let n = usize::try_from(self.u64(what)?).unwrap_or(usize::MAX);
        self.take(n, what)
    }

    pub fn str(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    /// Bytes that must hold whole (code id, instruction) pairs of 8 bytes.
    pub fn pairs(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let b = self.bytes(what)?;
        if b.len() % 8 != 0 {
            return Err(self.short("stack frames (not whole pairs)"));
        }
        Ok(b)
    }

    /// Bytes that must hold whole 4-byte ids.
    pub fn ids(&mut self, what: &'static str) -> Result<&'a [u8], LogError> {
        let b = self.bytes(what)?;
        if b.len() % 4 != 0 {
            return Err(self.short("native frames (not whole ids)"));
        }
        Ok(b)
    }

    pub fn on(&mut self, _what: &'static str) -> Result<On, LogError> {
        Ok(On {
            stream: self.u64("stream")?,
            sync: self.flag("sync flag")?,
        })
    }

    pub fn dims(&mut self, what: &'static str) -> Result<[u32; 3], LogError> {
        Ok([self.u32(what)?, self.u32(what)?, self.u32(what)?])
    }

    pub fn u32x4(&mut self, what: &'static str) -> Result<[u32; 4], LogError> {
        Ok([
            self.u32(what)?,
            self.u32(what)?,
            self.u32(what)?,
            self.u32(what)?,
        ])
    }

    /// `n` entries of `width` bytes each, read by `read`: a count past what is left is refused
    /// before anything is allocated for it.
    fn entries<T>(
        &mut self,
        n: u32,
        width: usize,
        what: &'static str,
        mut read: impl FnMut(&mut Self) -> Result<T, LogError>,
    ) -> Result<Vec<T>, LogError> {
        if (n as usize).saturating_mul(width) > self.left() {
            return Err(self.short(what));
        }
        (0..n).map(|_| read(self)).collect()
    }

    pub fn list64(&mut self, what: &'static str) -> Result<Vec<u64>, LogError> {
        let n = self.u32(what)?;
        self.entries(n, 8, what, |f| f.u64(what))
    }

    pub fn list32(&mut self, what: &'static str) -> Result<Vec<u32>, LogError> {
        let n = self.u32(what)?;
        self.entries(n, 4, what, |f| f.u32(what))
    }

    pub fn layout(&mut self, what: &'static str) -> Result<Layout<'a>, LogError> {
        let n = self.u32(what)?;
        if n == u32::MAX {
            return Ok(None);
        }
        let l = self.entries(n, 8, what, |f| {
            Ok((f.u32("parameter offset")?, f.u32("parameter size")?))
        })?;
        Ok(Some(Cow::Owned(l)))
    }
}
