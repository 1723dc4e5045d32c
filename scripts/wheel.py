#!/usr/bin/env python3
"""Package a built `gputape` binary as a wheel: `pip install gputape-*.whl` puts `gputape` on
the environment's PATH (the driver shim is inside the binary, so nothing else is needed).

    python3 scripts/wheel.py target/release/gputape [--out dist] [--strip]

A wheel is a zip with the binary under `gputape-V.data/scripts/` (pip installs that into the
environment's bin/ and keeps its executable bit) and the `.dist-info` metadata. The platform
tag is worked out from the binary itself: `manylinux_2_N_x86_64`, N the newest glibc symbol
version it (and the shim inside it) needs; a binary that needs a shared library outside the
manylinux set is refused, since the wheel would not run where pip says it does. Python's
standard library only: it runs where the wheel is built, with no packaging tools installed.
"""

import argparse
import base64
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Libraries a manylinux wheel may expect the system to have (PEP 600's policy for x86_64).
SYSTEM_LIBS = {
    "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
    "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libutil.so.1",
}
SHT_DYNAMIC, SHT_GNU_VERNEED = 6, 0x6FFFFFFE
DT_NEEDED = 1


class WheelError(Exception):
    pass


def elf_needs(data, what):
    """The (DT_NEEDED libraries, GLIBC_x.y versions) of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise WheelError(f"{what}: not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff == 0 or shnum == 0 or shoff + shnum * shentsize > len(data):
        raise WheelError(f"{what}: no section headers (was it stripped with --strip-all of sections?)")
    secs = []
    for i in range(shnum):
        off = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", data, off + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", data, off + 0x18)
        sh_link, sh_info = struct.unpack_from("<II", data, off + 0x28)
        secs.append((sh_type, sh_offset, sh_size, sh_link, sh_info))

    def cstr(table, at):
        _, t_off, t_size, _, _ = secs[table]
        end = data.index(b"\0", t_off + at)
        return data[t_off + at:end].decode()

    needed, versions = [], set()
    for sh_type, off, size, link, info in secs:
        if sh_type == SHT_DYNAMIC:
            for e in range(off, off + size, 16):
                tag, val = struct.unpack_from("<qQ", data, e)
                if tag == 0:
                    break
                if tag == DT_NEEDED:
                    needed.append(cstr(link, val))
        elif sh_type == SHT_GNU_VERNEED:
            at = off
            for _ in range(info):
                _, cnt, _, aux, nxt = struct.unpack_from("<HHIII", data, at)
                a = at + aux
                for _ in range(cnt):
                    _, _, _, name, anext = struct.unpack_from("<IHHII", data, a)
                    versions.add(cstr(link, name))
                    a += anext
                at += nxt
                if nxt == 0:
                    break
    return needed, versions


def embedded_shims(data):
    """ELF images inside the binary (the driver shim `build.rs` put there)."""
    found, at = [], data.find(b"\x7fELF", 1)
    while at != -1:
        try:
            needed, versions = elf_needs(data[at:], "the embedded shim")
            if needed or versions:
                found.append((needed, versions))
        except (WheelError, struct.error, ValueError, IndexError, UnicodeDecodeError):
            pass
        at = data.find(b"\x7fELF", at + 1)
    return found


def glibc_tag(binary, data):
    needed, versions = elf_needs(data, binary)
    for n, v in embedded_shims(data):
        needed += n
        versions |= v
    foreign = sorted(set(needed) - SYSTEM_LIBS)
    if foreign:
        raise WheelError(
            f"{binary} needs {', '.join(foreign)}, which a manylinux system need not have")
    glibc = [tuple(map(int, m.groups())) for v in versions
             if (m := re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", v))]
    major, minor = max(glibc, default=(2, 17))
    return f"manylinux_{major}_{minor}_x86_64"


def version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        m = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
    if not m:
        raise WheelError("Cargo.toml names no version")
    return m.group(1)


def metadata(ver):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: gputape\n"
        f"Version: {ver}\n"
        "Summary: Record and replay what a program asks of its GPU: crashes, wrong numbers "
        "and hangs reproduced from a trace\n"
        "License: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Environment :: GPU :: NVIDIA CUDA\n"
        "Description-Content-Type: text/markdown\n\n" + readme)


def record_line(name, body):
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(body)}"


def build(binary, out, strip):
    with tempfile.TemporaryDirectory() as tmp:
        if strip:
            if not shutil.which("strip"):
                raise WheelError("--strip: no `strip` on PATH")
            stripped = os.path.join(tmp, "gputape")
            subprocess.run(["strip", "-o", stripped, binary], check=True)
            binary_in = stripped
        else:
            binary_in = binary
        with open(binary_in, "rb") as f:
            data = f.read()
    tag = glibc_tag(binary, data)
    ver = version()
    dist = f"gputape-{ver}.dist-info"
    files = [
        (f"gputape-{ver}.data/scripts/gputape", data, 0o755),
        (f"{dist}/METADATA", metadata(ver).encode(), 0o644),
        (f"{dist}/WHEEL", (
            "Wheel-Version: 1.0\n"
            "Generator: gputape scripts/wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: py3-none-{tag}\n").encode(), 0o644),
    ]
    record = "\n".join([record_line(n, b) for n, b, _ in files] + [f"{dist}/RECORD,,"]) + "\n"
    files.append((f"{dist}/RECORD", record.encode(), 0o644))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"gputape-{ver}-py3-none-{tag}.whl")
    part = path + ".part"
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for name, body, mode in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, body)
    os.replace(part, path)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary", help="the built gputape binary (target/release/gputape)")
    p.add_argument("--out", default=os.path.join(ROOT, "dist"), help="where the wheel goes")
    p.add_argument("--strip", action="store_true", help="strip a copy of the binary first")
    a = p.parse_args()
    try:
        print(build(a.binary, a.out, a.strip))
    except (WheelError, OSError, subprocess.CalledProcessError) as e:
        print(f"wheel.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
