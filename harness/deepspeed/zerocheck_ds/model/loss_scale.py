"""DeepSpeed's fp16 loss scale, step by step, from the config and the steps' overflows (rule R6 of
docs/deepspeed-precision.md): what I11 holds the engine's scale to (oracles/overflow.py).

Read from `runtime/fp16/loss_scaler.py` per version:
- static when `fp16.loss_scale` > 0: the scale is that number and never moves
  (`CreateLossScaler`, :208-215 (v0.14.5), :304-310 (master));
- dynamic otherwise, `DynamicLossScaler.update_scale` (:170-203 (v0.14.5), :264-299 (master)):
  on an overflow, with hysteresis 1 (`delayed_shift == 1 or cur_hysteresis == 1`) the scale
  halves (not below `min_loss_scale`; at it DeepSpeed raises), else `cur_hysteresis` drops by 1;
  on a clean step `consecutive_hysteresis` refills the hysteresis, and the scale doubles (the
  hysteresis refilled) when v0.14.5's `(cur_iter - last_overflow_iter) % window == 0`, master's
  `stable = cur_iter - last_overflow_iter - 1` is > 0 and a multiple of the window;
- its start: master always `2**initial_scale_power` with the section's values or their defaults
  (16, window 1000, hysteresis 2, min 1: `runtime/precision_config.py:135-155,202-209`);
  v0.14.5 the same only when one of the five dynamic keys is written in the section, else the
  scaler's own defaults (2**32, window 1000, hysteresis 1, min 1:
  `runtime/config.py:214-240`, `loss_scaler.py:118-126`).
Torch-free.
"""

from dataclasses import dataclass

_DYNAMIC_KEYS = ("initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis",
                 "consecutive_hysteresis")


@dataclass
class LossScaleModel:
    scale: float
    dynamic: bool
    doubling: str  # "v0.14.5" or "master": when a clean step doubles
    window: int = 1000
    min_scale: float = 1.0
    delayed_shift: int = 1
    consecutive: bool = False
    cur_iter: int = 0
    last_overflow_iter: int = -1
    hysteresis: int = 1
    raised: bool = False  # an overflow at the minimum scale: DeepSpeed raises there

    @classmethod
    def of(cls, config, column):
        """The scaler DeepSpeed `column` builds for an fp16 `config`."""
        fp16 = config.get("fp16", {})
        static = fp16.get("loss_scale", 0)
        if static and static > 0:
            return cls(float(static), False, column)
        if column == "v0.14.5" and not any(k in fp16 for k in _DYNAMIC_KEYS):
            return cls(2.0 ** 32, True, column)
        shift = int(fp16.get("hysteresis", 2))
        return cls(2.0 ** fp16.get("initial_scale_power", 16), True, column,
                   window=int(fp16.get("loss_scale_window", 1000)),
                   min_scale=float(fp16.get("min_loss_scale", 1)), delayed_shift=shift,
                   consecutive=bool(fp16.get("consecutive_hysteresis", False)), hysteresis=shift)

    def update(self, overflow):
        """One optimizer step's update (`update_scale`), before the step is skipped or applied."""
        if not self.dynamic:
            return
        if overflow:
            if self.delayed_shift == 1 or self.hysteresis == 1:
                if self.scale == self.min_scale:
                    self.raised = True
                else:
                    self.scale = max(self.scale / 2.0, self.min_scale)
            else:
                self.hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive:
                self.hysteresis = self.delayed_shift
            since = self.cur_iter - self.last_overflow_iter
            doubles = (since % self.window == 0 if self.doubling == "v0.14.5"
                       else since - 1 > 0 and (since - 1) % self.window == 0)
            if doubles:
                if not self.consecutive:
                    self.hysteresis = self.delayed_shift
                self.scale *= 2.0
        self.cur_iter += 1
