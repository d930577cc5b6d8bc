"""Fixtures for the through-the-mount tests of scion.

Environment:
  SCION_BIN           scion binary (default /work/main/target/release/scion)
  SCION_TEST_TARGET   "scion" (default) or "plain": the mount is a plain directory and
                      mount/umount/kill9/check are no-ops (validates the tests themselves)
  SCION_CMD_TIMEOUT   seconds allowed for one scion CLI command (default 120)
  SCION_TEST_TIMEOUT  watchdog per test (default 300): on expiry, stacks are dumped and the
                      daemon is SIGKILLed so that blocked FUSE calls return
  SCION_KEEP          "1": keep the temp dir of failed tests (under /tmp/scion-tests/)
"""

import contextlib
import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scion_helpers import is_mounted, pid_alive  # noqa: E402

SCION_BIN = os.environ.get("SCION_BIN", "/work/main/target/release/scion")


def copy_scion(directory):
    """Copies scion where other users may run it: the front (`scion`) and the whole binary it
    runs for most commands (`scion-full`, beside it). Returns the front's path."""
    exe = os.path.join(directory, "scion")
    for name in ("scion", "scion-full"):
        shutil.copy(os.path.join(os.path.dirname(SCION_BIN), name), os.path.join(directory, name))
        os.chmod(os.path.join(directory, name), 0o755)
    return exe
TARGET = os.environ.get("SCION_TEST_TARGET", "scion").strip().lower()
PLAIN = TARGET == "plain"
BASE = "/tmp/scion-tests"
CMD_TIMEOUT = float(os.environ.get("SCION_CMD_TIMEOUT", "120"))
TEST_TIMEOUT = float(os.environ.get("SCION_TEST_TIMEOUT", "300"))
KEEP = os.environ.get("SCION_KEEP", "") == "1"
# extra `scion mount -o` options for every mount, e.g. "uring=off" (scripts/test runs the
# differential test a second time with it, over /dev/fuse instead of io_uring)
MOUNT_OPTIONS = os.environ.get("SCION_MOUNT_OPTIONS", "").strip()

if TARGET not in ("scion", "plain"):
    raise pytest.UsageError(f"SCION_TEST_TARGET must be 'scion' or 'plain', not {TARGET!r}")



@contextlib.contextmanager
def small_host(m, size="96m"):
    """`m`'s store on a tmpfs of `size` (a host that fills up), made and mounted; afterwards
    its daemon is killed if it is still up and the tmpfs unmounted."""
    shutil.rmtree(m.store)
    os.makedirs(m.store)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", m.store], check=True)
    try:
        m.init()
        m.mount()
        yield m
    finally:
        if m.mounted:
            m.kill9()
        subprocess.run(["umount", m.store], check=False)

def remount_with_failpoints(m, spec):
    """Remounts with the daemon's test-only failpoints armed (scion_fs::failpoint)."""
    m.umount()
    os.environ["SCION_FAILPOINTS"] = spec
    try:
        m.mount()
    finally:
        del os.environ["SCION_FAILPOINTS"]


def pytest_report_header(config):
    if PLAIN:
        return "scion mount tests: target=plain (mount is a plain directory)"
    return f"scion mount tests: target=scion bin={SCION_BIN}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


class CmdResult:
    def __init__(self, argv, returncode, stdout, stderr):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def describe(self):
        return (f"$ {' '.join(self.argv)}\nexit={self.returncode}\n"
                f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}")


