//! Simulated device memory: real bytes, exact bounds, deterministic addresses.

use super::error::{AllocDesc, MockError};
use crate::backend::Site;
use std::alloc::Layout;
use std::collections::BTreeMap;

/// First device address handed out. Looks like a CUDA VA so addresses in reports read naturally.
pub const BASE_ADDR: u64 = 0x7f00_0000_0000;
/// Where host aliases (`host_ptr_to_device`) are mapped.
pub const ALIAS_BASE: u64 = 0x7e00_0000_0000;
/// cuMemAlloc guarantees 256-byte alignment; we use 512 and leave a gap after every allocation,
/// so an overrun never lands silently in a neighbour.
pub const ALIGN: u64 = 512;
const GAP: u64 = 4096;

pub(crate) enum Storage {
    Owned(Vec<u8>),
    /// Device alias of a pinned host region: the bytes are the host's.
    HostAlias {
        host: usize,
    },
}

pub(crate) struct Allocation {
    pub size: usize,
    pub storage: Storage,
    pub index: usize,
    pub site: Site,
}

pub(crate) struct Freed {
    pub desc: AllocDesc,
    pub freed_at: Site,
}

pub(crate) struct Pinned {
    pub len: usize,
    pub layout: Layout,
    pub alias: Option<u64>,
}

pub(crate) struct Memory {
    pub allocs: BTreeMap<u64, Allocation>,
    pub freed: BTreeMap<u64, Freed>,
    pub pinned: BTreeMap<usize, Pinned>,
    next: u64,
    next_alias: u64,
    pub created: usize,
    pub live_bytes: usize,
    /// The byte fresh allocations hold: 0, or `chaos::POISON` under chaos.
    pub fill: u8,
}

fn desc(base: u64, a: &Allocation) -> AllocDesc {
    AllocDesc {
        base,
        size: a.size,
        index: a.index,
        site: a.site,
    }
}

impl Memory {
    pub fn new() -> Self {
        Memory {
            allocs: BTreeMap::new(),
            freed: BTreeMap::new(),
            pinned: BTreeMap::new(),
            next: BASE_ADDR,
            next_alias: ALIAS_BASE,
            created: 0,
            live_bytes: 0,
            fill: 0,
        }
    }

    pub fn alloc(&mut self, op: &'static str, size: usize, site: Site) -> Result<u64, MockError> {
        let storage = self.storage(op, size, site)?;
        let base = self.next;
        // A zero-byte allocation still gets a distinct address, as cuMemAlloc(0) is an error on
        // CUDA but engines round up; the mock keeps it addressable for exactly 0 bytes.
        self.next = (base + size as u64 + GAP).next_multiple_of(ALIGN);
        self.allocs.insert(
            base,
            Allocation {
                size,
                storage,
                index: self.created,
                site,
            },
        );
        self.created += 1;
        self.live_bytes += size;
        Ok(base)
    }

