"""sandcell's python kernel driver.

It runs as the first process of a kernel's sandbox (the same lock-down as
any run) and executes cells sent by the server in one persistent
namespace, the way a notebook does. The protocol (oci/kernel_linux.go):

  fd 3  commands from the server, one JSON object per line:
        {"op": "run", "id": N, "code": "...", "mark": "...", "cell": C,
         "outputs": "outputs", "max_pixels": P, "max_value": V,
         "env": {"K": "V"}, "html": true}
        (env: optional, set for that cell only; html: optional, the value's
        _repr_html_ as "value_html" in the reply)
  fd 4  replies to the server, one JSON object per line: first
        {"ready": true, ...}, then one reply per command.
  fd 1, fd 2  the cells' output, read live by the server; after each cell
        the driver writes the command's mark on both, so that the server
        knows where the cell's output ends.

A timeout or a cancellation arrives as SIGINT: KeyboardInterrupt in the
cell. Everything here runs inside the sandbox, with the user's code: the
server trusts nothing it says (a cell can write to fd 4 itself; it only
confuses its own session's results).
"""

import ast
import builtins
import json
import linecache
import os
import signal
import sys
import traceback
import types

_CMD_FD, _REPLY_FD = 3, 4
_DRIVER = os.path.abspath(__file__)
_DRIVER_DIR = os.path.dirname(_DRIVER)
# The directory cells work in (their cwd, sys.path[0], where outputs go):
# a kernel's own sandbox has /work; a kernel in a live sandbox (package
# interp) names the context's directory.
_WORK = os.environ.pop("SANDCELL_KERNEL_WORK", None) or "/work"
_MAX_TRACEBACK = 64 << 10
_MAX_VALUE_SENT = 1 << 20  # the server shapes what it shows (head and tail)
_MAX_DISPLAY = 32  # display items per cell
_KEEP_SOURCES = 200  # cells whose source stays in linecache for tracebacks

# The driver's own references, taken before any cell can replace them.
_write = os.write
_dumps = json.dumps
_loads = json.loads


class _State:
    running = False  # a cell is executing: SIGINT raises KeyboardInterrupt
    cmd = None  # the command being run
    display = None  # the cell's display items
    shown = None  # ids of figures already displayed in this cell
    figures = 0  # images written by this cell
    loop = None  # the event loop of cells that await


_state = _State()


def _on_sigint(signum, frame):
    # Between cells an interrupt (a timeout that raced with the cell's end)
    # is ignored: it must not kill the driver's loop.
    if _state.running:
        raise KeyboardInterrupt


