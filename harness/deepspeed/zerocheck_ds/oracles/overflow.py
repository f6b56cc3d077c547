"""I11, the overflow contract, on an upstream engine: what each DeepSpeed version promises about a
step whose gradients hold a NaN or an infinity (the scenario's `inject`), and whether it keeps it.

What is promised is read from each version's code (docs/deepspeed-precision.md, section 3, has
the measurements), per ZeRO stage, parameter dtype and config flag: PROMISES, each row citing
the lines that make it or that show it is not made. Where a version promises the skip, a step
whose accumulation window took a non-finite gradient must be skipped on every rank
(`skipped_steps` + 1 on each), and afterwards nothing non-finite may be in the weights, the fp32
master or the optimizer state (ZeRO-3: the padding of a partition left out, DeepSpeed allocates
it uninitialised); a clean bf16 or fp32 window must not be skipped. On every row the ranks skip
together or not at all (every version that skips MAX-reduces its flag over the data-parallel
group). Where no skip is promised, what DeepSpeed did is reported as a behaviour never promised
(the verdict's I11 "not checked" reasons), never as a finding.

The reported norm: `get_global_grad_norm()` is documented on both versions as "Return the 2-norm
of all gradients ... cached and reused until the next step() pass" (NORM_PROMISE). So after a
ZeRO-3 step of a window that took an injection, applied on every rank, where the twin follows the
precision and I3 has not seen it part from the engine, every rank's reported norm must be the
twin's 2-norm of the gradients that step used (a double norm of whole
tensors; DeepSpeed sums per-partition squares, a few double ulp apart: NORM_TOLERANCE), and
non-finite when that is (the 2-norm of gradients holding an inf is inf, a NaN's NaN). A skipped
step reports the last one (cached): not judged. ZeRO-1/2's norm is reduced in fp32 over flat
partitions, which the twin does not follow: not judged there. Clean windows' norms are left to
I3's territory (the numbers): judged here, a fault I3 catches would be caught twice.

Which windows took a non-finite gradient comes from the scenario, not the engine: the dense twin
(when it follows the precision) says whether any rank's gradient was non-finite; otherwise an
injected loss (every gradient element becomes v * g: inf or NaN) or NaN input (its row of every
layer's output is NaN, every gradient sums over it) always does, a gradient injection does when
its parameter is trainable and outside an MoE's experts (a route may skip those), and an
infinite input is undecided (tanh(inf) is finite): "not checked" with that reason.

The fp16 loss scale: after every step, every rank's scale must be what DeepSpeed's scaler rules
give (model/loss_scale.py, per version) from the steps' overflows: the scenario's where it
decides them (an injected window), else the skip the ranks agree on (a clean fp16 window may
overflow by itself at the scaler's scale, which no twin here computes).

Not checked here: whether a clean fp16 window was skipped (fp16 may overflow by itself), and the clean steps after a promised skip against a
twin that skipped it (the promised skips the CPU lanes run are fp16's, let through DeepSpeed's CPU
refusal by ZEROCHECK_DS_ALLOW_CPU_FP16, and master's bf16 ZeRO-1/2 one: the twin follows neither).
"""

import math
from dataclasses import dataclass

import torch

from ..findings.verdict import Finding
from ..model.loss_scale import LossScaleModel
from ..scenario import schema

INVARIANT = schema.some("invariants", "I11")[0]


@dataclass(frozen=True)
class Promise:
    skips: bool  # a step whose gradients hold a NaN or inf is skipped on every rank
    where: str  # the code (or documentation) that makes the promise, or shows it is not made
    broken_by: str = ""  # where a promise made by the documentation is not kept by the code


NORM_PROMISE = ("runtime/engine.py:487-496 (v0.14.5), :962-971 (master): get_global_grad_norm "
                "\"Return the 2-norm of all gradients\"")
# Relative: the twin's whole-tensor double norm against per-partition squares summed in another
# order (measured at world 2 over 20000 gradient sets: at most 5e-16, model/twin.py
# clip_gradients); the bound leaves room for the fp32 loss-scale division (a scale of 1 here).
NORM_TOLERANCE = 1e-12

