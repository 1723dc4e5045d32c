//! Binary module images, as programs hand them to the CUDA driver (`cuModuleLoadData`,
//! `cuLibraryLoadData`): a fatbin, an ELF cubin, or PTX text. The driver takes no size and
//! reads as far as the image's own headers say; an image from a trace is untrusted, so before
//! one reaches the driver its headers are checked to lie within the bytes there are.

use std::fmt;

/// What an image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// A fat binary: cubins for several architectures, and PTX.
    Fatbin,
    /// One ELF cubin, for one architecture.
    Cubin,
    /// PTX text, NUL-terminated.
    Ptx,
}

impl ImageKind {
    /// `fatbin`, `cubin`, `ptx`: how module names made from images begin.
    pub fn name(self) -> &'static str {
        match self {
            ImageKind::Fatbin => "fatbin",
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        }
    }
}

/// Why bytes are not an image the driver may be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageError(pub String);

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ImageError {}

/// Fatbin magic (`0xBA55ED50`, little-endian), then u16 version, u16 header size, u64 size
/// after the header.
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// What `bytes` is, having checked that every extent its headers give lies inside it.
pub fn image_kind(bytes: &[u8]) -> Result<ImageKind, ImageError> {
    let err = |s: String| Err(ImageError(s));
    let n = bytes.len() as u64;
    let u16_at = |o: usize| {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    if u32_at(0) == Some(FATBIN_MAGIC) {
        let (Some(head), Some(size)) = (u16_at(6), u64_at(8)) else {
            return err(format!("a fatbin of {n} bytes, too short for its header"));
        };
        let total = (head as u64).saturating_add(size);
        if total > n {
            return err(format!(
                "a fatbin whose header says {total} bytes, of which only {n} are here"
            ));
        }
        return Ok(ImageKind::Fatbin);
    }
    if bytes.starts_with(b"\x7fELF") {
        if bytes.get(4) != Some(&2) {
            return err("an ELF image that is not 64-bit".into());
        }
        let fields = (
            u64_at(0x20),
            u64_at(0x28),
            u16_at(0x36),
            u16_at(0x38),
            u16_at(0x3A),
            u16_at(0x3C),
        );
        let (Some(phoff), Some(shoff), Some(phent), Some(phnum), Some(shent), Some(shnum)) = fields
        else {
            return err(format!(
                "an ELF image of {n} bytes, too short for its header"
            ));
        };
        let end = |off: u64, ent: u16, num: u16| off.saturating_add(ent as u64 * num as u64);
        let tables = end(phoff, phent, phnum).max(end(shoff, shent, shnum));
        if tables > n {
            return err(format!(
                "an ELF image whose header tables reach byte {tables}, of {n} here"
            ));
        }
        if shnum > 0 && shent < 0x28 {
            return err(format!("an ELF image with {shent}-byte section headers"));
        }
        for k in 0..shnum as u64 {
            let sh = (shoff + k * shent as u64) as usize;
            let (Some(ty), Some(off), Some(size)) =
                (u32_at(sh + 4), u64_at(sh + 0x18), u64_at(sh + 0x20))
            else {
                return err(format!("an ELF image whose section header {k} is cut"));
            };
            // SHT_NOBITS takes no bytes of the file.
            if ty != 8 && off.saturating_add(size) > n {
                return err(format!(
                    "an ELF image whose section {k} reaches byte {}, of {n} here",
                    off.saturating_add(size)
                ));
            }
        }
        return Ok(ImageKind::Cubin);
    }
    match bytes.iter().position(|&b| b == 0) {
        Some(0) | None => err(format!(
            "{n} bytes that are no fatbin, ELF cubin or NUL-terminated PTX"
        )),
        Some(_) => Ok(ImageKind::Ptx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fatbin(size_after: u64, have: usize) -> Vec<u8> {
        let mut v = FATBIN_MAGIC.to_le_bytes().to_vec();
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(&size_after.to_le_bytes());
        v.resize(have, 0);
        v
    }

    #[test]
    fn images_are_told_apart_and_their_extents_checked() {
        assert_eq!(image_kind(&fatbin(8, 24)), Ok(ImageKind::Fatbin));
        assert!(image_kind(&fatbin(9, 24)).is_err());
        assert!(image_kind(&fatbin(u64::MAX, 24)).is_err());
        assert_eq!(image_kind(b".version 8.0\0"), Ok(ImageKind::Ptx));
        assert!(image_kind(b".version 8.0").is_err());
        assert!(image_kind(b"").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        assert_eq!(image_kind(&elf), Ok(ImageKind::Cubin));
        // A section table past the end.
        elf[0x28..0x30].copy_from_slice(&1000u64.to_le_bytes());
        elf[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3C..0x3E].copy_from_slice(&1u16.to_le_bytes());
        assert!(image_kind(&elf).is_err());
        elf[4] = 1;
        assert!(image_kind(&elf).is_err());
    }
}