def _send(obj):
    data = (_dumps(obj, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")
    view = memoryview(data)
    while view:
        n = _write(_REPLY_FD, view)
        view = view[n:]


def _write_all(fd, data):
    try:
        view = memoryview(data)
        while view:
            view = view[_write(fd, view):]
        return True
    except OSError:
        return False


def _flush():
    for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            s.flush()
        except Exception:
            pass


# --- images -----------------------------------------------------------------


def _outputs_dir():
    d = os.path.join(_WORK, _state.cmd.get("outputs") or "outputs")
    os.makedirs(d, exist_ok=True)
    return d


def _image_path(ext):
    _state.figures += 1
    name = "cell%d-figure%d.%s" % (_state.cmd.get("cell", 0), _state.figures, ext)
    return os.path.join(_outputs_dir(), name)


def _rel(path):
    return os.path.relpath(path, _WORK)


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None, None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _add(item):
    if len(_state.display) < _MAX_DISPLAY:
        _state.display.append(item)
    elif len(_state.display) == _MAX_DISPLAY:
        _state.display.append({"kind": "text", "text": "(more display items were left out)"})


def _add_image(path, mime, note=None):
    w = h = None
    if mime == "image/png":
        w, h = _png_size(path)
    item = {"kind": "image", "path": _rel(path), "mime": mime}
    if w:
        item["width"], item["height"] = w, h
    if note:
        item["note"] = note
    _add(item)


def _show_figure(fig):
    """Saves a matplotlib figure as PNG within the pixel budget."""
    if id(fig) in _state.shown:
        return
    _state.shown.add(id(fig))
    max_px = int(_state.cmd.get("max_pixels") or 0)
    dpi = float(fig.get_dpi())
    w, h = fig.get_size_inches()
    note = None
    if max_px and w * h * dpi * dpi > max_px:
        dpi = (max_px / (w * h)) ** 0.5
        note = "rendered at %.0f dpi to fit the %d-pixel image budget" % (dpi, max_px)
    path = _image_path("png")
    fig.savefig(path, format="png", dpi=dpi)
    _add_image(path, "image/png", note)


def _show_pil(img):
    max_px = int(_state.cmd.get("max_pixels") or 0)
    note = None
    if max_px and img.width * img.height > max_px:
        scale = (max_px / (img.width * img.height)) ** 0.5
        img = img.copy()
        img.thumbnail((max(1, int(img.width * scale)), max(1, int(img.height * scale))))
        note = "downscaled to %dx%d to fit the %d-pixel image budget" % (img.width, img.height, max_px)
    if img.mode not in ("RGB", "RGBA", "L", "LA", "P", "1", "I;16"):
        img = img.convert("RGBA")
    path = _image_path("png")
    img.save(path, format="PNG")
    _add_image(path, "image/png", note)


_MAGIC = [(b"\x89PNG\r\n\x1a\n", "png", "image/png"), (b"\xff\xd8\xff", "jpg", "image/jpeg"),
          (b"GIF87a", "gif", "image/gif"), (b"GIF89a", "gif", "image/gif")]
_EXT_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
             ".webp": "image/webp", ".svg": "image/svg+xml"}


def _show_bytes(data):
    for magic, ext, mime in _MAGIC:
        if data.startswith(magic):
            path = _image_path(ext)
            with open(path, "wb") as f:
                f.write(data)
            _add_image(path, mime)
            return True
    return False


def _show_file(p):
    path = os.path.abspath(os.fspath(p))
    mime = _EXT_MIME.get(os.path.splitext(path)[1].lower())
    if mime is None or not os.path.isfile(path):
        return False
    if os.path.commonpath([path, _WORK]) != _WORK:
        # Outside /work: copied in, so that the session keeps it.
        with open(path, "rb") as f:
            data = f.read()
        dst = _image_path(os.path.splitext(path)[1].lstrip(".").lower())
        with open(dst, "wb") as f:
            f.write(data)
        path = dst
    _add_image(path, mime)
    return True


def _is(obj, module_prefix, name):
    for t in type(obj).__mro__:
        if t.__name__ == name and (t.__module__ or "").startswith(module_prefix):
            return True
    return False


def display(*objs):
    """Shows objects in the cell's result: a matplotlib figure, a PIL image,
    PNG/JPEG/GIF bytes or the path of an image file become image content;
    anything else its text (repr)."""
    for obj in objs:
        try:
            if _is(obj, "matplotlib", "Figure"):
                _show_figure(obj)
            elif _is(obj, "PIL", "Image"):
                _show_pil(obj)
            elif isinstance(obj, (bytes, bytearray, memoryview)) and _show_bytes(bytes(obj)):
                pass
            elif isinstance(obj, (str, os.PathLike)) and len(os.fspath(obj)) < 4096 and _show_file(obj):
                pass
            else:
                text = obj if isinstance(obj, str) else repr(obj)
                _add({"kind": "text", "text": text[:_MAX_VALUE_SENT]})
        except Exception as e:
            _add({"kind": "text", "text": "display failed: %s: %s" % (type(e).__name__, e)})


def _sweep_figures():
    """Figures left open by the cell (or shown) become images, then close."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        for num in plt.get_fignums():
            fig = plt.figure(num)
            try:
                _show_figure(fig)
            finally:
                plt.close(fig)
    except Exception as e:
        _add({"kind": "text", "text": "saving a figure failed: %s: %s" % (type(e).__name__, e)})


# The inline matplotlib backend (MPLBACKEND=module://sandcell_inline):
# plt.show() hands the open figures over at once, in order.
_hooks = types.ModuleType("_sandcell")
_hooks.show = _sweep_figures
sys.modules["_sandcell"] = _hooks


class _BackendFinder:
    """Finds the inline backend module, and nothing else, in the driver's
    read-only directory (which is not on sys.path)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "sandcell_inline":
            return None
        import importlib.util
        return importlib.util.spec_from_file_location(name, os.path.join(_DRIVER_DIR, "sandcell_inline.py"))


sys.meta_path.append(_BackendFinder)


# --- cells ------------------------------------------------------------------


def _type_name(exc):
    t = type(exc)
    mod = t.__module__ or ""
    return t.__qualname__ if mod in ("builtins", "__main__") else mod + "." + t.__qualname__


def _error(exc):
    te = traceback.TracebackException.from_exception(exc)
    # The driver's own frames are not the user's business.
    seen = [te]
    while seen:
        t = seen.pop()
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if f.filename != _DRIVER])
        for nxt in (t.__cause__, t.__context__):
            if nxt is not None:
                seen.append(nxt)
    tb = "".join(te.format())
    if len(tb) > _MAX_TRACEBACK:
        tb = tb[: _MAX_TRACEBACK // 2] + "\n[... traceback cut ...]\n" + tb[-_MAX_TRACEBACK // 2:]
    try:
        msg = str(exc)
    except Exception:
        msg = "(str() of the exception failed)"
    if isinstance(exc, SystemExit):
        msg = "SystemExit(%r): the kernel keeps running (its state is kept)" % (exc.code,)
    return {"type": _type_name(exc), "message": msg[:_MAX_TRACEBACK], "traceback": tb}


def _run_coroutine(coro):
    import asyncio
    if _state.loop is None or _state.loop.is_closed():
        _state.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_state.loop)
    return _state.loop.run_until_complete(coro)


