//! Physical memory shared between processes through the virtual memory API's shareable
//! handles (`cuMemExportToShareableHandle`, `cuMemImportFromShareableHandle`; the shim's
//! `record/shareable.rs` says how the key that names it in both processes is made).
//!
//! A reservation is the trace's buffer (`reservation_extents`), so sharing is followed where a
//! reservation is one allocation mapped at its base: the exporter's buffer is handed to other
//! processes from the later of the export and the map (`SharedId::Memory`); the importer's
//! reservation gets its buffer only where its mapping became readable (`ImportedBytes`: what a
//! reservation holds before that, no call can read), with the bytes it held then uploaded, as an
//! IPC-opened buffer is. A shared allocation mapped anywhere else (past a reservation's base,
//! beside others) is replayed as when alone: the importer's bytes uploaded where they were
//! mapped, no pairing (counted in the summary).

use super::*;

/// What the converter keeps of shared physical memory.
#[derive(Default)]
pub(super) struct SharedMemory {
    /// Reservations (by the index of their `Reserve` record) that hold exactly one map, at
    /// their base, of an imported allocation (`reservation_extents`): their buffer is made
    /// where it became readable.
    pub(super) opened: HashSet<u64>,
    /// Those reservations not given a buffer yet: base -> (extent, the key of the imported
    /// allocation mapped there, once mapped).
    deferred: HashMap<u64, (u64, Option<Vec<u8>>)>,
    /// Exported allocations not yet mapped at a reservation's base: handle -> key.
    pub(super) exports: HashMap<u64, Vec<u8>>,
    /// Allocations mapped at a live buffer's base (offset 0): handle -> base.
    at_base: HashMap<u64, u64>,
    /// Imported allocations: handle -> key (empty: the exporter was not found).
    imports: HashMap<u64, Vec<u8>>,
}

impl Converter {
    /// A reservation at `ptr`, `extent` long, that an imported allocation backs: no buffer
    /// until its mapping is readable. Whether it was one.
    pub(super) fn defer_reservation(&mut self, index: u64, ptr: u64, extent: u64) -> bool {
        if !self.vmm.opened.contains(&index) {
            return false;
        }
        self.vmm.deferred.insert(ptr, (extent, None));
        true
    }

    /// The reservation at `ptr` freed: whether it was one deferred and never made a buffer.
    pub(super) fn drop_deferred(&mut self, ptr: u64) -> bool {
        self.vmm.deferred.remove(&ptr).is_some()
    }

    /// `cuMemMap` of allocation `handle` from its byte `offset` at `ptr`.
    pub(super) fn mapped_allocation(&mut self, ptr: u64, offset: u64, handle: u64) {
        if let (Some(key), Some((_, mapped))) = (
            self.vmm.imports.get(&handle),
            self.vmm.deferred.get_mut(&ptr),
        ) {
            *mapped = Some(key.clone());
        }
        let at_base = offset == 0 && self.live.contains_key(&ptr);
        if !at_base {
            return;
        }
        self.vmm.at_base.insert(handle, ptr);
        if let Some(key) = self.vmm.exports.remove(&handle) {
            self.export_memory(ptr, &key);
        }
    }

    /// `cuMemExportToShareableHandle` of allocation `handle`, named `key` for its importers.
    pub(super) fn shareable_export(&mut self, handle: u64, key: &[u8]) {
        self.summary.vmm_exported += 1;
        if key.is_empty() {
            self.summary.vmm_unpaired += 1;
            return;
        }
        match self.vmm.at_base.get(&handle) {
            Some(&base) if self.live.contains_key(&base) => self.export_memory(base, key),
            _ => {
                self.vmm.exports.insert(handle, key.to_vec());
            }
        }
    }

    /// The buffer at `base` is shared under `key` from the next call on.
    fn export_memory(&mut self, base: u64, key: &[u8]) {
        if let Some(&(buf, _)) = self.live.get(&base) {
            self.exported(SharedId::Memory(buf), key);
        }
    }

    /// `cuMemImportFromShareableHandle`: allocation `handle` is another process's, `key`.
    pub(super) fn shareable_import(&mut self, handle: u64, key: &[u8]) {
        self.summary.vmm_imported += 1;
        self.vmm.imports.insert(handle, key.to_vec());
    }

    /// An imported allocation's mapping at `ptr` readable from here, holding `data` (empty:
    /// not read). A deferred reservation there becomes its buffer: the `Alloc` returned (and
    /// its bytes uploaded just after); elsewhere the call is the upload of the bytes where
    /// they lie (none when not read).
    pub(super) fn imported_bytes(&mut self, ptr: u64, data: &[u8]) -> Option<(Call, Value)> {
        let Some((extent, key)) = self.vmm.deferred.remove(&ptr) else {
            self.summary.vmm_unpaired += 1;
            let known = matches!(self.addr(ptr), DevAddr::Buf { .. });
            return (known && !data.is_empty())
                .then(|| (self.upload(ptr, AT_ONCE, data), Value::Unit));
        };
        let data = &data[..data
            .len()
            .min(usize::try_from(extent).unwrap_or(usize::MAX))];
        let id = self.open_buffer(ptr, extent, data);
        match key.filter(|k| !k.is_empty()) {
            Some(key) => self.opened = Some((SharedId::Memory(id), key, !data.is_empty())),
            None => self.summary.vmm_unpaired += 1,
        }
        Some((Call::Alloc { bytes: extent }, Value::Buffer(id)))
    }
}
