//! The log's codec: every record kind read back as written, in the bytes earlier builds wrote
//! (`testdata/samples.gtshm`), and damaged or cut logs refused with errors.

use super::*;
use std::borrow::Cow;

fn samples() -> Vec<Rec<'static>> {
    let on = On {
        stream: 0x55,
        sync: false,
    };
    vec![
        Rec::Alloc {
            ptr: 0x7f00_0000_0000,
            bytes: 4096,
            managed: false,
        },
        Rec::CopyH2D {
            dst: 0x7f00_0000_0010,
            on,
            data: b"abcd",
        },
        Rec::CopyD2H {
            src: 1,
            dst_host: 2,
            len: 3,
            on,
            data: b"",
        },
        Rec::D2HBytes {
            copy: 2,
            data: b"xyz",
        },
        Rec::Memset {
            dst: 9,
            value: 0xabab_abab,
            elem: 4,
            count: 10,
            on,
        },
        Rec::ModuleLoad {
            handle: 77,
            library: true,
            image: b"\x7fELF...",
        },
        Rec::Function {
            owner: 77,
            library: true,
            handle: 78,
            name: b"_Z6kernelPf",
        },
        Rec::Launch {
            func: 78,
            grid: [1, 2, 3],
            block: [4, 5, 6],
            shared_mem: 7,
            stream: 0x55,
            cluster: [1, 2, 1],
            layout: Some(vec![(0, 8), (8, 4)].into()),
            params: &[1; 12],
        },
        Rec::Launch {
            func: 78,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem: 0,
            stream: 0,
            cluster: [0; 3],
            layout: None,
            params: b"",
        },
        Rec::CtxSync {},
        Rec::Opaque {
            name: b"cuMemcpy3D_v2",
        },
        Rec::Reserve {
            ptr: 1 << 40,
            size: 1 << 34,
        },
        Rec::Map {
            ptr: 1 << 40,
            size: 2 << 20,
        },
        Rec::Unmap {
            ptr: 1 << 40,
            size: 2 << 20,
        },
        Rec::Unreserve {
            ptr: 1 << 40,
            size: 1 << 34,
        },
        Rec::TensorMap {
            map: &[7; 128],
            dtype: 9,
            base: 1 << 40,
            dims: vec![64, 32],
            strides: vec![128],
            box_dims: vec![32, 8],
            element_strides: vec![1, 1],
            modes: [0, 3, 2, 0],
        },
        Rec::CaptureBegin {
            stream: 0x5000,
            mode: 2,
        },
        Rec::CaptureEnd {
            stream: 0x5000,
            graph: 0x6000,
        },
        Rec::GraphInstantiate {
            exec: 0x7000,
            graph: 0x6000,
        },
        Rec::GraphLaunch {
            exec: 0x7000,
            stream: 0x5000,
        },
        Rec::GraphExecDestroy { exec: 0x7000 },
        Rec::GraphDestroy { graph: 0x6000 },
        Rec::Gap { dropped: 1 << 33 },
        Rec::Dump {
            reason: b"CUDA_ERROR_ASSERT (710) from cuStreamSynchronize",
        },
        Rec::Code {
            id: 3,
            py_minor: 12,
            first_line: 40,
            filename: b"/home/u/model.py",
            qualname: b"Block.forward",
            linetable: &[0x80, 0x00, 0xd8, 0x08, 0x0c],
        },
        Rec::Stack {
            id: 5,
            frames: &[3, 0, 0, 0, 17, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0],
        },
        Rec::Stack { id: 6, frames: &[] },
        Rec::Global {
            owner: 0x9000,
            library: true,
            name: b"table",
            ptr: 0x7f00_0000_1000,
            bytes: 64,
        },
        Rec::LibraryModule {
            library: 0x9000,
            module: 0x9100,
        },
        Rec::NativeFrame {
            id: 2,
            module: b"/usr/bin/app",
            offset: 0x1a2b,
            symbol: b"",
            symbol_offset: 0,
        },
        Rec::NativeStack {
            id: 7,
            frames: &[2, 0, 0, 0, 9, 0, 0, 0],
        },
        Rec::Cooperative { func: 0x5000 },
        Rec::GraphNode { graph: 0x6a00 },
        Rec::Device {
            ordinal: 1,
            sm_count: 132,
            total_memory: 150_000_000_000,
            name: b"NVIDIA H200",
        },
        Rec::ManagedWrite {
            dst: 0x7000,
            data: &[1, 2, 3],
        },
        Rec::ManagedRead {
            src: 0x7000,
            data: &[4, 5],
        },
        Rec::CaptureMode { mode: 2 },
        Rec::Free { ptr: 0x11 },
        Rec::HostAlloc {
            ptr: 0x12,
            bytes: 64,
        },
        Rec::HostFree { ptr: 0x12 },
        Rec::CopyD2D {
            src: 0x13,
            dst: 0x14,
            len: 15,
            on: On {
                stream: 2,
                sync: true,
            },
        },
        Rec::ModuleUnload {
            handle: 77,
            library: false,
        },
        Rec::KernelFunction {
            kernel: 78,
            func: 79,
        },
        Rec::StreamCreate {
            stream: 0x55,
            flags: 1,
        },
        Rec::StreamDestroy { stream: 0x55 },
        Rec::EventCreate {
            event: 0x66,
            flags: 2,
        },
        Rec::EventDestroy { event: 0x66 },
        Rec::EventRecord {
            event: 0x66,
            stream: 0x55,
        },
        Rec::StreamWaitEvent {
            stream: 0x56,
            event: 0x66,
        },
        Rec::EventSync { event: 0x66 },
        Rec::StreamSync { stream: 0x56 },
    ]
}