_CO_COROUTINE = 0x0080


def _exec(code_obj, ns):
    res = eval(code_obj, ns)
    if code_obj.co_flags & _CO_COROUTINE:
        res = _run_coroutine(res)
    return res


def _run(ns, code, cell):
    filename = "<cell %d>" % cell
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    old = "<cell %d>" % (cell - _KEEP_SOURCES)
    linecache.cache.pop(old, None)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    _exec(compile(tree, filename, "exec", flags=flags, dont_inherit=True), ns)
    if last is None:
        return None, False
    return _exec(compile(last, filename, "eval", flags=flags, dont_inherit=True), ns), True


def _value(v):
    """The text of a cell's value; figures and images are displayed instead."""
    if _is(v, "matplotlib", "Figure"):
        _show_figure(v)
        return None
    if _is(v, "PIL", "Image"):
        display(v)
        return None
    try:
        text = repr(v)
    except Exception as e:
        text = "(repr() failed: %s: %s)" % (type(e).__name__, e)
    return text[:_MAX_VALUE_SENT]


def _html(v):
    """The value's HTML (a data frame's table), when the command asks for
    it (E2B's results carry it) and the value's type has _repr_html_."""
    f = getattr(type(v), "_repr_html_", None)
    if not callable(f):
        return None
    try:
        h = f(v)
    except Exception:
        return None
    return h[:_MAX_VALUE_SENT] if isinstance(h, str) else None


def _configure_pandas():
    pd = sys.modules.get("pandas")
    if pd is None or getattr(_configure_pandas, "done", False):
        return
    try:
        # Data frames as readable text, at a size a model can read.
        pd.set_option("display.width", 160, "display.max_columns", 30, "display.max_rows", 60,
                      "display.max_colwidth", 60)
    except Exception:
        pass
    _configure_pandas.done = True


def _cell_env(env):
    """Sets a cell's own environment variables; returns what to restore."""
    saved = {}
    if not isinstance(env, dict):
        return saved
    for k, v in env.items():
        if isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v:
            saved[k] = os.environ.get(k)
            os.environ[k] = v
    return saved


def _restore_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _serve(ns):
    cmds = os.fdopen(_CMD_FD, "rb", buffering=1 << 16)
    count = 0
    while True:
        line = cmds.readline()
        if not line:
            return  # the server closed the channel: the kernel ends
        try:
            cmd = _loads(line)
        except ValueError:
            continue
        if not isinstance(cmd, dict) or cmd.get("op") != "run":
            continue
        count += 1
        _state.cmd, _state.display, _state.shown, _state.figures = cmd, [], set(), 0
        reply = {"id": cmd.get("id"), "status": "ok", "execution_count": count}
        code = cmd.get("code") or ""
        saved = _cell_env(cmd.get("env"))
        try:
            _state.running = True
            try:
                value, has = _run(ns, code, int(cmd.get("cell") or count))
            finally:
                _state.running = False
                _restore_env(saved)
            if has and value is not None:
                builtins._ = value
                ns["_"] = value
                _configure_pandas()
                text = _value(value)
                if text is not None:
                    reply["value"] = text
                    reply["value_type"] = _type_name(value) if not isinstance(value, type) else "type"
                    if cmd.get("html"):
                        html = _html(value)
                        if html is not None:
                            reply["value_html"] = html
        except BaseException as e:  # noqa: B902 - the cell's, whatever it is
            _state.running = False
            sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
            reply["status"] = "error"
            reply["error"] = _error(e)
            reply["interrupted"] = isinstance(e, KeyboardInterrupt)
        _configure_pandas()
        _sweep_figures()
        if _state.display:
            reply["display"] = _state.display
        _flush()
        mark = str(cmd.get("mark") or "").encode("ascii", "replace")
        reply["marks"] = [_write_all(1, mark), _write_all(2, mark)]
        _state.cmd = _state.display = _state.shown = None
        _send(reply)


def main():
    signal.signal(signal.SIGINT, _on_sigint)
    for fd in (_CMD_FD, _REPLY_FD):
        os.set_inheritable(fd, False)  # not passed to the cells' subprocesses
    main_mod = types.ModuleType("__main__")
    main_mod.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_mod
    builtins.display = display
    sys.argv = [""]
    if sys.path and sys.path[0] == _DRIVER_DIR:
        sys.path[0] = _WORK
    try:
        os.chdir(_WORK)
    except OSError:
        pass
    v = sys.version_info
    _send({"ready": True, "language": "python", "version": "%d.%d.%d" % (v.major, v.minor, v.micro), "pid": os.getpid()})
    _serve(main_mod.__dict__)


if __name__ == "__main__":
    main()
