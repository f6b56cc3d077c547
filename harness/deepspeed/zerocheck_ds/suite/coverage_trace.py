"""The lines one process executes in some files of an engine's package (the suite's `--coverage`).

A rank started by the suite with `--coverage` gets COVERAGE_VARIABLE (JSON: {"folder", "package",
"files"}) and coverage_boot/ first on PYTHONPATH, so this tracer starts in that folder's
sitecustomize, before anything imports the engine (the DeepSpeed shims' own sitecustomize does,
and runs after ours): the import-time lines (imports, defs, class bodies) count as they do for
coverage.py. The worker saves the lines after every scenario, before it reports the scenario done,
so a rank killed afterwards has lost nothing; any other process (a converter the replay starts)
saves them when it exits. Each process writes its own file, FOLDER/rank<R>-<pid>.json, replaced
atomically: {"package_root": DIR or null, "files": {path under the package: [line, ...]}}.

The target files are `files`, globs relative to the package folder (`runtime/zero/*.py`: a `*`
never crosses a folder), matched against the last folder named `package` in a code object's file
name, once per file name. Other code costs one cheap call per function call (settrace) or per
new line location (sys.monitoring, Python >= 3.12, where a location reports once and is then
switched off).
"""

import atexit
import fnmatch
import json
import os
import sys
import threading

COVERAGE_VARIABLE = "ZEROCHECK_DS_COVERAGE"


class LineTracer:
    """Records, per target file, the line numbers that executed (a line event, as coverage.py's)."""

    def __init__(self, package, files, use_monitoring=None):
        self.package = package
        self.globs = [tuple(g.rsplit("/", 1)) if "/" in g else ("", g) for g in files]
        self._where = {}  # code file name -> (package root, path under it) or None
        self._local = {}  # code file name -> its settrace line tracer, or None
        self.lines = {}  # code file name -> set of line numbers
        self._monitoring = (hasattr(sys, "monitoring") if use_monitoring is None
                            else use_monitoring)
        self._running = False

    def target(self, filename):
        """(package root, path under it) when `filename` is a target file, else None."""
        parts = filename.replace(os.sep, "/").split("/")
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] != self.package:
                continue
            rel = parts[i + 1:]
            folder, name = "/".join(rel[:-1]), rel[-1]
            if any(folder == g_folder and fnmatch.fnmatchcase(name, g_name)
                   for g_folder, g_name in self.globs):
                return "/".join(parts[:i + 1]), "/".join(rel)
            return None
        return None

    def _lines_of(self, filename):
        """The line set of a target file, None for any other (decided once per file name)."""
        where = self._where.get(filename, False)
        if where is False:
            where = self._where[filename] = self.target(filename)
        if where is None:
            return None
        return self.lines.setdefault(filename, set())

    def start(self):
        if self._running:
            return
        self._running = True
        if self._monitoring:
            monitoring = sys.monitoring
            monitoring.use_tool_id(monitoring.COVERAGE_ID, "zerocheck coverage")
            monitoring.restart_events()  # locations an earlier tracer switched off count again
            monitoring.register_callback(monitoring.COVERAGE_ID, monitoring.events.LINE,
                                         self._on_line)
            monitoring.set_events(monitoring.COVERAGE_ID, monitoring.events.LINE)
        else:
            threading.settrace(self._on_call)
            sys.settrace(self._on_call)

    def stop(self):
        if not self._running:
            return
        self._running = False
        if self._monitoring:
            monitoring = sys.monitoring
            monitoring.set_events(monitoring.COVERAGE_ID, 0)
            monitoring.register_callback(monitoring.COVERAGE_ID, monitoring.events.LINE, None)
            monitoring.free_tool_id(monitoring.COVERAGE_ID)
        else:
            sys.settrace(None)
            threading.settrace(None)

    def _on_line(self, code, line):
        lines = self._lines_of(code.co_filename)
        if lines is not None:
            lines.add(line)
        return sys.monitoring.DISABLE  # each location once: the rest of the run costs nothing

    def _on_call(self, frame, event, arg):
        filename = frame.f_code.co_filename
        local = self._local.get(filename, False)
        if local is False:
            local = self._local[filename] = self._line_tracer(self._lines_of(filename))
        return local  # None: no line events for this frame

    @staticmethod
    def _line_tracer(lines):
        if lines is None:
            return None

        def on_line(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return on_line
        return on_line

    def snapshot(self):
        """{"package_root", "files": {path under the package: sorted lines}} so far."""
        roots, files = set(), {}
        for filename, lines in list(self.lines.items()):
            root, rel = self._where[filename]
            roots.add(root)
            files.setdefault(rel, set()).update(lines)
        if not roots:  # nothing traced yet: the package's folder, if it was imported at all
            module = sys.modules.get(self.package)
            if getattr(module, "__file__", None):
                roots.add(os.path.dirname(os.path.abspath(module.__file__)))
        return {"package_root": min(roots) if roots else None,
                "files": {rel: sorted(lines) for rel, lines in sorted(files.items())}}


_active = {}  # "tracer", "folder": the process's tracer once start_from_environment ran


def start_from_environment():
    """Starts the tracer COVERAGE_VARIABLE asks for (nothing when it is unset); idempotent."""
    request = os.environ.get(COVERAGE_VARIABLE)
    if not request or _active:
        return
    request = json.loads(request)
    tracer = LineTracer(request["package"], request["files"])
    tracer.start()  # may raise (a tool holds sys.monitoring's slot): then nothing is saved
    _active.update(tracer=tracer, folder=request["folder"])
    atexit.register(save)


def save():
    """Writes this process's lines so far to its own file (nothing when not tracing)."""
    if not _active:
        return
    snapshot = _active["tracer"].snapshot()
    name = f"rank{os.environ.get('RANK', 'x')}-{os.getpid()}.json"
    path = os.path.join(_active["folder"], name)
    os.makedirs(_active["folder"], exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(snapshot, f)
    os.replace(path + ".tmp", path)
