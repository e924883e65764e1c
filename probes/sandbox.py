"""Run untrusted Python (benchmark code, model output) in a sandboxed subprocess and get back `repr(value)`.

Policy. Every call starts a fresh interpreter, `sys.executable -I -S -B -X utf8` (isolated: no environment
variables, no user or site packages, the working directory not on `sys.path`; no bytecode written), in a new
session (its own process group) with:
- a fresh temporary working directory, removed afterwards; HOME and TMPDIR point into it;
- an environment of four variables (PATH, LANG, HOME, TMPDIR): nothing of the caller's leaks in;
- resource limits set in the child before exec (`preexec_fn`): CPU seconds (RLIMIT_CPU, SIGXCPU), address
  space (RLIMIT_AS, so a memory bomb fails with MemoryError), file size (RLIMIT_FSIZE, which also bounds what
  the code prints: stdout and stderr are files), open files, no core dumps, and no new processes (RLIMIT_NPROC
  0; root is exempt from it, the audit hook below still applies);
- a wall-clock limit: on expiry the whole process group is killed;
- inside the child, an audit hook (`sys.addaudithook`) installed before the code runs that refuses network
  (`socket.*`), process creation and signalling (`subprocess.Popen`, `os.system`, `os.exec*`, `os.spawn*`,
  `os.posix_spawn`, `os.fork`, `os.kill`, ...), `ctypes`, and any file write, creation, removal or
  permission change outside the working directory (and opening a directory outside it, whose descriptor
  could serve as a `dir_fd` to write through). A refusal is sticky: code that swallows the exception is still
  reported as refused.

The hook is a guard against accidents (a dataset function that writes files, model-written code that calls
the network), not a boundary against code written to escape: CPython documents audit hooks as unsuitable for
sandboxing. The hard limits are the OS ones: resources, time, the process group, the throwaway directory.

Protocol: the payload (source, expression, a random nonce) goes in on stdin as JSON; the child executes the
source, evaluates the expression in the same namespace and writes `repr((status, value_repr, error_type,
message))` between two nonce-marked lines on stdout, which the parent reads with `ast.literal_eval`. Nothing
the code does can make `evaluate` raise or hang: every failure is an `Outcome`.
"""
from __future__ import annotations

import ast
import json
import os
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from enum import Enum
from functools import partial

MiB = 1 << 20


class Outcome(str, Enum):
    """How a sandboxed run ended."""

    OK = "ok"  # the expression's repr came back
    TIMEOUT = "timeout"  # the wall-clock or the CPU limit
    MEMORY = "memory"  # MemoryError under the address-space limit
    REFUSED = "refused"  # the audit hook refused an operation (network, processes, writes outside the cwd)
    EXCEPTION = "exception"  # the code or the expression raised
    SYNTAX = "syntax"  # the source or the expression does not compile
    OUTPUT_LIMIT = "output_limit"  # printed (or returned a repr) beyond the file-size limit
    CRASHED = "crashed"  # died without a result (signal, os._exit, interpreter failure)


@dataclass(frozen=True)
class Limits:
    """Per-run limits. The CPU limit is whole seconds (RLIMIT_CPU); the wall-clock one covers start-up too."""

    cpu_seconds: int = 2
    wall_seconds: float = 5.0
    memory_bytes: int = 512 * MiB
    file_bytes: int = 1 * MiB
    open_files: int = 64


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class SandboxResult:
    outcome: Outcome
    value: str | None = None  # repr(expression) when outcome is OK
    error_type: str = ""  # the exception's class name, for EXCEPTION / MEMORY / REFUSED / SYNTAX
    message: str = ""
    output: str = ""  # what the code printed to stdout (at most the file-size limit)
    elapsed: float = 0.0  # seconds, start-up included

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


_EXIT_WRITE_FAILED = 120