_V14_STAGE3_CHECK = "runtime/zero/stage3.py:1968-1969 (v0.14.5): the overflow check runs for fp16 parameters only"
_MASTER_STAGE3_CHECK = "runtime/zero/stage3.py:2550-2551 (master): the overflow check runs for fp16 parameters only"
_CHECK_GRAD_OVERFLOW_DOC = ("runtime/precision_config.py:56-61 (master): bf16.check_grad_overflow, "
                            "default true, \"Detect gradient overflow/underflow before the optimizer "
                            "step and skip the step when detected\", for every stage")

# (version column, stage class, dtype, bf16.check_grad_overflow or None where no row reads it).
PROMISES = {
    ("v0.14.5", "3", "fp32", None): Promise(False, _V14_STAGE3_CHECK),
    ("v0.14.5", "3", "bf16", None): Promise(False, _V14_STAGE3_CHECK),
    ("v0.14.5", "3", "fp16", None): Promise(
        True, "runtime/zero/stage3.py:1965-1978,2025-2028 (check, skip), :2139-2172 (MAX over the "
              "data-parallel group), runtime/engine.py:2141-2148 (skipped_steps) (v0.14.5)"),
    ("v0.14.5", "1-2", "fp32", None): Promise(
        False, "runtime/zero/stage_1_and_2.py:1831-1832 (v0.14.5): the overflow check runs for fp16 only"),
    ("v0.14.5", "1-2", "bf16", None): Promise(
        False, "runtime/zero/stage_1_and_2.py:1831-1832 (v0.14.5): the overflow check runs for fp16 only"),
    ("v0.14.5", "1-2", "fp16", None): Promise(
        True, "runtime/zero/stage_1_and_2.py:1831-1854, :2009 (MAX), runtime/engine.py:2141-2148 (v0.14.5)"),
    ("master", "3", "fp32", None): Promise(False, _MASTER_STAGE3_CHECK),
    # The key's documentation promises the skip at every stage; ZeRO-3 never gets the flag.
    ("master", "3", "bf16", True): Promise(
        True, _CHECK_GRAD_OVERFLOW_DOC,
        broken_by="runtime/engine.py:2365-2370,2432 (master) hands the flag to ZeRO-1/2 only, "
                  "ZeRO-3's constructor (:2480-2524) gets none, and " + _MASTER_STAGE3_CHECK),
    ("master", "3", "bf16", False): Promise(
        False, "bf16.check_grad_overflow false (runtime/precision_config.py:56-61 (master)), and "
               + _MASTER_STAGE3_CHECK),
    ("master", "3", "fp16", None): Promise(
        True, "runtime/zero/stage3.py:2547-2564,2612-2615 (check, skip), :2726-2760 (MAX over the "
              "data-parallel group), runtime/engine.py:3371-3378 (skipped_steps) (master)"),
    ("master", "1-2", "fp32", None): Promise(
        False, "runtime/engine.py:2369-2370 (master): check_grad_overflow false without bf16 or fp16"),
    ("master", "1-2", "bf16", True): Promise(
        True, "runtime/engine.py:2365-2366,2432, runtime/zero/stage_1_and_2.py:2290-2301 (check, "
              "skip), :2470-2482 (MAX over the data-parallel group), runtime/engine.py:3371-3378 "
              "(skipped_steps) (master)"),
    ("master", "1-2", "bf16", False): Promise(
        False, "bf16.check_grad_overflow false: runtime/engine.py:2365-2366, "
               "runtime/zero/stage_1_and_2.py:2290 (master)"),
    ("master", "1-2", "fp16", None): Promise(
        True, "runtime/engine.py:2367-2368, runtime/zero/stage_1_and_2.py:2290-2301, :2470-2482 (master)"),
}


def config_dtype(config):
    """The parameters' dtype a DeepSpeed `config` trains in: "fp16", "bf16" or "fp32"."""
    if config.get("fp16", {}).get("enabled"):
        return "fp16"
    return "bf16" if config.get("bf16", {}).get("enabled") else "fp32"


