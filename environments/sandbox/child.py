"""The process inside the sandbox: runs one generated program, reaching its session only over a pipe.

Standard library only (nothing else is mounted in the sandbox); started as ``python -I -S child.py``
under bubblewrap. It drops to an unprivileged uid when it starts as root, applies its rlimits, imports
the modules programs may use, says ``{"ready": true}`` and waits for one request line on stdin:
``{"source", "entry", "timeout_s"}``. Each ``tools.call`` is a ``{"call", "arguments"}`` line on stdout
answered by one line on stdin (``{"ok", "value"}`` or ``{"limit": message}``); the run ends with one
``{"result": {"ok", "value", "error"}}`` line and the process exits. A ``{"serve": {"source", "name"}}``
request makes it a persistent worker instead (``_serve``; ``environments/sandbox/worker.py``). The
server counts the calls and enforces the budget and the deadline itself (it SIGKILLs this process):
nothing here is trusted by it. The restricted builtins below are guard rails for honest programs, not
the boundary.
"""

import base64
import builtins
import collections
import datetime
import decimal
import functools
import io
import itertools
import json
import math
import os
import re
import resource
import signal
import stat
import statistics
import sys
import traceback
import types

NOBODY = 65534
MAX_DEPTH = 64
MODULES = {
    m.__name__: m for m in (collections, datetime, decimal, functools, itertools, json, math, re, statistics)
}
SAFE_BUILTINS = (
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "Exception",
    "KeyError",
    "IndexError",
    "ValueError",
    "TypeError",
    "LookupError",
    "ZeroDivisionError",
    "StopIteration",
    "ArithmeticError",
    "RuntimeError",
    "AssertionError",
    "NotImplementedError",
    "True",
    "False",
    "None",
)

_in = sys.stdin.buffer
_out = sys.stdout.buffer


def _send(message: dict) -> None:
    _out.write(json.dumps(message, separators=(",", ":"), allow_nan=False).encode() + b"\n")
    _out.flush()


def _receive() -> dict:
    line = _in.readline()
    if not line:
        os._exit(0)  # the server went away or gave up on this run
    return json.loads(line)


class ToolCallError(Exception):
    """A tool answered with an error result: ``code`` (e.g. NOT_FOUND) and ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ProgramLimit(BaseException):
    """The program ran past its time or tool-call budget (not an ``Exception``: it cannot be swallowed
    by ``except Exception``; a bare ``except`` can, which is why the server also kills at the deadline)."""


class Tools:
    """The ``tools`` object a program receives: ``call(name, **arguments)``."""

    __slots__ = ()

    def call(self, name: str, **arguments: object) -> object:
        """Run tool ``name`` on this program's session; its JSON result, or ``ToolCallError``."""
        _send({"call": str(name), "arguments": arguments})
        answer = _receive()
        if "limit" in answer:
            raise ProgramLimit(answer["limit"])
        if not answer.get("ok"):
            error = answer.get("value") or {}
            raise ToolCallError(str(error.get("code")), str(error.get("message")))
        return answer.get("value")


def _import(name: str, *args: object, **kwargs: object) -> object:
    if name in MODULES:
        return MODULES[name]
    raise ImportError(f"module {name!r} is not available to programs (allowed: {', '.join(sorted(MODULES))})")


def _namespace() -> dict:
    safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
    safe["__import__"] = _import
    safe["__build_class__"] = builtins.__build_class__
    return {"__builtins__": safe, "__name__": "program", "ToolCallError": ToolCallError, **MODULES}


def _trace(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<program>"]
    where = "".join(f"  line {f.lineno}, in {f.name}\n" for f in frames[-20:])
    return f"{where}{type(exc).__name__}: {str(exc)[:2000]}"


def _depth(value: object, level: int = 0) -> int:
    if level > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, (list, tuple)):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def _confine(address_space_mb: int, file_mb: int = 8) -> None:
    if os.getuid() == 0:  # bwrap ran as root without a user namespace: become nobody for good
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    limits = {
        resource.RLIMIT_AS: address_space_mb * 1024 * 1024,
        resource.RLIMIT_NOFILE: 16,
        resource.RLIMIT_NPROC: 1,  # no new processes or threads
        resource.RLIMIT_FSIZE: file_mb * 1024 * 1024,
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in limits.items():
        resource.setrlimit(kind, (value, value))


def _run(request: dict) -> dict:
    timeout = max(0.01, float(request.get("timeout_s", 5.0)))
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))

    def expired(_signum: int, _frame: object) -> None:
        raise ProgramLimit(f"ran longer than {timeout:g}s")

    signal.signal(signal.SIGALRM, expired)
    namespace = _namespace()
    entry = str(request.get("entry", "solve"))
    try:
        code = compile(str(request["source"]), "<program>", "exec")
        signal.setitimer(signal.ITIMER_REAL, timeout)
        exec(code, namespace)
        function = namespace.get(entry)
        if not callable(function):
            return {"ok": False, "error": f"the program defines no function {entry}(tools)"}
        value = function(Tools())
        signal.setitimer(signal.ITIMER_REAL, 0)
    except (Exception, ProgramLimit) as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return {"ok": False, "error": _trace(exc)}
    return _json_result(value)