    /// An allocation's bytes, asked of the host fallibly: a size read from a trace may be
    /// anything the mock's limit allows, which the host may not have. Zeroed memory comes from
    /// `alloc_zeroed`, which for large sizes maps fresh pages that cost nothing until written,
    /// so a mostly unused allocation is sparse in the host's memory, as on a device; only a
    /// non-zero fill (chaos's poison) touches every page.
    fn storage(&self, op: &'static str, size: usize, site: Site) -> Result<Storage, MockError> {
        if size == 0 {
            return Ok(Storage::Owned(Vec::new()));
        }
        let oom = || MockError::HostOutOfMemory {
            op,
            site,
            requested: size,
        };
        let layout = Layout::array::<u8>(size).map_err(|_| oom())?;
        // SAFETY: `layout` has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(oom());
        }
        // SAFETY: `p` was allocated by the global allocator with the layout of `[u8; size]`,
        // all `size` bytes are initialised (zeroed), and the Vec takes sole ownership of it.
        let mut v = unsafe { Vec::from_raw_parts(p, size, size) };
        if self.fill != 0 {
            v.fill(self.fill);
        }
        Ok(Storage::Owned(v))
    }

    /// Allocate at exactly `base`, if no live allocation overlaps it.
    pub fn alloc_at(&mut self, base: u64, size: usize, site: Site) -> Result<u64, MockError> {
        let end = base
            .checked_add(size as u64)
            .filter(|e| e.checked_add(GAP + ALIGN).is_some())
            .ok_or_else(|| MockError::Invalid {
                op: "alloc_at",
                site,
                detail: format!("[{base:#x}, +{size}) runs past the end of the address space"),
            })?;
        let clash = self
            .allocs
            .range(..end)
            .next_back()
            .filter(|(b, a)| **b + a.size as u64 > base || **b == base);
        if let Some((b, a)) = clash {
            return Err(MockError::Invalid {
                op: "alloc_at",
                site,
                detail: format!("[{base:#x}, +{size}) overlaps {}", desc(*b, a)),
            });
        }
        let storage = self.storage("alloc_at", size, site)?;
        self.allocs.insert(
            base,
            Allocation {
                size,
                storage,
                index: self.created,
                site,
            },
        );
        self.freed.remove(&base);
        self.created += 1;
        self.live_bytes += size;
        self.next = self.next.max((end + GAP).next_multiple_of(ALIGN));
        Ok(base)
    }

    pub fn free(&mut self, ptr: u64, site: Site) -> Result<usize, MockError> {
        match self.allocs.get(&ptr) {
            Some(a) if matches!(a.storage, Storage::Owned(_)) => {
                let a = self.allocs.remove(&ptr).expect("just found");
                self.live_bytes -= a.size;
                self.freed.insert(
                    ptr,
                    Freed {
                        desc: desc(ptr, &a),
                        freed_at: site,
                    },
                );
                Ok(a.size)
            }
            Some(a) => Err(MockError::Invalid {
                op: "free",
                site,
                detail: format!(
                    "{ptr:#x} is a host alias (allocation #{}), free its pinned region instead",
                    a.index
                ),
            }),
            None => {
                if let Some(f) = self.freed.get(&ptr) {
                    return Err(MockError::DoubleFree {
                        site,
                        ptr,
                        alloc: f.desc.clone(),
                        freed_at: f.freed_at,
                    });
                }
                if let Some((base, a)) = self.containing(ptr) {
                    return Err(MockError::FreeInterior {
                        site,
                        ptr,
                        alloc: desc(base, a),
                    });
                }
                Err(MockError::WildPointer {
                    op: "free",
                    site,
                    ptr,
                })
            }
        }
    }

    fn containing(&self, ptr: u64) -> Option<(u64, &Allocation)> {
        let (&base, a) = self.allocs.range(..=ptr).next_back()?;
        // `<=` so a pointer one past the end still names its allocation in an overrun report.
        (ptr <= base + a.size as u64).then_some((base, a))
    }

    /// The live allocation holding `ptr` (at most one past its end), or the error a driver-side
    /// sanitizer would give.
    pub fn locate(
        &self,
        ptr: u64,
        len: usize,
        op: &'static str,
        site: Site,
    ) -> Result<(u64, usize), MockError> {
        if let Some((base, a)) = self.containing(ptr) {
            let off = (ptr - base) as usize;
            if off.checked_add(len).is_none_or(|end| end > a.size) {
                return Err(MockError::OutOfBounds {
                    op,
                    site,
                    ptr,
                    len,
                    // `off + len` may be what overflowed: saturate, never wrap or panic.
                    over: off.saturating_add(len).saturating_sub(a.size),
                    alloc: desc(base, a),
                });
            }
            return Ok((base, off));
        }
        if let Some((_, f)) = self.freed.range(..=ptr).next_back() {
            if ptr < f.desc.base + f.desc.size.max(1) as u64 {
                return Err(MockError::UseAfterFree {
                    op,
                    site,
                    ptr,
                    alloc: f.desc.clone(),
                    freed_at: f.freed_at,
                });
            }
        }
        Err(MockError::WildPointer { op, site, ptr })
    }

    /// Whether `ptr` lies in a live allocation; for checking pointer-typed kernel arguments,
    /// whose extent the launch does not say.
    pub fn check_pointer(&self, ptr: u64, op: &'static str, site: Site) -> Result<(), MockError> {
        self.locate(ptr, 0, op, site).map(|_| ())
    }

    pub fn read(
        &self,
        ptr: u64,
        len: usize,
        op: &'static str,
        site: Site,
    ) -> Result<&[u8], MockError> {
        let (base, off) = self.locate(ptr, len, op, site)?;
        let a = &self.allocs[&base];
        Ok(match &a.storage {
            Storage::Owned(v) => &v[off..off + len],
            Storage::HostAlias { host } => {
                // SAFETY: the alias exists only while its pinned region is live (freeing the
                // region removes the alias first), the region is `a.size` bytes, and
                // `locate` checked `off + len <= a.size`.
                unsafe { std::slice::from_raw_parts((*host as *const u8).add(off), len) }
            }
        })
    }

    pub fn write(
        &mut self,
        ptr: u64,
        len: usize,
        op: &'static str,
        site: Site,
    ) -> Result<&mut [u8], MockError> {
        let (base, off) = self.locate(ptr, len, op, site)?;
        let a = self.allocs.get_mut(&base).expect("located");
        Ok(match &mut a.storage {
            Storage::Owned(v) => &mut v[off..off + len],
            Storage::HostAlias { host } => {
                // SAFETY: as in `read`; `&mut self` makes this the only view the mock hands out.
                unsafe { std::slice::from_raw_parts_mut((*host as *mut u8).add(off), len) }
            }
        })
    }

    pub fn copy_within(
        &mut self,
        src: u64,
        dst: u64,
        len: usize,
        op: &'static str,
        site: Site,
    ) -> Result<(), MockError> {
        let from = self.read(src, len, op, site)?;
        // The copy goes through the host: asked for fallibly, as every size a trace sets.
        let mut tmp = Vec::new();
        tmp.try_reserve_exact(len)
            .map_err(|_| MockError::HostOutOfMemory {
                op,
                site,
                requested: len,
            })?;
        tmp.extend_from_slice(from);
        self.write(dst, len, op, site)?.copy_from_slice(&tmp);
        Ok(())
    }

    // ---- pinned host memory ----

    pub fn alloc_pinned(&mut self, bytes: usize, site: Site) -> Result<*mut u8, MockError> {
        let oom = || MockError::OutOfMemory {
            op: "alloc_host_pinned",
            site,
            requested: bytes,
            live: 0,
            limit: isize::MAX as usize,
        };
        let layout = Layout::from_size_align(bytes.max(1), 4096).map_err(|_| oom())?;
        // SAFETY: the layout has non-zero size; the memory is zeroed as the trait demands and
        // freed only through `free_pinned` (or Drop) with this same layout.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(oom());
        }
        self.pinned.insert(
            p as usize,
            Pinned {
                len: bytes,
                layout,
                alias: None,
            },
        );
        Ok(p)
    }

    pub fn free_pinned(&mut self, p: *mut u8, bytes: usize, site: Site) -> Result<(), MockError> {
        let key = p as usize;
        let Some(r) = self.pinned.get(&key) else {
            return Err(MockError::Invalid {
                op: "free_host_pinned",
                site,
                detail: format!("{key:#x} is not a pinned region of this backend"),
            });
        };
        if r.len != bytes {
            return Err(MockError::Invalid {
                op: "free_host_pinned",
                site,
                detail: format!(
                    "{key:#x} was allocated with {} bytes, freed with {bytes}",
                    r.len
                ),
            });
        }
        let r = self.pinned.remove(&key).expect("just found");
        if let Some(alias) = r.alias {
            let a = self.allocs.remove(&alias).expect("alias present");
            self.freed.insert(
                alias,
                Freed {
                    desc: desc(alias, &a),
                    freed_at: site,
                },
            );
        }
        // SAFETY: `p` came from `alloc_pinned` with `r.layout` and is removed from the table,
        // so it cannot be freed twice.
        unsafe { std::alloc::dealloc(p, r.layout) };
        Ok(())
    }

    /// The pinned region holding `[p, p+len)`, as (region base, offset).
    pub fn pinned_containing(&self, p: usize, len: usize) -> Option<(usize, usize)> {
        let (&base, r) = self.pinned.range(..=p).next_back()?;
        (p + len <= base + r.len).then_some((base, p - base))
    }

    pub fn host_alias(&mut self, p: *mut u8, site: Site) -> Result<u64, MockError> {
        let Some((base, off)) = self.pinned_containing(p as usize, 0) else {
            return Err(MockError::Invalid {
                op: "host_ptr_to_device",
                site,
                detail: format!(
                    "{:#x} is not inside a pinned region of this backend",
                    p as usize
                ),
            });
        };
        let r = self.pinned.get_mut(&base).expect("found");
        let alias = match r.alias {
            Some(a) => a,
            None => {
                let a = self.next_alias;
                self.next_alias = (a + r.len as u64 + GAP).next_multiple_of(ALIGN);
                r.alias = Some(a);
                self.allocs.insert(
                    a,
                    Allocation {
                        size: r.len,
                        storage: Storage::HostAlias { host: base },
                        index: usize::MAX,
                        site,
                    },
                );
                a
            }
        };
        Ok(alias + off as u64)
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        for (p, r) in std::mem::take(&mut self.pinned) {
            // SAFETY: every table entry came from `alloc_pinned` with this layout and was not
            // freed (freeing removes it).
            unsafe { std::alloc::dealloc(p as *mut u8, r.layout) };
        }
    }
}

// SAFETY: `Memory` holds raw addresses of pinned regions as `usize` and only dereferences them
// under `&self`/`&mut self`, which the backend guards with its mutex.
unsafe impl Send for Memory {}
