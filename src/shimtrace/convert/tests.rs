//! The converter on logs written here record by record: what each driver call becomes.
use super::*;
use gputape_shimlog::{encode, header, Header};

fn log(recs: &[(i32, Rec<'_>)]) -> Vec<u8> {
    let mut out = header(Header {
        pid: 7,
        driver_version: 13000,
    })
    .to_vec();
    for (i, (status, call)) in recs.iter().enumerate() {
        encode(
            &Record {
                t_ns: i as u64,
                thread: 100 + (i as u32 % 2),
                status: *status,
                stack: gputape_shimlog::NO_STACK,
                call: call.clone(),
            },
            &mut out,
        );
    }
    out
}

const A: u64 = 0x7000_0000;
const B: u64 = 0x7100_0000;

fn program() -> Vec<u8> {
    // A kernel taking (float *x, struct { float *p[2]; int n; } s, u64 k): x inside A, the
    // struct's pointers inside B and A, k a number that is no address.
    let mut params = (A + 16).to_le_bytes().to_vec();
    params.extend_from_slice(&(B + 4).to_le_bytes());
    params.extend_from_slice(&A.to_le_bytes());
    params.extend_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
    params.extend_from_slice(&12345u64.to_le_bytes());
    let ptx = b".version 8.0\n.entry k()\0";
    log(&[
        (
            0,
            Rec::Alloc {
                ptr: A,
                bytes: 64,
                managed: false,
            },
        ),
        (
            0,
            Rec::Alloc {
                ptr: B,
                bytes: 64,
                managed: false,
            },
        ),
        (
            2,
            Rec::Alloc {
                ptr: 0,
                bytes: 1 << 40,
                managed: false,
            },
        ),
        (
            0,
            Rec::ModuleLoad {
                handle: 5,
                library: true,
                image: ptx,
            },
        ),
        (
            0,
            Rec::Function {
                owner: 5,
                library: true,
                handle: 6,
                name: b"_Z1kPf1Sy",
            },
        ),
        (
            0,
            Rec::KernelFunction {
                kernel: 6,
                func: 66,
            },
        ),
        (
            0,
            Rec::Launch {
                func: 66,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_mem: 0,
                stream: 0,
                cluster: [0; 3],
                layout: Some(vec![(0, 8), (8, 24), (32, 8)].into()),
                params: &params,
            },
        ),
        (0, Rec::Free { ptr: B }),
        (
            0,
            Rec::CopyD2D {
                src: B + 8,
                dst: A + 64,
                len: 4,
                on: On {
                    stream: 0,
                    sync: true,
                },
            },
        ),
    ])
}

#[test]
fn launches_pointers_and_failures_map_onto_trace_calls() {
    let (t, s) = convert("test", &program(), vec!["prog".into()]).unwrap();
    assert_eq!(s.records, 9);
    assert_eq!(
        (s.calls, s.launches, s.kernels, s.modules, s.failed),
        (7, 1, 1, 1, 1)
    );
    assert!(t.stopped);
    // The failed allocation is recorded with its driver error and makes no buffer.
    let failed = &t.calls[2];
    assert_eq!(
        failed.ret.as_ref().unwrap().as_ref().unwrap_err().code,
        Some(2)
    );
    // The kernel is named by its library's image, found through cuKernelGetFunction.
    let k = &t.kernels[&KernelId(0)];
    assert!(k.module.starts_with("ptx-"), "{}", k.module);
    assert_eq!(k.name, "_Z1kPf1Sy");
    assert_eq!(k.params.len(), 3);
    let Call::Launch {
        head: LaunchHead { kernel, .. },
        args,
        ..
    } = &t.calls[4].call
    else {
        panic!("{:?}", t.calls[4].call)
    };
    assert_eq!(*kernel, KernelId(0));
    let (a, b) = (BufferId(0), BufferId(1));
    assert_eq!(args[0], Arg::Buf(DevAddr::Buf { buf: a, off: 16 }));
    let Arg::Words(w) = &args[1] else {
        panic!("{:?}", args[1])
    };
    assert_eq!(
        w.ptrs,
        vec![
            (0, DevAddr::Buf { buf: b, off: 4 }),
            (8, DevAddr::Buf { buf: a, off: 0 })
        ]
    );
    assert_eq!(w.bytes.len(), 24);
    assert!(matches!(&args[2], Arg::Val(v) if v[..] == 12345u64.to_le_bytes()));
    // Relocated for a replay where the buffers live elsewhere.
    let moved = w
        .relocated(
            |d| match d {
                DevAddr::Buf { buf, off } => Ok::<u64, ()>(0x9000 * (buf.0 as u64 + 1) + off),
                _ => Err(()),
            },
            |_| Err(()),
        )
        .unwrap();
    assert_eq!(moved[..8], (0x9000u64 * 2 + 4).to_le_bytes());
    assert_eq!(moved[8..16], 0x9000u64.to_le_bytes());
    assert_eq!(moved[16..], w.bytes[16..]);
    // After the free, B's addresses are named as freed; one past A's end stays A's.
    let Call::CopyD2D { src, dst, .. } = &t.calls[6].call else {
        panic!("{:?}", t.calls[6].call)
    };
    assert_eq!(*src, DevAddr::Freed { buf: b, off: 8 });
    assert_eq!(*dst, DevAddr::Buf { buf: a, off: 64 });
    // Two recording threads, numbered in order of first call.
    assert_eq!(t.calls[1].thread, 1);
    // The trace writes and reads back whole.
    let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(back.calls.len(), 7);
    assert_eq!(back.module_images.len(), 1);
    assert_eq!(back.calls[4].call, t.calls[4].call);
}

#[test]
fn a_damaged_log_converts_up_to_the_damage_or_is_refused_never_a_panic() {
    let bytes = program();
    // Where each record ends: a log cut there is whole, anywhere else says it was cut.
    let (_, mut r) = Reader::new(&bytes).unwrap();
    let mut ends = vec![r.offset() as usize];
    while r.next().is_some() {
        ends.push(r.offset() as usize);
    }
    for cut in gputape_shimlog::HEADER_LEN..bytes.len() {
        let (_, s) = convert("cut", &bytes[..cut], vec![]).unwrap();
        let whole = ends.iter().position(|e| *e == cut);
        assert_eq!(s.cut.is_none(), whole.is_some(), "cut at {cut}");
        assert_eq!(
            s.records as usize,
            ends.iter().filter(|e| **e <= cut).count() - 1
        );
    }
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        let _ = convert("flipped", &b, vec![]);
    }
    assert!(matches!(
        convert("x", b"not a log", vec![]),
        Err(ShimTraceError::Log { .. })
    ));
}

#[test]
fn a_reservation_is_one_buffer_as_far_as_it_was_ever_mapped() {
    const R: u64 = 0x8000_0000;
    let chunk = 2u64 << 20;
    let bytes = log(&[
        (
            0,
            Rec::Reserve {
                ptr: R,
                size: 1 << 36,
            },
        ),
        (
            0,
            Rec::Map {
                ptr: R,
                size: chunk,
            },
        ),
        (
            0,
            Rec::Map {
                ptr: R + chunk,
                size: chunk,
            },
        ),
        // A copy that straddles the two maps: one buffer, one offset.
        (
            0,
            Rec::CopyD2D {
                src: R + chunk - 8,
                dst: R,
                len: 16,
                on: On {
                    stream: 0,
                    sync: true,
                },
            },
        ),
        (
            0,
            Rec::Unmap {
                ptr: R,
                size: chunk,
            },
        ),
        (
            0,
            Rec::Unreserve {
                ptr: R,
                size: 1 << 36,
            },
        ),
        // Never mapped: no buffer at all.
        (0, Rec::Reserve { ptr: R, size: 64 }),
    ]);
    let (t, _) = convert("vmm", &bytes, vec![]).unwrap();
    let calls: Vec<&Call> = t.calls.iter().map(|c| &c.call).collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], &Call::Alloc { bytes: 2 * chunk });
    let buf = BufferId(0);
    assert_eq!(
        calls[1],
        &Call::CopyD2D {
            src: DevAddr::Buf {
                buf,
                off: chunk - 8
            },
            dst: DevAddr::Buf { buf, off: 0 },
            len: 16
        }
    );
    assert_eq!(
        calls[2],
        &Call::Free {
            ptr: DevAddr::Buf { buf, off: 0 }
        }
    );
    assert_eq!(t.addresses[&buf], R);
}