def promise(column, stage, config):
    """The Promise of DeepSpeed `column` ("v0.14.5", "master") at ZeRO `stage` for `config`.
    Raises KeyError for a combination no row reads (stage 0)."""
    dtype = config_dtype(config)
    flag = None
    if column == "master" and dtype == "bf16":
        # Master's own default (runtime/precision_config.py:56); v0.14.5 ignores the key.
        flag = bool(config.get("bf16", {}).get("check_grad_overflow", True))
    return PROMISES[(column, "3" if stage == 3 else "1-2", dtype, flag)]


def row_name(column, stage, config):
    """The row's words: "master ZeRO-3 bf16, check_grad_overflow true"."""
    dtype = config_dtype(config)
    name = f"{column} ZeRO-{stage} {dtype}"
    if column == "master" and dtype == "bf16":
        flag = config.get("bf16", {}).get("check_grad_overflow", True)
        name += f", check_grad_overflow {str(bool(flag)).lower()}"
    return name


def _scenario_says(consumed, trainable):
    """Whether the injections a window consumed make its gradients non-finite, from the scenario
    alone: True, False, or None (undecided)."""
    undecided = False
    for into, value, param in consumed:
        if into == "loss" or (into == "input" and math.isnan(value)):
            return True
        if into == "gradient" and param in trainable:
            if ".experts." not in f".{param}":
                return True
            undecided = True  # a route may skip an expert: no gradient, nothing replaced
        undecided = undecided or into == "input"
    return None if undecided else False


def _nonfinite(tensor, count=None):
    t = tensor.detach().reshape(-1)
    if count is not None:
        t = t[:max(0, count)]
    return t.numel() > 0 and not bool(torch.isfinite(t.float()).all())