/// A sample of each kind added after the golden bytes were written (50 on).
fn later_samples() -> Vec<Rec<'static>> {
    vec![
        Rec::HostFunc {
            stream: 0x56,
            func: b"take (app+0x9570)",
        },
        Rec::NodeWork {
            target: 0x6e00,
            node: 0x6c01,
            how: 2,
            first: true,
        },
        Rec::GraphUpdate {
            exec: 0x6e00,
            graph: 0x6a01,
        },
        Rec::ChildGraph {
            graph: 0x6a00,
            node: 0x6c02,
            child: 0x6a02,
        },
        Rec::GraphClone {
            clone: 0x6a03,
            original: 0x6a00,
        },
        Rec::NodeEnabled {
            exec: 0x6e00,
            node: 0x6c01,
            enabled: false,
        },
        Rec::HostMapped {
            ptr: 0x7f00_0000,
            bytes: 4096,
        },
        Rec::HostUnmapped { ptr: 0x7f00_0000 },
        Rec::LaunchAttrs {
            func: 0x5000,
            attrs: vec![6, 1, 12, 0x66],
        },
        Rec::ValueWrite {
            dst: 0x7000,
            on: On {
                stream: 0x56,
                sync: false,
            },
            data: &[1, 0, 0, 0],
        },
        Rec::ValueWait {
            stream: 0x57,
            addr: 0x7000,
            value: 1,
            flags: 1,
            wide: false,
        },
        Rec::CapturedNode { node: 0x6c05 },
        Rec::IpcExport {
            ptr: 0x7000,
            handle: &[7; 64],
        },
        Rec::IpcImport {
            ptr: 0x9000,
            bytes: 4,
            handle: &[7; 64],
            data: &[1, 2, 3, 4],
        },
        Rec::IpcClose { ptr: 0x9000 },
        Rec::WallClock {
            wall_ns: 1_796_000_000_000_000_000,
        },
        Rec::IpcEventExport {
            event: 0xe7000,
            handle: &[9; 64],
        },
        Rec::IpcEventImport {
            event: 0xe7001,
            handle: &[9; 64],
        },
        Rec::NodeDestroyed { node: 0x6c0003 },
        Rec::ExecChildGraph {
            exec: 0x6e0001,
            node: 0x6c0004,
            child: 0x6f0002,
        },
        Rec::MapHandle {
            ptr: 0x7f_0000_0000,
            size: 2 << 20,
            offset: 0,
            handle: 0x4800_0001,
        },
        Rec::ShareableExport {
            handle: 0x4800_0001,
            kind: 1,
            key: &[1, 2, 3, 4, 0, 4, 0, 0],
        },
        Rec::ShareableImport {
            handle: 0x4800_0002,
            kind: 1,
            key: &[1, 2, 3, 4, 0, 4, 0, 0],
        },
        Rec::ImportedBytes {
            ptr: 0x7f_0020_0000,
            data: &[5, 6, 7],
        },
    ]
}