#[test]
fn tensor_maps_are_found_alone_and_inside_structs() {
    let mut map = [0u8; 128];
    map[..8].copy_from_slice(&(A + 64).to_le_bytes());
    map[8..16].copy_from_slice(&0xfeed_u64.to_le_bytes());
    // A struct: a pointer, padding to 64, the map, padding to 256.
    let mut s = vec![0u8; 256];
    s[..8].copy_from_slice(&A.to_le_bytes());
    s[64..192].copy_from_slice(&map);
    let mut params = map.to_vec();
    params.extend_from_slice(&s);
    let bytes = log(&[
        (
            0,
            Rec::Alloc {
                ptr: A,
                bytes: 4096,
                managed: false,
            },
        ),
        (
            0,
            Rec::TensorMap {
                map: &map,
                dtype: 9,
                base: A + 64,
                dims: vec![64, 16],
                strides: vec![128],
                box_dims: vec![64, 8],
                element_strides: vec![1, 1],
                modes: [0, 0, 0, 0],
            },
        ),
        (
            0,
            Rec::TensorMap {
                map: &[1; 128],
                dtype: 11,
                base: A,
                dims: vec![8],
                strides: vec![],
                box_dims: vec![8],
                element_strides: vec![1],
                modes: [0, 0, 0, 0],
            },
        ),
        (
            0,
            Rec::Launch {
                func: 1,
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_mem: 0,
                stream: 0,
                cluster: [1, 2, 1],
                layout: Some(vec![(0, 128), (128, 256)].into()),
                params: &params,
            },
        ),
    ]);
    let (t, s) = convert("maps", &bytes, vec![]).unwrap();
    // The map of a type this description lacks (TF32) is kept by name.
    assert_eq!(
        s.opaque.keys().collect::<Vec<_>>(),
        ["cuTensorMapEncodeTiled (element type 11)"]
    );
    let Call::EncodeTensorMap { base, desc } = &t.calls[1].call else {
        panic!("{:?}", t.calls[1].call)
    };
    let a = BufferId(0);
    assert_eq!(*base, DevAddr::Buf { buf: a, off: 64 });
    assert_eq!(desc.dtype, TensorMapDtype::Bf16);
    let Call::Launch {
        head: LaunchHead { kernel, .. },
        args,
        ..
    } = &t.calls[3].call
    else {
        panic!("{:?}", t.calls[3].call)
    };
    // The cluster its cuLaunchKernelEx asked for is the kernel's, and written out.
    assert_eq!(t.kernel_clusters[kernel], [1, 2, 1]);
    let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(back.kernel_clusters[kernel], [1, 2, 1]);
    let Arg::TensorMap(m) = &args[0] else {
        panic!("{:?}", args[0])
    };
    assert_eq!(m.base, DevAddr::Buf { buf: a, off: 64 });
    let Arg::Words(w) = &args[1] else {
        panic!("{:?}", args[1])
    };
    // The map's own address word is the map's, not a pointer of the struct's.
    assert_eq!(w.ptrs, vec![(0, DevAddr::Buf { buf: a, off: 0 })]);
    assert_eq!(w.maps.len(), 1);
    assert_eq!(w.maps[0].0, 64);
    let moved = w
        .relocated(|_| Ok::<u64, ()>(0x1111), |_| Ok(vec![0xab; 128]))
        .unwrap();
    assert_eq!(moved[..8], 0x1111u64.to_le_bytes());
    assert!(moved[64..192].iter().all(|b| *b == 0xab));
    assert!(moved[192..].iter().all(|b| *b == 0));
}

