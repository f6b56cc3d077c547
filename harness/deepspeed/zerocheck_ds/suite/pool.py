"""A pool of rank processes (worker.py) that replays scenarios and survives what they do.

The pool starts one process per rank on a fresh loopback port, waits until every rank has
imported the adapter and joined the process group, and then hands them scenarios one at a time.
A rank that dies (signal or exit) or a scenario that runs past its timeout ends that scenario
with a `crash` or `hang` outcome naming the rank, the signal and the operation each rank was in
(from the heartbeats); the pool then stops every rank and is started afresh on the next run.

Every rank runs in its own session (so Ctrl-C reaches only the supervisor, which stops them),
gets SIGKILL if the supervisor dies (PR_SET_PDEATHSIG), and is killed with its whole process
group on stop, so nothing outlives the run.
"""

import ctypes
import json
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field

from ..world.world import free_port
from .worker import REPLY_FD_VARIABLE

_PR_SET_PDEATHSIG = 1
_DISTRIBUTED_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class PoolStartError(Exception):
    """The ranks could not be started; the message carries what the ranks said."""


@dataclass
class Outcome:
    kind: str  # "done", "crash" or "hang"
    per_rank: list = field(default_factory=list)  # done: [{"findings": [...], "skipped": [...]}]
    last_steps: list = field(default_factory=list)  # per rank: {"op_index", "op"} or None
    rank: object = None  # crash: the rank that died first
    how: str = ""  # crash: "SIGSEGV" or "exit code 3"
    seconds: float = 0.0


def _die_with_parent():
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def describe_exit(returncode):
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class _Rank:
    def __init__(self, rank, process, reply_fd, log_path):
        self.rank = rank
        self.process = process
        self.reply_fd = reply_fd
        self.log_path = log_path
        self.buffer = b""
        self.last_step = None

    def lines(self):
        """Returns the complete JSON messages read so far (non-blocking)."""
        try:
            chunk = os.read(self.reply_fd, 65536)
        except BlockingIOError:
            return []
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in complete if line.strip()]