class OverflowChecks:
    """I11 on one rank: the injections each accumulation window took, and after each step what
    every rank did with them. Every rank makes the same calls (its observation goes into the
    checks' one object exchange, numerics.py)."""

    def __init__(self, config, column, tally):
        """`config`: the replay's (its stage may be the suite's --stage); `column`: the DeepSpeed
        version's ("v0.14.5" or "master", scenario/config.py precision_column)."""
        self.tally = tally
        self.config = config
        self.stage = config["zero_optimization"]["stage"]
        self.row = None
        try:
            self.promise = promise(column, self.stage, config)
            self.row = row_name(column, self.stage, config)
        except KeyError:
            self.promise = None
        self._gas = config["gradient_accumulation_steps"]
        # fp16's loss scale as DeepSpeed's scaler must move it (None: no fp16, or no longer
        # predictable: the ranks disagreed on a skip, or DeepSpeed raised at the minimum).
        self._scale = LossScaleModel.of(config, column) if config_dtype(config) == "fp16" else None
        self._trainable = set()
        self._pending_inputs = []  # the last forward's consumed input injections
        self._window = []  # (into, value, param) consumed by backwards since the last boundary
        self._twin_nonfinite = None  # the twin's say over the window (None: it does not follow)
        self._twin_followed = True
        self._micro_steps = 0
        self._boundary = False
        self._twin_norm = None  # the twin's 2-norm of the last boundary's gradients
        self._pending_norm = None  # the same, handed to the judgement of that step
        self._skipped = None  # every rank's skipped_steps at the last observation
        # The twin never skips: after a window the promise says to skip, its numbers are no
        # longer what the engine holds, and the scenario alone decides.
        self._twin_diverged = False

    # ---- events --------------------------------------------------------------------------

    def initialized(self, trainable):
        """A new engine: `trainable` is the names (the root's spelling) of the trainable
        parameters."""
        self._trainable = set(trainable)
        self._window, self._pending_inputs, self._micro_steps = [], [], 0
        self._twin_nonfinite, self._twin_followed, self._skipped = None, True, None
        self._twin_diverged = False

    def loaded(self):
        """A load restores `skipped_steps` from the checkpoint (runtime/engine.py:2960 (v0.14.5),
        :4593 (master)) and the scaler's state: the next step's count and scale are not judged,
        they become the new baseline."""
        self._skipped = "restored by a load"
        self._scale = None

    def forward(self, inputs):
        self._pending_inputs = [("input", v, "") for v in (inputs or {}).values()]

    def backward(self, through_engine, losses, gradients, twin_nonfinite):
        """A backward; `twin_nonfinite`: whether the twin's gradients of it held a NaN or inf
        on any rank (None: the twin does not follow)."""
        consumed = self._pending_inputs + [("loss", v, "") for v in (losses or {}).values()]
        consumed += [("gradient", v, name) for name, v in (gradients or {}).values()]
        self._pending_inputs = []
        if not through_engine:
            return
        self._window += consumed
        if twin_nonfinite is None:
            self._twin_followed = False
        else:
            self._twin_nonfinite = bool(self._twin_nonfinite) or twin_nonfinite

    def step(self, twin_norm=None):
        """A micro-step; `twin_norm`: the twin's 2-norm of the gradients its optimizer stepped
        with at a boundary (None: the twin does not follow, did not step, or I3 saw it part from
        the engine)."""
        self._micro_steps += 1
        self._boundary = self._micro_steps % self._gas == 0
        self._twin_norm = twin_norm if self._boundary else None

    # ---- the check -----------------------------------------------------------------------

    def observation(self, live, adapter):
        """This rank's view after an operation: None unless a step reached a boundary."""
        if not self._boundary or len(live) != 1:
            return None
        try:
            return adapter.overflow_state(live[0].engine)
        except Exception as e:  # noqa: BLE001 - reported by judge as not checked
            return {"unavailable": f"{type(e).__name__}: {e}"}

    def judge(self, index, op, everyone):
        """I11's findings after operation `index` from every rank's observation."""
        if not self._boundary:
            return []
        self._boundary = False
        window, self._window = self._window, []
        twin, followed = self._twin_nonfinite, self._twin_followed
        self._twin_nonfinite, self._twin_followed = None, True
        if any(o is None or "unavailable" in o for o in everyone):
            reason = next((o["unavailable"] for o in everyone if o and "unavailable" in o),
                          "no single engine")
            self.tally.skip(INVARIANT, f"the engine's skip state cannot be read: {reason}")
            return []
        if self.promise is None:
            self.tally.skip(INVARIANT, f"no promise read for ZeRO stage {self.stage}")
            return []
        counts = [o["skipped_steps"] for o in everyone]
        if isinstance(self._skipped, str):  # restored by a load: this step is the new baseline
            self._skipped = counts
            self.tally.skip(INVARIANT, "skipped_steps restored by a load: the step after it is "
                                       "the new baseline")
            return []
        before = self._skipped or [0] * len(counts)
        self._skipped = counts
        skipped = [c - b for c, b in zip(counts, before)]
        use_twin = followed and twin is not None and not self._twin_diverged
        nonfinite = twin if use_twin else _scenario_says(window, self._trainable)
        self.tally.done(INVARIANT)
        findings = []
        self._pending_norm, self._twin_norm = self._twin_norm, None
        on = [r for r, s in enumerate(skipped) if s]
        if window:
            findings += self._norm(index, op, on, everyone)
        if on and len(on) != len(skipped):
            findings.append(self._finding(
                index, op, "skipped on some ranks only", "every rank or none", f"ranks {on}",
                f"the step was skipped on ranks {on} only (skipped_steps went from {before} to "
                f"{counts})"))
        findings += self._loss_scale(index, op, nonfinite, on, everyone)
        if not self.promise.skips:
            if window or on:
                self.tally.skip(INVARIANT, self._never_promised(window, on, everyone))
            return findings
        if nonfinite is None:
            self.tally.skip(INVARIANT, "an infinite input: whether the gradients overflow is not "
                                       "decided from the scenario without a twin that follows it")
            return findings
        broken = f"; not kept: {self.promise.broken_by}" if self.promise.broken_by else ""
        if nonfinite:
            self._twin_diverged = True
            missed = [r for r, s in enumerate(skipped) if s != 1]
            if missed:
                findings.append(self._finding(
                    index, op, "promised skip not made", "skipped_steps +1 on every rank",
                    {str(r): skipped[r] for r in missed},
                    f"{self.row} promises to skip a step whose gradients hold a NaN or inf "
                    f"({self.promise.where}{broken}); ranks {missed} did not (skipped_steps "
                    f"{before} -> {counts})"))
            for r, o in enumerate(everyone):
                if o["nonfinite"]:
                    findings.append(self._finding(
                        index, op, "non-finite state after a promised skip", "nothing non-finite",
                        o["nonfinite"],
                        f"after a step {self.row} promises to skip ({self.promise.where}), rank "
                        f"{r} holds non-finite values in {', '.join(o['nonfinite'])}"))
                    break
        elif on and config_dtype(self.config) != "fp16":  # fp16 may overflow by itself
            findings.append(self._finding(
                index, op, "skipped a clean step", "no skip", f"ranks {on}",
                f"no gradient of this window holds a NaN or inf, yet ranks {on} skipped it"))
        return findings

    def _loss_scale(self, index, op, nonfinite, on, everyone):
        """fp16: every rank's scale after this step against the scaler's rules."""
        if self._scale is None:
            return []
        if nonfinite:
            overflow = True
        elif on and len(on) != len(everyone):
            self._scale = None
            self.tally.skip(INVARIANT, "the loss scale: no longer predicted after ranks "
                                       "disagreed on a skip")
            return []
        else:
            overflow = bool(on)  # the skip every rank agrees on
        self._scale.update(overflow)
        if self._scale.raised:
            self._scale = None  # DeepSpeed raised: the step's own finding
            return []
        expected = self._scale.scale
        wrong = {str(r): o.get("loss_scale") for r, o in enumerate(everyone)
                 if o.get("loss_scale") != expected}
        if not wrong:
            return []
        return [self._finding(
            index, op, "loss scale", expected, wrong,
            f"after this step the fp16 loss scale is {wrong} where DeepSpeed's scaler rules "
            f"give {expected:g} (runtime/fp16/loss_scaler.py `update_scale`, "
            f"model/loss_scale.py)")]

    def _norm(self, index, op, on, everyone):
        """NORM_PROMISE after a ZeRO-3 step applied on every rank, against the twin's norm."""
        twin_norm = self._pending_norm
        if on or twin_norm is None or self.stage != 3:
            return []
        reported = [o.get("norm") for o in everyone]
        if math.isfinite(twin_norm):
            bound = NORM_TOLERANCE * twin_norm
            wrong = [r for r, n in enumerate(reported)
                     if n is None or not abs(n - twin_norm) <= bound]
            expected = f"{twin_norm!r} (the twin's, within {NORM_TOLERANCE:g} relative)"
        else:
            wrong = [r for r, n in enumerate(reported) if n is None or math.isfinite(n)]
            expected = f"non-finite (the twin's 2-norm is {twin_norm!r})"
        if not wrong:
            return []
        return [self._finding(
            index, op, "reported gradient norm", expected, {str(r): reported[r] for r in wrong},
            f"after a step applied on every rank, ranks {wrong} report a gradient norm of "
            f"{', '.join(_show(reported[r]) for r in wrong)}; {NORM_PROMISE}, here "
            f"{expected}")]

    def _never_promised(self, window, on, everyone):
        what = sorted({into for into, _, _ in window}) or ["none"]
        held = sorted({f for o in everyone for f in o["nonfinite"]})
        norms = sorted({_show(o.get("norm")) for o in everyone})
        return (f"never promised ({self.row}: {self.promise.where}); injected: "
                f"{', '.join(what)}; skipped on {'ranks ' + str(on) if on else 'no rank'}; "
                f"non-finite in {', '.join(held) or 'nothing'}; reported norm {', '.join(norms)}")

    def _finding(self, index, op, attribute, expected, actual, message):
        return Finding(invariant=INVARIANT, op_index=index, op=op, attribute=attribute,
                       expected=expected, actual=actual, message=message)


def _show(value):
    if value is None:
        return "none"
    return "nan" if value != value else f"{value:g}"