/// A log's Python stacks become sites: the program's own frame (outside torch) names the
/// site, the stack is kept, a call from a Python thread with no frame says so, and one
/// without a stack keeps `<driver call>`.
#[test]
fn python_stacks_become_sites_naming_the_programs_line() {
    // Two entries of CPython's location table, one instruction each, no columns (code 13):
    // line first+2, then first+3.
    let table = [0xe8, 0x04, 0xe8, 0x02];
    let frames = |pairs: &[(u32, u32)]| -> Vec<u8> {
        pairs
            .iter()
            .flat_map(|(c, i)| c.to_le_bytes().into_iter().chain(i.to_le_bytes()))
            .collect()
    };
    let inner = frames(&[(0, 1), (1, 0)]);
    let recs = [
        Rec::Code {
            id: 0,
            py_minor: 12,
            first_line: 100,
            filename: b"/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
            qualname: b"Module._call_impl",
            linetable: &table,
        },
        Rec::Code {
            id: 1,
            py_minor: 12,
            first_line: 10,
            filename: b"/home/u/model.py",
            qualname: b"Block.forward",
            linetable: &table,
        },
        Rec::Stack {
            id: 1,
            frames: &inner,
        },
        Rec::Stack { id: 2, frames: &[] },
        // A native stack: CUDA's runtime, then the program (named), then its caller.
        Rec::NativeFrame {
            id: 0,
            module: b"/usr/local/cuda/lib64/libcudart.so.13",
            offset: 0x4_1000,
            symbol: b"cudaMalloc",
            symbol_offset: 0x40,
        },
        Rec::NativeFrame {
            id: 1,
            module: b"/home/u/a.out",
            offset: 0x11e5,
            symbol: b"",
            symbol_offset: 0,
        },
        Rec::NativeStack {
            id: 3,
            frames: &[0, 0, 0, 0, 1, 0, 0, 0],
        },
        Rec::Alloc {
            ptr: A,
            bytes: 64,
            managed: false,
        },
        Rec::Free { ptr: A },
        Rec::CtxSync {},
        Rec::CtxSync {},
    ];
    let mut bytes = header(Header {
        pid: 7,
        driver_version: 13000,
    })
    .to_vec();
    for (i, call) in recs.into_iter().enumerate() {
        let stack = [0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 3][i];
        encode(
            &Record {
                t_ns: i as u64,
                thread: 5,
                status: 0,
                stack,
                call,
            },
            &mut bytes,
        );
    }
    let (t, summary) = convert("lines", &bytes, vec![]).unwrap();
    assert_eq!(summary.calls, 4, "code and stack records are not calls");
    let site = |i: usize| t.site(t.calls[i].site);
    assert_eq!(site(0), "/home/u/model.py:12:0 in Block.forward");
    assert_eq!(site(1), "<no Python frame>");
    assert_eq!(site(2), "<driver call>");
    assert_eq!(site(3), "/home/u/a.out+0x11e5");
    let native = &t.stacks[&t.calls[3].site];
    assert_eq!((native.user, native.script), (Some(1), None));
    assert_eq!(
        native.frames[0].to_string(),
        "/usr/local/cuda/lib64/libcudart.so.13+0x41000 in cudaMalloc+0x40"
    );
    let stack = &t.stacks[&t.calls[0].site];
    assert_eq!((stack.user, stack.script), (Some(1), Some(1)));
    assert_eq!(
        stack.frames[0].line, 103,
        "the torch frame at its instruction 1"
    );
    assert_eq!(stack.frames[0].function, "Module._call_impl");
    // Written and read back whole.
    let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(back.stacks, t.stacks);
    assert_eq!(back.site(back.calls[0].site), site(0));
}

