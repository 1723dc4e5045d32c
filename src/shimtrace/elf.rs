//! The function an offset in an ELF file falls in, from the file's own symbol table: how a
//! host function a program queued is named when the loader knew no exported symbol for it (a
//! `static` function, or any function of an executable not linked with `-rdynamic`). Read
//! after the program exits, on the machine it ran on, so the file is the one that ran; a file
//! that is gone, changed, stripped or not ELF names nothing and the trace keeps file + offset.
//!
//! Only what the lookup needs is read (the headers, the symbol tables and their strings), each
//! part bounded, once per file.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The most bytes of symbols and of their names read from one file.
const MAX_TABLE: u64 = 64 << 20;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const PT_LOAD: u32 = 1;
const STT_FUNC: u8 = 2;

/// A file's function symbols, read once however many of its functions are asked about.
pub(crate) struct Symbols {
    /// Where the loader's base (what `dladdr` measures from) lies in the file's addresses.
    base: u64,
    /// Each symbol table (the full one first, then the exported one) and its strings.
    tables: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Symbols {
    /// The symbol tables of `path`, if it is a 64-bit little-endian ELF file (what the shim
    /// runs on, x86_64 Linux) that has any.
    pub(crate) fn read(path: &Path) -> Option<Symbols> {
        let mut f = File::open(path).ok()?;
        let head = read_at(&mut f, 0, 64)?;
        if head[..4] != *b"\x7fELF" || head[4] != 2 || head[5] != 1 {
            return None;
        }
        let phoff = u64_at(&head, 32)?;
        let shoff = u64_at(&head, 40)?;
        let phentsize = u64::from(u16_at(&head, 54)?);
        let phnum = u64::from(u16_at(&head, 56)?);
        let shentsize = u64::from(u16_at(&head, 58)?);
        let shnum = u64::from(u16_at(&head, 60)?);
        if phentsize < 56 || shentsize < 64 {
            return None;
        }
        // The loader maps the lowest loaded segment's page at the base `dladdr` measures from.
        let phdrs = read_at(&mut f, phoff, phentsize.checked_mul(phnum)?)?;
        let base = phdrs
            .chunks_exact(phentsize as usize)
            .filter(|p| u32_at(p, 0) == Some(PT_LOAD))
            .filter_map(|p| u64_at(p, 16))
            .min()?
            & !0xfff;
        let shdrs = read_at(&mut f, shoff, shentsize.checked_mul(shnum)?)?;
        let sections: Vec<&[u8]> = shdrs.chunks_exact(shentsize as usize).collect();
        let mut tables = Vec::new();
        for kind in [SHT_SYMTAB, SHT_DYNSYM] {
            let Some(sec) = sections.iter().find(|s| u32_at(s, 4) == Some(kind)) else {
                continue;
            };
            let table = (|| {
                let strings = sections.get(u32_at(sec, 40)? as usize)?;
                let syms = read_at(&mut f, u64_at(sec, 24)?, u64_at(sec, 32)?)?;
                let names = read_at(&mut f, u64_at(strings, 24)?, u64_at(strings, 32)?)?;
                Some((syms, names))
            })();
            tables.extend(table);
        }
        (!tables.is_empty()).then_some(Symbols { base, tables })
    }

    /// The name of the function that holds the byte at `offset` from where the loader mapped
    /// the file, from the first table that has one.
    pub(crate) fn function_at(&self, offset: u64) -> Option<String> {
        let vaddr = self.base.checked_add(offset)?;
        self.tables.iter().find_map(|(syms, names)| {
            let sym = syms.chunks_exact(24).find(|s| {
                let (Some(value), Some(size)) = (u64_at(s, 8), u64_at(s, 16)) else {
                    return false;
                };
                s[4] & 0xf == STT_FUNC && value <= vaddr && vaddr < value.saturating_add(size)
            })?;
            let at = u32_at(sym, 0)? as usize;
            let name = names.get(at..)?.split(|&b| b == 0).next()?;
            (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
        })
    }
}

/// `len` bytes of `f` at `at`, when the file has them and they are within `MAX_TABLE`.
fn read_at(f: &mut File, at: u64, len: u64) -> Option<Vec<u8>> {
    if len > MAX_TABLE {
        return None;
    }
    f.seek(SeekFrom::Start(at)).ok()?;
    let mut v = Vec::new();
    f.take(len).read_to_end(&mut v).ok()?;
    (v.len() as u64 == len).then_some(v)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own functions are found by their offset from its load base.
    #[test]
    fn a_function_of_this_binary_is_found_by_its_offset() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        // The base the loader mapped this binary at: the start of its first mapping.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_s = exe.to_string_lossy();
        let base = maps
            .lines()
            .find(|l| l.ends_with(&*exe_s))
            .and_then(|l| l.split('-').next())
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .unwrap();
        let f = a_function_of_this_binary_is_found_by_its_offset as *const () as u64;
        let name = Symbols::read(&exe)
            .and_then(|s| s.function_at(f - base))
            .expect("a name");
        assert!(
            name.contains("a_function_of_this_binary_is_found_by_its_offset"),
            "{name}"
        );
    }

    /// Anything but an ELF file names nothing, without an error.
    #[test]
    fn a_file_that_is_not_elf_names_nothing() {
        let p = std::env::temp_dir().join(format!("gputape-elf-{}", std::process::id()));
        std::fs::write(&p, b"\x7fELF\x02\x01 and then nothing a header needs").unwrap();
        assert!(Symbols::read(&p).is_none());
        std::fs::remove_file(&p).unwrap();
        assert!(Symbols::read(&p).is_none());
    }
}