# Runs in the child as `python -c`. It imports what it needs, then installs the hook, then runs the code. Kept
# free of f-strings and newer syntax so any Python 3.8+ runs it.
_BOOTSTRAP = r'''
import json, os, sys

def _main():
    payload = json.loads(sys.stdin.read())
    nonce = payload["nonce"]
    result_fd = os.dup(1)
    root = os.path.realpath(os.getcwd())
    refused = []

    blocked = frozenset((
        "subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.kill", "os.killpg",
        "pty.spawn", "os.startfile", "signal.pthread_kill",
    ))
    blocked_prefixes = ("socket.", "os.exec", "os.spawn", "ctypes.", "_ctypes.")
    blocked_imports = frozenset(("_posixsubprocess", "_ctypes"))  # fork_exec and native calls, unaudited
    # event: (positions of the paths it changes, positions of its dir_fd arguments; None or -1 when unused)
    path_events = {
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.rename": ((0, 1), (2, 3)),
        "os.replace": ((0, 1), (2, 3)), "os.link": ((0, 1), (2, 3)), "os.symlink": ((0, 1), (2,)),
        "os.mkdir": ((0,), (2,)), "os.chmod": ((0,), (2,)), "os.lchmod": ((0,), ()), "os.chown": ((0,), (3,)),
        "os.utime": ((0,), (3,)), "os.truncate": ((0,), ()), "os.chflags": ((0,), ()),
        "os.lchflags": ((0,), ()), "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
        "os.setxattr": ((0,), ()), "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)),
        "shutil.copyfile": ((1,), ()), "shutil.copymode": ((1,), ()), "shutil.copystat": ((1,), ()),
        "shutil.copytree": ((1,), ()), "shutil.move": ((0, 1), ()), "shutil.chown": ((0,), ()),
        "shutil.make_archive": ((0,), ()), "shutil.unpack_archive": ((1,), ()),
    }
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    # Bound before the code runs: monkeypatching os afterwards cannot disable the checks or the report.
    fspath, fsdecode, realpath, isdir, sep = os.fspath, os.fsdecode, os.path.realpath, os.path.isdir, os.sep
    write, exit_ = os.write, os._exit

    def inside(path):
        if isinstance(path, int):
            return False  # a descriptor: where it points is unknown here
        try:
            resolved = realpath(fsdecode(fspath(path)))
        except Exception:
            return False
        return resolved == root or resolved.startswith(root + sep)

    def refuse(event, detail):
        refused.append("sandbox: %s refused (%s)" % (event, detail))
        raise PermissionError(refused[-1])

    def hook(event, args):
        if event in blocked or event.startswith(blocked_prefixes):
            refuse(event, "no network, processes or native calls")
        if event == "import" and args and args[0] in blocked_imports:
            refuse(event, "module " + str(args[0]))
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if path is None or isinstance(path, int):
                return
            writing = bool(mode) and any(c in mode for c in "wax+")
            writing = writing or (isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                refuse(event, "write outside the working directory: %r" % (path,))
            if not writing and not inside(path) and isdir(path):
                refuse(event, "directory outside the working directory: %r" % (path,))
        elif event in path_events:
            paths, dir_fds = path_events[event]
            for i in paths:
                if i < len(args) and not inside(args[i]):
                    refuse(event, "outside the working directory: %r" % (args[i],))
            for i in dir_fds:
                if i < len(args) and args[i] is not None and args[i] != -1:
                    refuse(event, "dir_fd")

    def text(obj):
        try:
            return str(obj)
        except BaseException:
            return "<unprintable>"

    def report(status, value="", error_type="", message=""):
        if refused:
            status, error_type, message = "refused", "PermissionError", refused[0]
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        block = "\n%s:BEGIN\n%r\n%s:END\n" % (nonce, (status, value, error_type, message), nonce)
        data = block.encode("utf-8", "backslashreplace")
        try:
            while data:
                data = data[write(result_fd, data):]
        except BaseException:
            exit_(_EXIT_WRITE_FAILED)
        exit_(0)

    try:
        code = compile(payload["source"], "<sandbox>", "exec")
        expression = compile(payload["expression"], "<expression>", "eval")
    except (SyntaxError, ValueError) as error:
        report("syntax", "", type(error).__name__, text(error))
    namespace = {"__name__": "__sandbox__", "__builtins__": __builtins__}
    sys.addaudithook(hook)
    try:
        exec(code, namespace)
        value = repr(eval(expression, namespace))
    except BaseException as error:
        report("exception", "", type(error).__name__, text(error))
    report("ok", value)

_main()
'''.replace("_EXIT_WRITE_FAILED", str(_EXIT_WRITE_FAILED))


def _apply_limits(limits: Limits) -> None:
    """In the child between fork and exec: no Python objects allocated beyond the calls themselves."""
    cpu = max(1, int(limits.cpu_seconds))
    for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)),
                         (resource.RLIMIT_AS, (limits.memory_bytes,) * 2),
                         (resource.RLIMIT_FSIZE, (limits.file_bytes,) * 2),
                         (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
                         (resource.RLIMIT_CORE, (0, 0)),
                         (getattr(resource, "RLIMIT_NPROC", None), (0, 0))):
        if which is None:
            continue
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass  # a limit the platform lacks or will not lower: the others still hold


def _environment(workdir: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}