/// New parameters for a node of a captured graph (whose nodes the log does not name) cannot be
/// followed: the executable's later launches are kept by name with why, not replayed as the
/// graph it no longer is, until `cuGraphExecUpdate` gives it a graph the trace holds; new
/// parameters for such a node in its graph are kept by name where they were set.
#[test]
fn an_executable_changed_in_a_way_not_followed_is_kept_by_name_until_updated() {
    let on = |stream| On {
        stream,
        sync: false,
    };
    let fill = |value| Rec::Memset {
        dst: A,
        value,
        elem: 1,
        count: 64,
        on: on(0),
    };
    let recs = [
        Rec::Alloc {
            ptr: A,
            bytes: 64,
            managed: false,
        },
        Rec::CaptureBegin {
            stream: 0x50,
            mode: 0,
        },
        Rec::Memset {
            dst: A,
            value: 1,
            elem: 1,
            count: 64,
            on: on(0x50),
        },
        Rec::CaptureEnd {
            stream: 0x50,
            graph: 0x6a,
        },
        Rec::GraphInstantiate {
            exec: 0x6e,
            graph: 0x6a,
        },
        Rec::GraphLaunch {
            exec: 0x6e,
            stream: 0,
        },
        Rec::NodeWork {
            target: 0x6e,
            node: 0x6c,
            how: 2,
            first: true,
        },
        fill(2),
        Rec::GraphLaunch {
            exec: 0x6e,
            stream: 0,
        },
        Rec::NodeWork {
            target: 0,
            node: 0x6c,
            how: 1,
            first: true,
        },
        fill(3),
        Rec::GraphUpdate {
            exec: 0x6e,
            graph: 0x6a,
        },
        Rec::GraphLaunch {
            exec: 0x6e,
            stream: 0,
        },
    ];
    // One thread: a marker and its work are the same thread's.
    let mut bytes = header(Header {
        pid: 7,
        driver_version: 13000,
    })
    .to_vec();
    for (i, call) in recs.into_iter().enumerate() {
        let r = Record {
            t_ns: i as u64,
            thread: 100,
            status: 0,
            stack: gputape_shimlog::NO_STACK,
            call,
        };
        encode(&r, &mut bytes);
    }
    let (t, summary) = convert("log", &bytes, vec![]).unwrap();
    let calls: Vec<String> = t
        .calls
        .iter()
        .map(|c| match &c.call {
            Call::Opaque { name } => name.clone(),
            other => other.kind().name().to_string(),
        })
        .collect();
    assert_eq!(
        calls,
        [
            "alloc",
            "begin_capture",
            "memset_async",
            "end_capture",
            "launch_graph",
            "cuGraphLaunch (after cuGraphExecMemsetNodeSetParams on a node the recording does not know)",
            "cuGraphMemsetNodeSetParams (a node the recording does not know)",
            "launch_graph",
        ]
    );
    assert_eq!(summary.opaque.len(), 2, "{:?}", summary.opaque);
}