fn log(recs: &[Rec<'_>]) -> Vec<u8> {
    let mut out = header(Header {
        pid: 42,
        driver_version: 13000,
    })
    .to_vec();
    for (i, call) in recs.iter().enumerate() {
        encode(
            &Record {
                t_ns: i as u64 * 10,
                thread: 7,
                status: 0,
                stack: i as u32,
                call: call.clone(),
            },
            &mut out,
        );
    }
    out
}

/// Every record kind, encoded from the record table, is the bytes the hand-written codec
/// before it wrote (`testdata/samples.gtshm`, written by that codec): logs written by older
/// shims read, and the shim's launch record is unchanged.
#[test]
fn every_record_kind_is_written_in_the_bytes_earlier_builds_wrote() {
    let kinds: std::collections::BTreeSet<u8> = samples().iter().map(Rec::tag).collect();
    assert_eq!(kinds, (1..=49).collect(), "a sample of every kind");
    assert_eq!(log(&samples()), include_bytes!("testdata/samples.gtshm"));
}

#[test]
fn every_record_reads_back_as_written() {
    let mut recs = samples();
    recs.extend(later_samples());
    let kinds: std::collections::BTreeSet<u8> = recs.iter().map(Rec::tag).collect();
    assert_eq!(kinds, (1..=73).collect(), "a sample of every kind");
    let bytes = log(&recs);
    let (h, r) = Reader::new(&bytes).unwrap();
    assert_eq!(h.pid, 42);
    assert_eq!(h.driver_version, 13000);
    let back: Vec<Record<'_>> = r.map(|r| r.unwrap()).collect();
    assert_eq!(
        back.iter().map(|r| r.call.clone()).collect::<Vec<_>>(),
        recs
    );
    assert!(back.iter().enumerate().all(|(i, r)| r.stack == i as u32));
    let Some(Rec::Stack { frames, .. }) = back
        .iter()
        .map(|r| &r.call)
        .find(|c| matches!(c, Rec::Stack { id: 5, .. }))
    else {
        panic!("no stack 5")
    };
    assert_eq!(stack_frames(frames).collect::<Vec<_>>(), [(3, 17), (4, 2)]);
    let Some(Rec::NativeStack { frames, .. }) = back
        .iter()
        .map(|r| &r.call)
        .find(|c| matches!(c, Rec::NativeStack { .. }))
    else {
        panic!("no native stack")
    };
    assert_eq!(native_frames(frames).collect::<Vec<_>>(), [2, 9]);
}

/// A layout-1 log (records without a stack) still reads, its records with `NO_STACK`.
#[test]
fn a_layout_1_log_reads_with_no_stacks() {
    let mut v1 = header(Header {
        pid: 1,
        driver_version: 0,
    })
    .to_vec();
    v1[8..10].copy_from_slice(&1u16.to_le_bytes());
    for call in [Rec::Free { ptr: 0x10 }, Rec::CtxSync {}] {
        let mut one = Vec::new();
        encode(
            &Record {
                t_ns: 5,
                thread: 2,
                status: 0,
                stack: 9,
                call,
            },
            &mut one,
        );
        // Layout 1 had no stack: drop its 4 bytes and shorten the length.
        let body = u32::from_le_bytes(one[..4].try_into().unwrap()) - 4;
        one.drain(21..25);
        one[..4].copy_from_slice(&body.to_le_bytes());
        v1.extend_from_slice(&one);
    }
    let (_, r) = Reader::new(&v1).unwrap();
    let back: Vec<Record<'_>> = r.map(|r| r.unwrap()).collect();
    assert_eq!(back.len(), 2);
    assert!(back.iter().all(|r| r.stack == NO_STACK && r.thread == 2));
    assert_eq!(back[0].call, Rec::Free { ptr: 0x10 });
}

/// The flight recorder's hot path writes a launch's bytes as `encode` does, whatever
/// its layout (none, some) and parameter bytes.
#[test]
fn a_launch_encoded_in_place_is_the_record_encoded() {
    let params: Vec<u8> = (0..40u8).collect();
    let pairs = [(0u32, 8u32), (8, 4), (16, 24)];
    for layout in [None, Some(&pairs[..])] {
        let h = LaunchHead {
            func: 0xdead_beef,
            grid: [3, 2, 1],
            block: [128, 1, 1],
            shared_mem: 4096,
            stream: 0x77,
            cluster: [2, 1, 1],
        };
        let r = Record {
            t_ns: 12345,
            thread: 9,
            status: 700,
            stack: 4,
            call: Rec::Launch {
                func: h.func,
                grid: h.grid,
                block: h.block,
                shared_mem: h.shared_mem,
                stream: h.stream,
                cluster: h.cluster,
                layout: layout.map(Cow::Borrowed),
                params: &params,
            },
        };
        let (mut want, mut got) = (vec![1u8, 2], vec![1u8, 2]);
        encode(&r, &mut want);
        encode_launch(
            &mut got,
            (12345, 9, 700, 4),
            &h,
            layout,
            params.len(),
            |b| b.copy_from_slice(&params),
        );
        assert_eq!(got, want, "layout {layout:?}");
    }
}

#[test]
fn a_cut_log_keeps_what_came_before_and_says_where_it_stops() {
    let bytes = log(&samples());
    for cut in HEADER_LEN..bytes.len() {
        let (_, r) = Reader::new(&bytes[..cut]).unwrap();
        let mut n = 0;
        for rec in r {
            match rec {
                Ok(_) => n += 1,
                Err(LogError::Cut { offset }) => assert!(offset < cut as u64),
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
        assert!(n < samples().len());
    }
}

#[test]
fn damaged_bytes_give_errors_never_a_panic() {
    let bytes = log(&samples());
    // Every byte of every record flipped in turn: the reader may read something else,
    // or refuse with an error, but never panics or allocates past the file.
    for i in HEADER_LEN..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0xff;
        let (_, r) = Reader::new(&b).unwrap();
        for rec in r {
            let _ = rec;
        }
    }
    assert_eq!(Reader::new(b"nope").err(), Some(LogError::NotALog));
    let mut v = bytes.clone();
    v[8] = 9;
    assert_eq!(Reader::new(&v).err(), Some(LogError::Version { found: 9 }));
}
