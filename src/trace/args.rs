//! What a call's arguments are made of: device and host addresses as ids plus offsets, stream
//! references, and a launch's kernel arguments (buffer addresses, bytes, tensor maps).

use super::call::{BufferId, HostId, StreamId};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::fmt;

/// A device address, as a trace spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DevAddr {
    /// Address 0.
    Null,
    /// Inside (or one past the end of) a buffer the recorder knows.
    Buf {
        /// The buffer.
        buf: BufferId,
        /// Bytes from its base.
        off: u64,
    },
    /// Inside a buffer that was already freed (a use-after-free or double free).
    Freed {
        /// The freed buffer.
        buf: BufferId,
        /// Bytes from its base.
        off: u64,
    },
    /// Not in any live buffer. The nearest buffer below it, and how far past its base, is kept
    /// so a fault report can still say "4 KiB past the end of buf7".
    Unknown {
        /// The nearest buffer below and the distance from its base, in bytes; `None` when no
        /// buffer lies below.
        near: Option<(BufferId, u64)>,
    },
}

impl fmt::Display for DevAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevAddr::Null => write!(f, "null"),
            DevAddr::Buf { buf, off } => write!(f, "{buf}+{off}"),
            DevAddr::Freed { buf, off } => write!(f, "{buf}+{off} (freed)"),
            DevAddr::Unknown {
                near: Some((b, off)),
            } => write!(f, "?({b}+{off}, outside)"),
            DevAddr::Unknown { near: None } => write!(f, "?(no buffer)"),
        }
    }
}

/// A stream argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum StreamRef {
    /// The legacy NULL stream (handle 0).
    Legacy,
    /// A stream the engine created, or one first seen in use.
    Id(StreamId),
}

impl fmt::Display for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamRef::Legacy => write!(f, "legacy"),
            StreamRef::Id(s) => write!(f, "{s}"),
        }
    }
}

/// A host pointer into a pinned region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostAddr {
    /// Inside a pinned region the recorder saw allocated.
    Pinned {
        /// The region.
        host: HostId,
        /// Bytes from its start.
        off: u64,
    },
    /// Not a pinned region this recorder saw allocated.
    Unknown,
}

/// One kernel argument.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arg {
    /// A pointer-sized argument that pointed into a live buffer (or was declared a buffer).
    Buf(DevAddr),
    /// Anything else, by value, little-endian.
    Val(ArgBytes),
    /// A tensor map built by `encode_tensor_map`: what it describes and the buffer its
    /// address points into, so a replay encodes it anew for that buffer (format 3).
    TensorMap(Box<TensorMapArg>),
    /// A by-value parameter with device addresses inside it (a struct of pointers, as a
    /// driver-level recording finds them: format 8): its bytes, and each 8-byte aligned word
    /// that pointed into a live buffer, which a replay rewrites for where that buffer is now.
    Words(Box<WordsArg>),
}

impl Arg {
    /// Every device address this argument carries: a pointer's, a tensor map's, each word of
    /// a parameter with addresses inside.
    pub fn device_addrs(&self) -> impl Iterator<Item = &DevAddr> {
        let (words, maps) = match self {
            Arg::Words(w) => (&w.ptrs[..], &w.maps[..]),
            _ => (&[][..], &[][..]),
        };
        let single = match self {
            Arg::Words(_) => None,
            other => other.device_addr(),
        };
        single
            .into_iter()
            .chain(words.iter().map(|(_, d)| d))
            .chain(maps.iter().map(|(_, m)| &m.base))
    }

    /// `device_addrs`, each to be changed in place.
    pub fn device_addrs_mut(&mut self) -> impl Iterator<Item = &mut DevAddr> {
        let (single, words, maps): (Option<&mut DevAddr>, &mut [_], &mut [_]) = match self {
            Arg::Words(w) => (None, &mut w.ptrs[..], &mut w.maps[..]),
            Arg::Buf(d) => (Some(d), &mut [], &mut []),
            Arg::TensorMap(m) => (Some(&mut m.base), &mut [], &mut []),
            Arg::Val(_) => (None, &mut [], &mut []),
        };
        single
            .into_iter()
            .chain(words.iter_mut().map(|(_, d)| d))
            .chain(maps.iter_mut().map(|(_, m)| &mut m.base))
    }

    /// The device address this argument carries: a pointer's, or the one inside a tensor map
    /// (the first, for a parameter with several).
    pub fn device_addr(&self) -> Option<&DevAddr> {
        match self {
            Arg::Buf(d) => Some(d),
            Arg::TensorMap(m) => Some(&m.base),
            Arg::Words(w) => w.ptrs.first().map(|(_, d)| d),
            Arg::Val(_) => None,
        }
    }
}

/// A by-value parameter with device addresses inside it, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordsArg {
    /// The parameter's bytes as the program passed them.
    #[serde(with = "byte_vec")]
    pub bytes: Vec<u8>,
    /// The byte offset of each word that held a device address, and where it pointed.
    pub ptrs: Vec<(u32, DevAddr)>,
    /// The byte offset of each tensor map inside it (128 bytes each, which a replay encodes
    /// anew for where the map's buffer is now; `ptrs` has no word inside them).
    pub maps: Vec<(u32, TensorMapArg)>,
}

impl WordsArg {
    /// The bytes with each address word rewritten by `addr` (where that buffer is now) and
    /// each tensor map by `map` (its bytes encoded for there).
    pub fn relocated<E>(
        &self,
        mut addr: impl FnMut(&DevAddr) -> Result<u64, E>,
        mut map: impl FnMut(&TensorMapArg) -> Result<Vec<u8>, E>,
    ) -> Result<Vec<u8>, E> {
        let mut out = self.bytes.clone();
        for (off, d) in &self.ptrs {
            let at = *off as usize;
            if let Some(w) = out.get_mut(at..at + 8) {
                w.copy_from_slice(&addr(d)?.to_le_bytes());
            }
        }
        for (off, m) in &self.maps {
            let at = *off as usize;
            let bytes = map(m)?;
            if let Some(w) = out.get_mut(at..at + bytes.len()) {
                w.copy_from_slice(&bytes);
            }
        }
        Ok(out)
    }
}

/// A tensor-map argument, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapArg {
    /// The address the map was encoded for.
    pub base: DevAddr,
    /// What it describes, less the address.
    pub desc: crate::backend::TensorMapDesc,
}

/// A by-value kernel argument's bytes, inline up to 8. Serialised as one byte string (a length
/// and a copy) rather than as a sequence of single bytes, which is what serde would do for a
/// `SmallVec<u8>` and which cost the recorder's hot path a visitor call per byte.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ArgBytes(pub SmallVec<[u8; 8]>);

impl std::ops::Deref for ArgBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for ArgBytes {
    fn from(b: &[u8]) -> Self {
        ArgBytes(SmallVec::from_slice(b))
    }
}

impl Serialize for ArgBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for ArgBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ArgBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("argument bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ArgBytes, E> {
                Ok(ArgBytes::from(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<ArgBytes, A::Error> {
                let mut out = SmallVec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(ArgBytes(out))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// A `Vec<u8>` field as serde bytes (`#[serde(with = "byte_vec")]`): encoded as a length and
/// the bytes, exactly as a sequence of `u8` is, but in one copy; read back from either form.
pub(crate) mod byte_vec {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                // A hostile length must not reserve memory: grow as elements arrive.
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// A launch's arguments, in parameter order; eight inline before any heap allocation.
pub type Args = SmallVec<[Arg; 8]>;