/// A wait for a value is met as the driver's flags say: greater or equal as a wrapping signed
/// difference (a counter that wrapped past the value still meets it), equal, and (a bit in
/// common), nor (a bit clear in both), at 32 or 64 bits (a 32-bit wait reads the low word).
#[test]
fn waits_for_a_value_are_met_as_the_driver_s_flags_say() {
    use super::stream_calls::value_meets;
    let w32 = |v: u32| v.to_le_bytes().to_vec();
    assert!(value_meets(&w32(5), 5, 0, false));
    assert!(value_meets(&w32(6), 5, 0, false));
    assert!(!value_meets(&w32(4), 5, 0, false));
    assert!(
        value_meets(&w32(2), u32::MAX as u64 - 1, 0, false),
        "wrapped past it"
    );
    assert!(value_meets(&w32(7), 7, 1, false) && !value_meets(&w32(7), 8, 1, false));
    assert!(value_meets(&w32(0b0110), 0b0100, 2, false));
    assert!(!value_meets(&w32(0b0110), 0b1001, 2, false));
    assert!(
        value_meets(&w32(0xffff_fffe), 0, 3, false),
        "bit 0 clear in both"
    );
    assert!(!value_meets(&w32(u32::MAX), 0, 3, false));
    let w64 = 0x1_0000_0005u64.to_le_bytes();
    assert!(
        value_meets(&w64, 5, 1, false),
        "a 32-bit wait reads the low word"
    );
    assert!(!value_meets(&w64, 5, 1, true));
    assert!(value_meets(&w64, 0x1_0000_0004, 0, true));
}

#[test]
fn shared_memory_and_events_are_named_with_their_handles_and_an_oversized_handle_is_left_out() {
    let handle = [7u8; 64];
    let long = [8u8; 80];
    let recs = [
        (0, Rec::WallClock { wall_ns: 5_000 }),
        (
            0,
            Rec::Alloc {
                ptr: A,
                bytes: 64,
                managed: false,
            },
        ),
        (
            0,
            Rec::IpcExport {
                ptr: A + 8,
                handle: &handle,
            },
        ),
        (
            0,
            Rec::EventCreate {
                event: 0xe1,
                flags: 0,
            },
        ),
        (
            0,
            Rec::IpcEventExport {
                event: 0xe1,
                handle: &long,
            },
        ),
        (
            0,
            Rec::IpcImport {
                ptr: B,
                bytes: 4,
                handle: &handle,
                data: &[1, 2, 3, 4],
            },
        ),
    ];
    let (t, s) = convert("ipc", &log(&recs), vec![]).unwrap();
    // The log's first record's time is 0: its wall clock is the trace's time 0.
    assert_eq!(t.clock_epoch_ns, Some(5_000));
    assert_eq!(
        (s.ipc_exported, s.ipc_events_exported, s.ipc_imported),
        (1, 1, 1)
    );
    let shared: Vec<(SharedId, ShareSide)> = t.shared.iter().map(|(w, s)| (*w, s.side)).collect();
    assert_eq!(
        shared,
        [
            (SharedId::Buffer(BufferId(0)), ShareSide::Exported { at: 1 }),
            (
                SharedId::Buffer(BufferId(1)),
                ShareSide::Opened { fill: Some(3) }
            ),
        ],
        "{:?}",
        t.calls.iter().map(|c| &c.call).collect::<Vec<_>>()
    );
    // What it wrote reads back.
    let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(back.shared, t.shared);
}

