#!/usr/bin/env python3
"""The kernel lab: Debian's own kernel in qemu (software emulation), a test script run inside.

This machine's kernel lacks some netfilter parts (CONFIG_NF_FLOW_TABLE above all); Debian 12's
kernel package has them. The lab builds, from Debian packages only, a small initramfs (busybox
from `busybox-static`, nft, ip/tc, conntrack, iperf3, hping3 with their shared libraries, the
kernel's netfilter/sched/veth modules from the unpacked kernel package), boots the kernel with
`qemu-system-x86_64 -accel tcg` (no KVM) and runs a script inside. The script's output comes
back on the VM's second serial port; its exit status ends that output as
``KERNEL-LAB-EXIT <status>``.

    kernel_lab.py fetch               # the kernel package into the cache (apt-get download)
    kernel_lab.py build               # fetch the kernel package if needed, build the initramfs
    kernel_lab.py run DIR [--timeout S] [--cpus N]
                                      # DIR/run.sh is run inside (DIR is copied to /lab);
                                      # prints its output, exits with its status
    kernel_lab.py status              # kernel package and cache state, one line each

The kernel package is fetched with `apt-get download` (never installed on this machine) into
the cache (PORTAL_KERNEL_LAB_DIR, default ./var/kernel-lab) and unpacked with `dpkg-deb -x`.
A build is keyed by the kernel package file, the versions of the userspace packages and this
file's own text: the same key reuses the cached initramfs, a new kernel package (after
`apt-get update`) or a changed package builds a new one. Builds go to a temporary directory
renamed into place, so an interrupted build leaves nothing half-made.

Standard library only; needs root only for `apt-get download` when the package is not cached.
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("PORTAL_KERNEL_LAB_DIR", ROOT / "var" / "kernel-lab"))
META_PACKAGE = "linux-image-amd64"  # depends on the current linux-image-<abi>-amd64
USER_PACKAGES = (
    "busybox-static", "nftables", "iproute2", "conntrack", "conntrackd", "iperf3", "hping3",
    "libc6", "keepalived", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
)  # fmt: skip
BINARIES = (
    "/usr/sbin/nft",
    shutil.which("ip") or "/usr/bin/ip",
    shutil.which("tc") or "/usr/sbin/tc",
    "/usr/sbin/conntrack",
    "/usr/sbin/conntrackd",  # the HA case: two firewall namespaces syncing their states
    "/usr/bin/iperf3",
    "/usr/sbin/hping3",
    "/usr/sbin/keepalived",  # the HA case: VRRP between the two firewall namespaces
)
# The HA case's notify hook, portal-ha (deploy/firewall/portal-ha: `#!/usr/bin/python3 -IS`),
# needs Debian's Python with the standard-library modules the host package imports (the
# package itself comes with each run, tests/e2e/kernel_lab/vm.py). The modules are found by
# importing them with the same interpreter here; their compiled .pyc files come along.
PYTHON = "/usr/bin/python3.11"
HOST_PACKAGE = ROOT / "deploy" / "firewall" / "portal_fw"
# Module directories whose modules may be loaded inside (their dependencies come along).
MODULE_DIRS = ("net/netfilter", "net/ipv4/netfilter", "net/ipv6/netfilter", "net/sched")
# crc32c_generic: libcrc32c (nf_tables, nf_nat) asks the crypto API for crc32c (a soft dependency).
MODULE_FILES = (
    "drivers/net/veth.ko",
    "crypto/crc32c_generic.ko",
    "net/bridge/bridge.ko",  # the HA case: both firewalls on one member-side and uplink segment
)
# Loaded at boot (the rest load on demand: nft asks the kernel, which runs /sbin/modprobe).
BOOT_MODULES = (
    "crc32c_generic",
    "veth",
    "nf_tables",
    "nf_conntrack",
    "nf_conntrack_netlink",
    "nf_nat",
    "nft_ct",
    "nft_nat",
    "nft_chain_nat",
    "nf_flow_table",
    "nf_flow_table_inet",
    "nft_flow_offload",
    "sch_htb",
)
EXIT_MARK = "KERNEL-LAB-EXIT"

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /run /tmp /var/run /var/lock /run/netns
mount -t devpts devpts /dev/pts
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
for m in {modules}; do modprobe "$m" || echo "kernel-lab: modprobe $m failed" >/dev/ttyS0; done
ip link set lo up
hostname kernel-lab
start=$(cut -d' ' -f1 /proc/uptime)
echo "kernel-lab: $(uname -r), $(nproc) CPUs, up at $start s" >/dev/ttyS1
cd /lab
sh /lab/run.sh >/dev/ttyS1 2>&1
status=$?
printf "\n{mark} %s\n" "$status" >/dev/ttyS1
sync
poweroff -f
"""