def _wait_exit(proc: subprocess.Popen, timeout: float) -> tuple[bool, bool]:
    """Wait up to `timeout` for the child to exit. Returns (exited, reaped).

    With a pidfd the child is left unreaped (a zombie keeps its pid, hence its process group id, from being
    reused), so killing the group afterwards cannot hit another process group.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout)
            return True, True
        except subprocess.TimeoutExpired:
            return False, False
    try:
        ready, _, _ = select.select([pidfd], [], [], max(0.0, timeout))
        return bool(ready), False
    finally:
        os.close(pidfd)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read(f, limit: int) -> str:
    f.seek(0)
    return f.read(limit).decode("utf-8", "replace")


def _remove_tree(path: str) -> None:
    """rmtree that also clears what the code made unremovable (a directory chmod'ed to 0)."""

    def make_writable_and_retry(function, failed_path, _exc_info):
        try:
            os.chmod(os.path.dirname(failed_path), stat.S_IRWXU)
            if os.path.isdir(failed_path) and not os.path.islink(failed_path):
                os.chmod(failed_path, stat.S_IRWXU)
            function(failed_path)
        except OSError:
            pass

    shutil.rmtree(path, onerror=make_writable_and_retry)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def _result_block(stdout: str, nonce: str) -> tuple[str, str, tuple | None]:
    """Split stdout into (printed output, the block's text, the parsed block); the last block counts."""
    begin, end = f"\n{nonce}:BEGIN\n", f"\n{nonce}:END\n"
    start = stdout.rfind(begin)
    if start < 0:
        return stdout, "", None
    stop = stdout.find(end, start + len(begin))
    if stop < 0:
        return stdout[:start], "", None
    body = stdout[start + len(begin):stop]
    try:
        parsed = ast.literal_eval(body)
    except Exception:
        return stdout[:start], body, None
    if not (isinstance(parsed, tuple) and len(parsed) == 4 and all(isinstance(p, str) for p in parsed)):
        return stdout[:start], body, None
    return stdout[:start], body, parsed


def _from_block(block: tuple[str, str, str, str], output: str, elapsed: float) -> SandboxResult:
    status, value, error_type, message = block
    if status == "ok":
        return SandboxResult(Outcome.OK, value, output=output, elapsed=elapsed)
    if status == "exception" and error_type == "MemoryError":
        outcome = Outcome.MEMORY
    elif status == "exception" and "File too large" in message:
        outcome = Outcome.OUTPUT_LIMIT
    else:
        outcome = {"syntax": Outcome.SYNTAX, "refused": Outcome.REFUSED}.get(status, Outcome.EXCEPTION)
    return SandboxResult(outcome, None, error_type, message, output, elapsed)


def _without_block(returncode: int, output: str, stderr: str, limits: Limits, stdout_size: int,
                   elapsed: float) -> SandboxResult:
    tail = stderr.strip()[-500:]
    if returncode == -signal.SIGXCPU:
        return SandboxResult(Outcome.TIMEOUT, None, "", f"CPU limit of {limits.cpu_seconds} s", output,
                             elapsed)
    if "MemoryError" in stderr:
        return SandboxResult(Outcome.MEMORY, None, "MemoryError", tail, output, elapsed)
    if stdout_size >= limits.file_bytes or returncode == -signal.SIGXFSZ:
        return SandboxResult(Outcome.OUTPUT_LIMIT, None, "", f"output over {limits.file_bytes} bytes",
                             output, elapsed)
    if returncode < 0:
        reason = f"killed by {signal.Signals(-returncode).name}" if -returncode in signal.valid_signals() \
            else f"killed by signal {-returncode}"
    else:
        reason = f"exited with status {returncode} without a result"
    return SandboxResult(Outcome.CRASHED, None, "", f"{reason}: {tail}" if tail else reason, output, elapsed)


def evaluate(source: str, expression: str, limits: Limits = DEFAULT_LIMITS, *,
             tmp_root: str | os.PathLike | None = None) -> SandboxResult:
    """Execute `source`, then evaluate `expression` in its namespace, in a sandboxed child; never raises for
    anything the code does. `tmp_root` is where the throwaway working directory is made (created if missing;
    default: the system temporary directory)."""
    nonce = secrets.token_hex(12)
    payload = json.dumps({"nonce": nonce, "source": source, "expression": expression}).encode("utf-8")
    if tmp_root is not None:
        os.makedirs(tmp_root, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="aio-sandbox-", dir=tmp_root)
    started = time.monotonic()
    try:
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, \
                tempfile.TemporaryFile() as stderr:
            stdin.write(payload)
            stdin.seek(0)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-B", "-X", "utf8", "-c", _BOOTSTRAP], stdin=stdin, stdout=stdout,
                    stderr=stderr, cwd=workdir, env=_environment(workdir), close_fds=True,
                    start_new_session=True, preexec_fn=partial(_apply_limits, limits))
            except OSError as error:
                return SandboxResult(Outcome.CRASHED, None, type(error).__name__, f"could not start: {error}")
            exited, reaped = False, False
            try:
                exited, reaped = _wait_exit(proc, limits.wall_seconds)
            finally:
                if not reaped:
                    _kill_group(proc.pid)  # stragglers on exit, everything on a timeout or an interrupt
                proc.wait()
            elapsed = time.monotonic() - started
            cap = limits.file_bytes + 64 * 1024
            out_text, err_text = _read(stdout, cap), _read(stderr, 64 * 1024)
            stdout_size = os.fstat(stdout.fileno()).st_size
        output, _, block = _result_block(out_text, nonce)
        if not exited:
            return SandboxResult(Outcome.TIMEOUT, None, "", f"wall-clock limit of {limits.wall_seconds:g} s",
                                 output, elapsed)
        if block is not None:
            return _from_block(block, output, elapsed)
        return _without_block(proc.returncode, output, err_text, limits, stdout_size, elapsed)
    finally:
        _remove_tree(workdir)