/// Physical memory shared through a shareable handle: the exporter's reservation is handed
/// over from the later of its export and its map; the importer's buffer is made where its
/// mapping became readable, its bytes then uploaded; an import mapped beside other memory in
/// one reservation, an export no importer could name (no key) and one never mapped at a
/// reservation's start are counted as unpaired.
#[test]
fn memory_shared_through_shareable_handles_is_paired_where_mapped_whole() {
    const R: u64 = 0x7f00_0000_0000;
    const S: u64 = 0x7f10_0000_0000;
    const T: u64 = 0x7f20_0000_0000;
    let key = [1, 0, 0, 0, 0, 2, 0, 0];
    let map = |ptr, handle| Rec::MapHandle {
        ptr,
        size: 64,
        offset: 0,
        handle,
    };
    let recs = [
        // Exported before it is mapped: handed over at the map.
        (0, Rec::Reserve { ptr: R, size: 64 }),
        (
            0,
            Rec::ShareableExport {
                handle: 0xa1,
                kind: 1,
                key: &key,
            },
        ),
        (0, map(R, 0xa1)),
        // Exported with no key, and exported but never mapped at a reservation's start: not
        // paired.
        (
            0,
            Rec::ShareableExport {
                handle: 0xa2,
                kind: 2,
                key: &[],
            },
        ),
        (
            0,
            Rec::ShareableExport {
                handle: 0xa3,
                kind: 1,
                key: &key,
            },
        ),
        // Imported and mapped whole: a buffer where it became readable.
        (
            0,
            Rec::ShareableImport {
                handle: 0xb1,
                kind: 1,
                key: &key,
            },
        ),
        (0, Rec::Reserve { ptr: S, size: 64 }),
        (0, map(S, 0xb1)),
        (
            0,
            Rec::ImportedBytes {
                ptr: S,
                data: &[9; 64],
            },
        ),
        // Imported into the second half of a reservation: its bytes uploaded, not paired.
        (
            0,
            Rec::ShareableImport {
                handle: 0xb2,
                kind: 1,
                key: &key,
            },
        ),
        (0, Rec::Reserve { ptr: T, size: 128 }),
        (0, map(T, 0xc1)),
        (0, map(T + 64, 0xb2)),
        (
            0,
            Rec::ImportedBytes {
                ptr: T + 64,
                data: &[7; 64],
            },
        ),
    ];
    let (t, s) = convert("vmm", &log(&recs), vec![]).unwrap();
    let calls: Vec<String> = t
        .calls
        .iter()
        .map(|c| crate::trace::call_text(&t, &c.call))
        .collect();
    assert_eq!(
        (s.vmm_exported, s.vmm_imported, s.vmm_unpaired),
        (3, 2, 3),
        "{calls:?}"
    );
    let shared: Vec<(SharedId, ShareSide)> = t.shared.iter().map(|(w, s)| (*w, s.side)).collect();
    assert_eq!(
        shared,
        [
            (SharedId::Memory(BufferId(0)), ShareSide::Exported { at: 1 }),
            (
                SharedId::Memory(BufferId(1)),
                ShareSide::Opened { fill: Some(2) }
            ),
        ],
        "{calls:?}"
    );
    let want = [
        "alloc(64)",
        "alloc(64)",
        "copy_h2d(buf1+0, 64 bytes",
        "alloc(128)",
        "copy_h2d(buf2+64, 64 bytes",
    ];
    assert_eq!(calls.len(), want.len(), "{calls:?}");
    for (c, w) in calls.iter().zip(want) {
        assert!(c.starts_with(w), "{c} is not {w}: {calls:?}");
    }
    let back = Trace::from_bytes(std::path::Path::new("t"), &t.to_bytes().unwrap()).unwrap();
    assert_eq!(back.shared, t.shared);
}