# VMs of this process, ended when it exits (a caller that runs the lab in a thread may stop
# before the VM does).
RUNNING: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _stop_vms() -> None:
    for proc in list(RUNNING):
        proc.kill()


class LabError(RuntimeError):
    """A clear, specific reason why the lab cannot build or run."""


def _run(*cmd: str, cwd: Path | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(  # noqa: S603  (argv lists of constants and cache paths, no shell)
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout


def kernel_package_name() -> str:
    """linux-image-<abi>-amd64 that linux-image-amd64 currently depends on."""
    out = _run("apt-cache", "depends", META_PACKAGE)
    names = re.findall(r"Depends: (linux-image-[0-9][\w.-]*-amd64)", out)
    if not names:
        raise LabError(
            f"apt-cache knows no kernel behind {META_PACKAGE} (run `apt-get update` once)"
        )
    return names[0]


def cached_debs() -> list[Path]:
    return sorted(CACHE.glob("linux-image-*-amd64_*.deb"), key=lambda p: p.stat().st_mtime)


def kernel_deb(fetch: bool = True) -> Path:
    """The kernel package file: the candidate version, downloaded into the cache if missing.

    Without apt (offline, or `fetch=False`), the newest cached package is used."""
    CACHE.mkdir(parents=True, exist_ok=True)
    if fetch:
        try:
            name = kernel_package_name()
            version = _run("apt-cache", "policy", name)
            m = re.search(r"Candidate: (\S+)", version)
            if m is None or m.group(1) == "(none)":
                raise LabError(f"no candidate version of {name}")
            filename = f"{name}_{m.group(1).replace(':', '%3a')}_amd64.deb"
            path = CACHE / filename
            if not path.exists():
                with tempfile.TemporaryDirectory(dir=CACHE, prefix=".dl-") as tmp:
                    os.chmod(tmp, 0o755)  # noqa: S103  (apt's _apt user reads the directory)
                    _run("apt-get", "download", "-q", f"{name}={m.group(1)}", cwd=Path(tmp))
                    got = list(Path(tmp).glob("*.deb"))
                    if len(got) != 1:
                        raise LabError(f"apt-get download {name} gave {got}")
                    os.replace(got[0], path)
            return path
        except (LabError, FileNotFoundError) as exc:
            if not cached_debs():
                raise LabError(f"cannot fetch the kernel package: {exc}") from exc
    debs = cached_debs()
    if not debs:
        raise LabError(f"no kernel package in {CACHE}: run `{sys.argv[0]} build` once")
    return debs[-1]


def _package_versions() -> str:
    out = _run(
        "dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Status}\\n", *USER_PACKAGES
    )
    missing = [line.split()[0] for line in out.splitlines() if not line.endswith(" installed")]
    if missing:
        raise LabError(f"missing Debian packages: {' '.join(missing)} (make packages)")
    return out


def build_key(deb: Path) -> str:
    h = hashlib.sha256()
    h.update(deb.name.encode())
    h.update(str(deb.stat().st_size).encode())
    h.update(_package_versions().encode())
    h.update(Path(__file__).read_bytes())
    h.update(" ".join(_stdlib_imports()).encode())
    return h.hexdigest()[:16]


def _ldd(binary: str) -> set[str]:
    out = _run("ldd", binary)
    libs = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.add(m.group(1))
    return libs


def _copy(src: str, root: Path) -> None:
    dest = root / src.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(os.path.realpath(src), dest)


def _module_closure(base: Path, release: str) -> list[str]:
    """Relative paths (kernel/...) of the wanted modules and everything they depend on."""
    moddir = base / "lib/modules" / release
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        name, _, rest = line.partition(":")
        deps[name] = rest.split()
    wanted = [p for p in deps if any(p.startswith(f"kernel/{d}/") for d in MODULE_DIRS)] + [
        f"kernel/{f}" for f in MODULE_FILES
    ]
    seen: set[str] = set()
    stack = list(wanted)
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        if p not in deps:
            raise LabError(f"module {p} not in the kernel package")
        seen.add(p)
        stack.extend(deps[p])
    return sorted(seen)


def _stdlib_imports() -> list[str]:
    """Top-level and dotted standard-library names the host package imports (absolute imports
    that are not its own), read from its source with `ast`."""
    import ast

    names = {"__future__", "encodings.ascii", "encodings.latin_1", "encodings.utf_8"}
    for source in sorted(HOST_PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
    return sorted(n for n in names if not n.startswith("portal_fw"))


PYTHON_FILES = r"""
import importlib, importlib.util, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        sys.stderr.write(f"kernel-lab: python module {name} left out: {exc}\n")
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if not path or not path.startswith(sys.prefix + "/lib/python3"):
        continue
    print(path)
    if path.endswith(".py"):
        print(importlib.util.cache_from_source(path))
"""


def _python_files() -> tuple[set[str], set[str]]:
    """The interpreter's module files (and .pyc) for the host package, and their libraries."""
    if not Path(PYTHON).exists():
        raise LabError(f"{PYTHON} is missing (apt-get install python3-minimal)")
    out = _run(PYTHON, "-IS", "-c", PYTHON_FILES, *_stdlib_imports())
    files = {f for f in out.split() if Path(f).is_file()}
    libs = _ldd(PYTHON)
    for f in files:
        if f.endswith(".so"):
            libs |= _ldd(f)
    return files, libs


def _cpio(root: Path, out: Path) -> None:
    """A gzip'd newc cpio archive of `root` (what the kernel unpacks as its initramfs)."""
    ino = 1
    with gzip.open(out, "wb", compresslevel=6) as f:

        def entry(name: str, mode: int, data: bytes) -> None:
            nonlocal ino
            fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
            header = "070701" + "".join(f"{v:08x}" for v in fields)
            f.write(header.encode() + name.encode() + b"\0")
            f.write(b"\0" * ((4 - (110 + len(name) + 1) % 4) % 4))
            f.write(data)
            f.write(b"\0" * ((4 - len(data) % 4) % 4))
            ino += 1

        for path in sorted(root.rglob("*")):
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                entry(rel, st.st_mode, os.readlink(path).encode())
            elif stat.S_ISDIR(st.st_mode):
                entry(rel, st.st_mode, b"")
            else:
                entry(rel, st.st_mode, path.read_bytes())
        entry("TRAILER!!!", 0, b"")


def build(fetch: bool = True) -> Path:
    """The cached build directory (vmlinuz, base.cpio.gz) for the current kernel package."""
    deb = kernel_deb(fetch)
    key = build_key(deb)
    target = CACHE / f"build-{key}"
    if (target / "base.cpio.gz").exists():
        return target
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".build-") as tmp:
        work = Path(tmp)
        unpacked = work / "deb"
        _run("dpkg-deb", "-x", str(deb), str(unpacked))
        releases = [p.name for p in (unpacked / "lib/modules").iterdir()]
        if len(releases) != 1:
            raise LabError(f"{deb.name}: expected one kernel release, found {releases}")
        release = releases[0]
        _run("busybox", "depmod", "-b", str(unpacked), release)
        root = work / "root"
        for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "lab"):
            (root / d).mkdir(parents=True, exist_ok=True)
        shutil.copy2(shutil.which("busybox") or "/bin/busybox", root / "bin/busybox")
        for applet in ("sh", "modprobe"):
            os.symlink("/bin/busybox", root / "bin" / applet)
        os.symlink("/bin/busybox", root / "sbin/modprobe")  # the kernel's request_module path
        libs: set[str] = set()
        for binary in BINARIES:  # into /usr/sbin, ahead of busybox's applets in PATH
            shutil.copy2(os.path.realpath(binary), root / "usr/sbin" / Path(binary).name)
            libs |= _ldd(binary)
        python_files, python_libs = _python_files()
        libs |= python_libs
        for f in sorted(python_files):
            _copy(f, root)
        shutil.copy2(PYTHON, root / "usr/bin/python3.11")
        os.symlink("python3.11", root / "usr/bin/python3")
        (root / "usr/lib/python3.11/lib-dynload").mkdir(parents=True, exist_ok=True)
        for lib in sorted(libs):
            _copy(lib, root)
        for name in ("protocols", "services"):
            if Path(f"/etc/{name}").exists():
                _copy(f"/etc/{name}", root)
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (root / "etc/group").write_text("root:x:0:\n")
        moddir = Path("lib/modules") / release
        for rel in _module_closure(unpacked, release):
            dest = root / moddir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(unpacked / moddir / rel, dest)
        for name in ("modules.builtin", "modules.order", "modules.builtin.modinfo"):
            if (unpacked / moddir / name).exists():
                shutil.copy2(unpacked / moddir / name, root / moddir / name)
        _run("busybox", "depmod", "-b", str(root), release)
        init = root / "init"
        init.write_text(INIT.format(modules=" ".join(BOOT_MODULES), mark=EXIT_MARK))
        init.chmod(0o755)
        out = work / "out"
        out.mkdir()
        shutil.copy2(unpacked / "boot" / f"vmlinuz-{release}", out / "vmlinuz")
        shutil.copy2(unpacked / "boot" / f"config-{release}", out / "config")
        _cpio(root, out / "base.cpio.gz")
        (out / "release").write_text(f"{release}\n{deb.name}\n")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(out, target)
    for old in CACHE.glob("build-*"):  # only the current build is kept
        if old != target:
            shutil.rmtree(old, ignore_errors=True)
    sys.stderr.write(
        f"kernel-lab: built {target.name} from {deb.name} in {time.monotonic() - started:.1f} s\n"
    )
    return target


def run(
    directory: Path, timeout: float = 240, cpus: int = 2, fetch: bool = True
) -> tuple[int, str]:
    """Boot the lab with `directory` as /lab, run its run.sh; (exit status, output)."""
    if not (directory / "run.sh").is_file():
        raise LabError(f"{directory}/run.sh is missing")
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        raise LabError("qemu-system-x86_64 is missing (apt-get install qemu-system-x86)")
    built = build(fetch)
    with tempfile.TemporaryDirectory(prefix="kernel-lab-run-") as tmp:
        work = Path(tmp)
        overlay = work / "overlay"
        shutil.copytree(directory, overlay / "lab", symlinks=True)
        _cpio(overlay, work / "lab.cpio.gz")
        initrd = work / "initrd"
        with initrd.open("wb") as f:  # concatenated archives: the kernel unpacks both
            f.write((built / "base.cpio.gz").read_bytes())
            f.write((work / "lab.cpio.gz").read_bytes())
        console, output = work / "console.log", work / "output.log"
        cmd = [
            qemu, "-accel", "tcg", "-cpu", "max", "-smp", str(cpus), "-m", "1536",
            "-kernel", str(built / "vmlinuz"), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off",
            "-display", "none", "-monitor", "none", "-nic", "none", "-no-reboot",
            "-serial", f"file:{console}", "-serial", f"file:{output}",
        ]  # fmt: skip
        proc = subprocess.Popen(  # noqa: S603  (argv of constants and cache paths)
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        RUNNING.add(proc)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            text = output.read_text(errors="replace") if output.exists() else ""
            tail = console.read_text(errors="replace")[-2000:] if console.exists() else ""
            return 124, f"{text}\nkernel-lab: timed out after {timeout} s\n--- console ---\n{tail}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            RUNNING.discard(proc)
        text = output.read_text(errors="replace") if output.exists() else ""
        m = re.search(rf"^{EXIT_MARK} (\d+)\s*$", text, re.M)
        if m is None:
            tail = console.read_text(errors="replace")[-3000:] if console.exists() else ""
            return (
                125,
                f"{text}\nkernel-lab: the VM ended without an exit status\n--- console ---\n{tail}",
            )
        return int(m.group(1)), text[: m.start()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the kernel package into the cache if missing")
    b = sub.add_parser("build", help="fetch the kernel package if needed, build the initramfs")
    b.add_argument("--offline", action="store_true", help="use the cached kernel package only")
    r = sub.add_parser("run", help="run DIR/run.sh inside the VM")
    r.add_argument("directory", type=Path)
    r.add_argument("--timeout", type=float, default=240)
    r.add_argument("--cpus", type=int, default=2)
    r.add_argument("--offline", action="store_true")
    sub.add_parser("status", help="kernel package and cache state")
    args = parser.parse_args()
    try:
        if args.command == "fetch":
            sys.stdout.write(f"{kernel_deb(fetch=True)}\n")
            return 0
        if args.command == "build":
            sys.stdout.write(f"{build(fetch=not args.offline)}\n")
            return 0
        if args.command == "status":
            debs = cached_debs()
            sys.stdout.write(
                f"cache: {CACHE}\nkernel package: {debs[-1].name if debs else 'none cached'}\n"
                f"qemu: {shutil.which('qemu-system-x86_64') or 'missing'}\n"
            )
            return 0
        status, text = run(args.directory, args.timeout, args.cpus, fetch=not args.offline)
        sys.stdout.write(text)
        return status
    except LabError as exc:
        sys.stderr.write(f"kernel-lab: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