class ScionMount:
    """A scion store mounted at .mnt (or, in plain mode, just a directory)."""

    def __init__(self, root):
        self.root = root
        self.store = os.path.join(root, "store")
        self.mnt = os.path.join(root, "mnt")
        self.ref = os.path.join(root, "ref")
        self.plain = PLAIN
        self.bin = SCION_BIN
        self.mounted = False
        self.pids = set()          # every daemon pid seen (for teardown)
        self._ncmd = 0
        self.logs = []             # (argv, stdout file, stderr file) of every CLI command
        for d in (self.store, self.mnt, self.ref):
            os.makedirs(d, exist_ok=True)
        # The reference tree is compared with scion's, whose root is 0755: a setgid /tmp
        # would otherwise hand its setgid bit (and group) down to every directory made in it.
        os.chmod(self.ref, 0o755)

    # ---------------------------------------------------------------- CLI
    def run(self, *args, timeout=None):
        """Run `scion ARGS...`. stdout/stderr go to files, not pipes, so a daemon
        that inherits them cannot make us wait for EOF."""
        argv = [self.bin] + [str(a) for a in args]
        self._ncmd += 1
        base = os.path.join(self.root, f"cmd{self._ncmd:03d}-{args[0]}")
        out_p, err_p = base + ".out", base + ".err"
        self.logs.append((argv, out_p, err_p))
        with open(out_p, "wb") as out, open(err_p, "wb") as err:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=timeout or CMD_TIMEOUT)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
                rc = f"TIMEOUT after {timeout or CMD_TIMEOUT}s"
        with open(out_p, "rb") as f:
            so = f.read().decode("utf-8", "replace")
        with open(err_p, "rb") as f:
            se = f.read().decode("utf-8", "replace")
        return CmdResult(argv, rc, so, se)

    def init(self):
        if self.plain:
            return
        r = self.run("init", self.store)
        if r.returncode != 0:
            pytest.fail("scion init failed\n" + r.describe())

    def daemon_pid(self, required=True):
        """pid of the daemon from the first line of STORE/lock ("pid=<N>")."""
        path = os.path.join(self.store, "lock")
        try:
            with open(path) as f:
                first = f.readline().strip()
        except OSError as e:
            if required:
                pytest.fail(f"cannot read {path}: {e}")
            return None
        if first.startswith("pid="):
            try:
                return int(first[4:].strip())
            except ValueError:
                pass
        if required:
            pytest.fail(f"{path}: first line is {first!r}, expected 'pid=<N>'")
        return None

    def _wait(self, cond, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.02)
        pytest.fail(f"timed out after {timeout}s waiting for {what}")

    def mount(self, *options):
        if self.plain:
            self.mounted = True
            return
        assert not is_mounted(self.mnt), f"{self.mnt} is already mounted"
        opts = [o for o in (MOUNT_OPTIONS, *options) if o]
        r = self.run("mount", *(["-o", ",".join(opts)] if opts else []), self.store, self.mnt)
        if r.returncode != 0:
            pytest.fail("scion mount failed\n" + r.describe())
        # `scion mount` is expected to return once mounted; allow a short grace period.
        self._wait(lambda: is_mounted(self.mnt), 10,
                   f"{self.mnt} to appear in /proc/self/mountinfo after `scion mount`")
        self.mounted = True
        pid = self.daemon_pid(required=False)
        if pid:
            self.pids.add(pid)

    def umount(self):
        if self.plain:
            self.mounted = False
            return
        pid = self.daemon_pid(required=False)
        r = self.run("umount", self.mnt)
        if r.returncode != 0:
            pytest.fail("scion umount failed\n" + r.describe())
        self._wait(lambda: not is_mounted(self.mnt), 30, f"{self.mnt} to be unmounted")
        if pid:
            self._wait(lambda: not pid_alive(pid), 60,
                       f"daemon pid {pid} to exit after `scion umount`")
        self.mounted = False

    def remount(self):
        self.umount()
        self.mount()

    def kill9(self):
        """SIGKILL the daemon, lazily unmount, wait until its pid is gone."""
        if self.plain:
            self.mounted = False
            return
        pid = self.daemon_pid()
        if not self._our_pid(pid):
            pytest.fail(f"STORE/lock names pid {pid}, which is not a scion daemon of {self.store}")
        self.pids.add(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        self._wait(lambda: not pid_alive(pid), 30, f"killed daemon pid {pid} to disappear")
        self._wait(lambda: not is_mounted(self.mnt), 10, f"{self.mnt} to be gone after umount -l")
        self.mounted = False

    def check(self):
        """`scion check STORE` must exit 0; returns its stdout."""
        if self.plain:
            return ""
        r = self.run("check", self.store, timeout=max(CMD_TIMEOUT, 300))
        if r.returncode != 0:
            pytest.fail("scion check failed\n" + r.describe())
        return r.stdout

    # ---------------------------------------------------------------- teardown
    def emergency_kill(self):
        """Used by the watchdog: make blocked FUSE calls return."""
        pid = self.daemon_pid(required=False)
        for p in {pid, *self.pids} - {None}:
            if pid_alive(p) and self._our_pid(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def _our_pid(self, pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return self.store.encode() in f.read()
        except OSError:
            return False

    def cleanup(self):
        msgs = []
        if not self.plain:
            if is_mounted(self.mnt):
                try:
                    r = self.run("umount", self.mnt, timeout=60)
                    if r.returncode != 0:
                        msgs.append("teardown: scion umount failed\n" + r.describe())
                except Exception as e:  # noqa: BLE001
                    msgs.append(f"teardown: scion umount raised {e!r}")
            pid = self.daemon_pid(required=False)
            if pid:
                self.pids.add(pid)
            deadline = time.monotonic() + 10
            while (time.monotonic() < deadline and
                   any(pid_alive(p) and self._our_pid(p) for p in self.pids)):
                time.sleep(0.05)
            for p in self.pids:
                if pid_alive(p) and self._our_pid(p):
                    msgs.append(f"teardown: killing leftover daemon pid {p}")
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
            if is_mounted(self.mnt):
                subprocess.run(["umount", "-l", self.mnt], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            # extra mount points a test may have made under root (e.g. a second mount)
            for name in os.listdir(self.root):
                p = os.path.join(self.root, name)
                if is_mounted(p):    # (no stat: a hung mount would block it)
                    subprocess.run(["umount", "-l", p], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        return msgs

    def dump_logs(self):
        out = []
        for argv, o, e in self.logs[-6:]:
            for p in (o, e):
                try:
                    with open(p, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                if data:
                    out.append(f"--- {' '.join(argv)} :: {os.path.basename(p)} (tail) ---\n"
                               + data[-3000:].decode("utf-8", "replace"))
        try:
            names = sorted(n for n in os.listdir(self.store) if n.endswith(".log"))
        except OSError:
            names = []
        for n in names:
            try:
                with open(os.path.join(self.store, n), "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 6000))
                    data = f.read()
            except OSError:
                continue
            out.append(f"--- STORE/{n} (tail) ---\n" + data.decode("utf-8", "replace"))
        return "\n".join(out)


def missing_prerequisite():
    """Why the tests cannot run against scion here (None if they can)."""
    if PLAIN:
        return None
    if not os.path.exists(SCION_BIN):
        return (f"scion binary not found at {SCION_BIN!r}: build it "
                f"(cargo build --release) or set SCION_BIN; "
                f"use SCION_TEST_TARGET=plain to test the harness alone")
    if not os.access(SCION_BIN, os.X_OK):
        return f"scion binary {SCION_BIN!r} is not executable"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: FUSE is not available on this machine"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 not found: apt-get install -y fuse3"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    # A missing binary makes every test that needs it FAIL (in the call phase, so it is
    # reported as a failure, not as a skip or a setup error).
    if {"scion_mount", "scion_store"} & set(getattr(item, "fixturenames", ())):
        why = missing_prerequisite()
        if why:
            pytest.fail(why, pytrace=False)


def _make_root():
    os.makedirs(BASE, exist_ok=True)
    # short names: unix socket paths inside the mount must stay under 108 bytes
    return tempfile.mkdtemp(prefix="t", dir=BASE)


@pytest.fixture
def scion_store(request):
    """An initialised but not mounted store (ScionMount with mounted=False)."""
    if missing_prerequisite():
        yield None      # the test fails in pytest_runtest_call
        return
    m = ScionMount(_make_root())
    yield from _lifecycle(request, m, mount=False)


@pytest.fixture
def scion_mount(request):
    """A freshly initialised and mounted scion store."""
    if missing_prerequisite():
        yield None      # the test fails in pytest_runtest_call
        return
    m = ScionMount(_make_root())
    yield from _lifecycle(request, m, mount=True)


def _lifecycle(request, m, mount):
    def on_timeout():
        sys.stderr.write(f"\n*** watchdog: test exceeded {TEST_TIMEOUT}s; dumping stacks "
                         f"and killing the scion daemon ***\n")
        faulthandler.dump_traceback(all_threads=True)
        m.emergency_kill()

    watchdog = threading.Timer(TEST_TIMEOUT, on_timeout)
    watchdog.daemon = True
    watchdog.start()
    try:
        m.init()
        if mount:
            m.mount()
        yield m
    finally:
        watchdog.cancel()
        msgs = m.cleanup()
        failed = any(getattr(getattr(request.node, "rep_" + w, None), "failed", False)
                     for w in ("setup", "call"))
        if failed and not m.plain:
            logs = m.dump_logs()
            if logs:
                sys.stderr.write("\n" + logs + "\n")
        for s in msgs:
            sys.stderr.write(s + "\n")
        if failed and KEEP:
            sys.stderr.write(f"keeping {m.root} (SCION_KEEP=1)\n")
        elif not is_mounted(m.mnt):
            shutil.rmtree(m.root, ignore_errors=True)
        else:
            sys.stderr.write(f"not removing {m.root}: {m.mnt} is still mounted\n")