class RankPool:
    """W rank processes running `command`; run() replays one scenario on all of them."""

    def __init__(self, world_size, command, env, cwd, log_dir, start_timeout=180):
        self.world_size = world_size
        self._command = command
        self._env = {k: v for k, v in env.items() if k not in _DISTRIBUTED_VARIABLES}
        self._cwd = cwd
        self._log_dir = log_dir
        self._start_timeout = start_timeout
        self._ranks = []
        self.version = None
        self.versions = {}  # engine, torch, python (and commit) as rank 0 reported them
        self.starts = 0
        self.scenarios_on_these_ranks = 0

    @property
    def running(self):
        return bool(self._ranks)

    def start(self, attempts=3):
        """Starts the ranks and waits until all are ready. Raises PoolStartError.

        A port that another run took between our choice and rank 0's bind is retried on a new one.
        """
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except PoolStartError as e:
                if attempt == attempts or "address already in use" not in str(e).lower():
                    raise

    def _start_once(self):
        self.stop()
        self.starts += 1
        self.scenarios_on_these_ranks = 0
        port = free_port()
        os.makedirs(self._log_dir, exist_ok=True)
        for rank in range(self.world_size):
            self._ranks.append(self._spawn(rank, port))
        deadline = time.monotonic() + self._start_timeout
        ready = set()
        while len(ready) < self.world_size:
            for rank, message in self._poll(deadline):
                if "error" in message:
                    self.stop()
                    raise PoolStartError(f"rank {rank}: {message['error']}")
                if message.get("ready"):
                    ready.add(rank)
                    self.version = message.get("version")
                    self.versions = message.get("versions") or self.versions
            dead = self._dead_rank()
            if dead is not None:
                rank, code = dead
                log = self._log_tail(rank)
                self.stop()
                raise PoolStartError(f"rank {rank} died while starting ({describe_exit(code)}); "
                                     f"the end of its log:\n{log}")
            if time.monotonic() > deadline:
                self.stop()
                raise PoolStartError(f"the ranks were not ready after {self._start_timeout} s "
                                     f"(ready: {sorted(ready)})")

    def _spawn(self, rank, port):
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        env = dict(self._env, RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE=str(self.world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), **{REPLY_FD_VARIABLE: str(write_fd)})
        log_path = os.path.join(self._log_dir, f"rank{rank}.log")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n===== zerocheck_ds: rank {rank} started (start {self.starts}, "
                      f"port {port}) =====\n")
            log.flush()
            process = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=log,
                                       stderr=subprocess.STDOUT, env=env, cwd=self._cwd,
                                       pass_fds=(write_fd,), preexec_fn=_die_with_parent)
        os.close(write_fd)
        return _Rank(rank, process, read_fd, log_path)

    def _poll(self, deadline):
        """Yields (rank, message) for what arrives within a short wait."""
        selector = selectors.DefaultSelector()
        for r in self._ranks:
            selector.register(r.reply_fd, selectors.EVENT_READ, r)
        try:
            wait = max(0.0, min(0.2, deadline - time.monotonic()))
            for key, _ in selector.select(timeout=wait):
                for message in key.data.lines():
                    if "at" in message:
                        key.data.last_step = {"op_index": message["op_index"],
                                              "op": message["op"]}
                    yield key.data.rank, message
        finally:
            selector.close()

    def _dead_rank(self):
        for r in self._ranks:
            code = r.process.poll()
            if code is not None:
                return r.rank, code
        return None

    def _log_tail(self, rank, lines=20):
        try:
            with open(self._ranks[rank].log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def run(self, name, path, timeout, disable=None, checkpoints=None, resume=None, extra=None):
        """Replays one scenario on every rank (with the invariants `disable` lists switched off
        instead of the worker's own --disable, its checkpoints in the folder `checkpoints`; or,
        with `resume`, the second world of one of its loads: worker.py; `extra`: more keys of
        the job, I10's "trace" and "knob_seed"); returns its Outcome. Starts the ranks if
        needed."""
        if not self.running:
            self.start()
        self.scenarios_on_these_ranks += 1
        started = time.monotonic()
        deadline = started + timeout
        for r in self._ranks:
            r.last_step = None
            try:
                job = {"name": name, "path": path}
                if disable is not None:
                    job["disable"] = list(disable)
                if checkpoints is not None:
                    job["checkpoints"] = checkpoints
                if resume is not None:
                    job["resume"] = resume
                job.update(extra or {})  # I10's "trace" and "knob_seed" (worker.py)
                r.process.stdin.write((json.dumps(job) + "\n").encode())
                r.process.stdin.flush()
            except BrokenPipeError:
                pass  # it died; the loop below reports how
        results = {}
        while len(results) < self.world_size:
            for rank, message in self._poll(deadline):
                if message.get("done") == name:
                    results[rank] = {"findings": message["findings"],
                                     "skipped": message["skipped"],
                                     "checks": message.get("checks", {}),
                                     "written": message.get("written", {}),
                                     "reshard": message.get("reshard", []),
                                     "trace": message.get("trace", []),
                                     "knobs": message.get("knobs", {})}
            if len(results) == self.world_size:
                break
            dead = self._dead_rank()
            if dead is not None:
                # Read what the survivors last said before they are stopped.
                list(self._poll(time.monotonic()))
                outcome = Outcome("crash", last_steps=self._last_steps(), rank=dead[0],
                                  how=describe_exit(dead[1]))
                self.stop()
                outcome.seconds = time.monotonic() - started
                return outcome
            if time.monotonic() > deadline:
                outcome = Outcome("hang", last_steps=self._last_steps())
                self.stop()
                outcome.seconds = time.monotonic() - started
                return outcome
        return Outcome("done", per_rank=[results[r] for r in range(self.world_size)],
                       last_steps=self._last_steps(), seconds=time.monotonic() - started)

    def _last_steps(self):
        return [r.last_step for r in self._ranks]

    def stop(self, grace=0.0):
        """Stops every rank and whatever it started; nothing is left running.

        With `grace`, healthy ranks get that long to leave the process group on their own.
        """
        for r in self._ranks:
            try:
                r.process.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + grace
        for r in self._ranks:
            try:
                r.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for r in self._ranks:
            try:  # the group too: whatever the rank started (numactl, ...) goes with it
                os.killpg(r.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            r.process.wait()
            os.close(r.reply_fd)
        self._ranks = []