def _json_result(value: object) -> dict:
    """``value`` as a successful result if it is bounded JSON, else the error saying why not."""
    try:
        _depth(value)
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return {"ok": False, "error": f"the result is not JSON: {exc}"}
    return {"ok": True, "value": value}


def _write_files(root: str, files: dict) -> dict:
    """The data folder's files (path -> base64) written under ``root``; their bytes by path."""
    written = {}
    for path, text in files.items():
        data = base64.b64decode(text)
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(data)
        written[path] = data
    return written


def _scan(root: str) -> dict:
    """Every regular file under ``root`` (path -> bytes), without following a link: a symbolic link or
    a special file (fifo, socket, device) there is refused (``ValueError``)."""
    found, pending = {}, [""]
    while pending:
        folder = pending.pop()
        with os.scandir(os.path.join(root, folder) if folder else root) as entries:
            listed = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in entries]
        for name, mode in listed:
            path = f"{folder}/{name}" if folder else name
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif stat.S_ISREG(mode):
                fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise ValueError(f"{path!r} changed while it was read")
                    with os.fdopen(fd, "rb", closefd=False) as stream:
                        found[path] = stream.read()
                finally:
                    os.close(fd)
            else:
                what = "a symbolic link" if stat.S_ISLNK(mode) else "a special file"
                raise ValueError(f"the tool left {what} at {path!r} in its data folder (refused)")
    return found


def _changed(written: dict, root: str) -> dict:
    """What the call changed in its data folder: path -> base64, or ``None`` for a deleted file."""
    current = _scan(root)
    changed = {p: base64.b64encode(d).decode("ascii") for p, d in current.items() if written.get(p) != d}
    changed.update({p: None for p in written if p not in current})
    return changed


def _run_function(request: dict) -> dict:
    """Third-party tool code (``functions.py``): the module's source with full builtins (the sandbox is
    the boundary; a ``prelude`` may build them), then ``function(**arguments)``; ``env`` entries are set
    first (e.g. its data dir). With ``files`` they are written into ``data_dir`` first and the result
    names the files the call changed there."""
    timeout = max(0.01, float(request.get("timeout_s", 5.0)))
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    os.environ.update({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})
    name = str(request["function"])
    namespace = {"__name__": str(request.get("module", "tool")), "__builtins__": builtins}
    files = request.get("files")
    root = str(request.get("data_dir", ""))
    try:
        written = _write_files(root, dict(files)) if files is not None else {}
        sys.stdout = sys.stderr  # its prints must not reach the protocol pipe
        prelude = request.get("prelude")
        if isinstance(prelude, dict):  # builds the code's builtins (e.g. seeded random/uuid stand-ins)
            scope = {"__name__": "sandbox_prelude", "__builtins__": builtins}
            exec(compile(str(prelude["source"]), "<prelude>", "exec"), scope)
            namespace["__builtins__"] = scope[str(prelude["factory"])](**dict(prelude.get("arguments") or {}))
        exec(compile(str(request["source"]), f"<{name}>", "exec"), namespace)
        function = namespace.get(name)
        if not callable(function):
            return {"ok": False, "error": f"the implementation defines no function {name!r}"}
        value = function(**dict(request.get("arguments") or {}))
        changed = _changed(written, root) if files is not None else None
    except SystemExit as exc:
        return {"ok": False, "error": f"{name!r} called exit({exc.code!r})"}
    except BaseException as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
    finally:
        sys.stdout = sys.__stdout__
    result = _json_result(value)
    if changed is not None and result["ok"]:
        result["files"] = changed
    return result


def _serve(request: dict) -> None:
    """A persistent worker (``worker.py``): ``source`` defines ``handle(message)``; every later line is
    one message, answered by one ``{"ok": true, "value"}`` or ``{"ok": false, "error"}`` line, until
    stdin closes. Prints go nowhere. The server kills this process at each message's deadline."""
    name = str(request.get("name", "worker"))
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = builtins
    exec(compile(str(request["source"]), f"<{name}>", "exec"), module.__dict__)
    sys.modules[name] = module
    handle = module.handle
    _send({"serving": True})
    sink = io.StringIO()
    while True:
        message = _receive()
        sys.stdout = sys.stderr = sink
        try:
            reply = {"ok": True, "value": handle(message)}
        except BaseException as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        finally:
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            sink.seek(0)
            sink.truncate()
        try:
            _send(reply)
        except (TypeError, ValueError, RecursionError) as exc:
            _send({"ok": False, "error": f"the answer is not JSON: {exc}"})


def main() -> None:
    if len(sys.argv) > 3:
        sys.path[:0] = [entry for entry in sys.argv[3].split(os.pathsep) if entry]
    for name in sys.argv[2].split(",") if len(sys.argv) > 2 else ():
        if name:
            __import__(name)  # before the drop to nobody, who may not read the Python install
    sizes = [int(n) for n in sys.argv[1].split(":")] if len(sys.argv) > 1 else [512]
    _confine(*sizes)
    _send({"ready": True})
    request = _receive()
    if "serve" in request:
        _serve(request["serve"])
    result = _run_function(request) if "function" in request else _run(request)
    try:
        _send({"result": result})
    except (TypeError, ValueError, RecursionError) as exc:
        _send({"result": {"ok": False, "error": f"the result is not JSON: {exc}"}})
    os._exit(0)  # no interpreter teardown: no program finalizers (__del__) run after the result


if __name__ == "__main__":
    main()
