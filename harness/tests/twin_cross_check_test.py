"""ctest `twin_cross_check` (label integration): the C++ and Python dense twins agree bit for bit.

    twin_cross_check_test.py ZEROCHECK WORKDIR

One scenario means the same numbers in both languages (SCENARIO_FORMAT.md, "Numbers"): the same
initial parameters, the same micro-batches, and the same training arithmetic when the Python twin
(harness/deepspeed/zerocheck_ds/model/twin.py) follows the C++ engine's rules (twin.ZEROCHECK: sum the
ranks' gradients in rank order, divide once, accumulate until zero_grad; with bf16 parameters
DeepSpeed's dtypes and cast order where the versions differ as v0.14.5). For every scenario of
harness/tests/scenarios/twin/ (worlds 2, 3 and 4; fp32 and bf16) and for the exported ones whose
operations the driver below follows, `zerocheck replay --json --twin-numbers` prints the C++ twin's
losses and fp32 masters (the parameters themselves in fp32) after every operation as float32
bits; the Python twin must give the same bits.

Then the engine against DeepSpeed: where the two train alike (one engine, every step followed by
zero_grad, every parameter reached: `ENGINE_IS_DEEPSPEED` below), the Python twin under
DeepSpeed's stage-3 rules (each rank's gradient divided by W, then summed) gives the C++ engine's
bits too, at worlds 2 and 4: dividing by a power of two is exact, so dividing before or after the
sum is the same. The upstream ctests show DeepSpeed v0.14.5 and master equal that twin on
mlp_sgd_world2 (I3 at tolerance 0), so on it our engine and DeepSpeed hold the same parameters.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "deepspeed"))

import torch  # noqa: E402

from zerocheck_ds.replay import replay  # noqa: E402
from zerocheck_ds.replay.injection import Injections  # noqa: E402
from zerocheck_ds.model import seeded, twin
from zerocheck_ds.scenario.scenario import load_scenario  # noqa: E402
from zerocheck_ds.model.tree import RouteCursor, build_tree, run_module  # noqa: E402

SHARED = os.path.join(HERE, "scenarios", "twin")
# Exported scenarios the driver follows: one engine at a time, no checkpoint, no placement.
# Scenarios on which the C++ engine's rules and DeepSpeed's give the same numbers (see above).
ENGINE_IS_DEEPSPEED = ("mlp_sgd_world2.json", "mlp_adam_world4.json")
FOLLOWED_OPS = {"initialize", "forward", "backward", "step", "zero_grad", "set_attr", "del_attr",
                "release", "destroy", "inject"}


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def cxx_numbers(zerocheck, path):
    done = subprocess.run([zerocheck, "replay", path, "--json", "--twin-numbers"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        fail(f"zerocheck replay {path} exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(done.stdout)["twin"]


def bits(values):
    return [seeded.float32_bits(v) for v in values]


class LibTorchAdam(torch.optim.Optimizer):
    """Adam as LibTorch's C++ optimizer computes it (the C++ twin's): the first moment by mul_ and
    add_. Python's torch.optim.Adam has used lerp_ for it since torch 2.0, which rounds otherwise
    (one ulp here and there); on torch 1.13 the two are the same arithmetic. Only the optimizer's
    library differs, not a rule of either twin; DeepSpeed steps the user's Python optimizer, so the
    twin that checks DeepSpeed keeps torch.optim.Adam."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                exp_avg, exp_avg_sq, step = state["exp_avg"], state["exp_avg_sq"], state["step"]
                exp_avg.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(group["eps"])
                p.addcdiv_(exp_avg, denom, value=-group["lr"] / bias_correction1)


def cxx_optimizer(scenario, params):
    """The C++ twin's optimizer over `params`: its SGD is Python's, its Adam LibTorchAdam."""
    params = list(params)
    if scenario.optimizer == "adam" and params:
        return LibTorchAdam(params, scenario.lr)
    return replay.make_optimizer(scenario.optimizer, scenario.lr, params)


def python_numbers(scenario, rules=twin.ZEROCHECK):
    """The C++ interpreter's rules for its dense twin, followed op by op with the Python twin."""
    model = build_tree(scenario).root
    # The clip the scenario writes (none: off, the C++ engine's default); both twins clip alike.
    # bf16 in DeepSpeed's dtypes, where the versions differ as v0.14.5 does, as the C++ engine
    # does (docs/deepspeed-precision.md, section 5).
    rules = dataclasses.replace(rules, gradient_clipping=scenario.config.get("gradient_clipping", 0.0),
                                precision=twin.deepspeed_precision(scenario.config, "v0.14.5"))
    dense = twin.DenseTwin(
        model, scenario.world_size, rules,
        scenario.config["gradient_accumulation_steps"],
        lambda params: cxx_optimizer(scenario, params), run_module)
    live = False
    armed = Injections()  # the replay's arming: SCENARIO_FORMAT.md, "Injecting non-finite values"
    out = []
    for index, op in enumerate(scenario.ops):
        losses = []
        if op.op == "initialize" and not live:  # a live engine refuses any other initialize here
            dense.start(op.target)
            live = True
        elif op.op == "inject":
            armed.arm(op)
        elif op.op == "forward" and live:
            batches = [seeded.micro_batch(scenario.seed, index, r, scenario.batch, scenario.features)
                       for r in range(scenario.world_size)]
            for rank, value in armed.take_inputs().items():
                batches[rank] = (twin.replaced_first(batches[rank][0], value), batches[rank][1])
            losses = dense.forward(batches, lambda: RouteCursor(op.route))
        elif op.op == "backward" and live:
            # A backward that runs takes the armed loss and gradient; one with nothing to
            # back-propagate (no forward, or nothing trainable) is skipped and takes nothing.
            pending = dense.pending_losses()
            if pending and pending[0].requires_grad:
                factors, edits = armed.take_backward()
                dense.backward(loss_factors=factors, gradient_edits=edits)
            else:
                dense.drop_pending()
        elif op.op == "step" and live:
            dense.step()
        elif op.op == "zero_grad" and live:
            dense.zero_grad()
        elif op.op in ("release", "destroy") and live:
            live = False
        # The C++ twin prints its fp32 masters: with bf16 parameters they hold what the values
        # round away, so both twins' masters are compared (in fp32 they are the parameters).
        params = {} if dense.target is None else {
            name: bits(p.reshape(-1).tolist()) for name, p in dense.masters().items()}
        out.append({"index": index, "op": op.op, "losses": bits(losses), "params": params})
    return out


def compare(name, cxx, python):
    if len(cxx) != len(python):
        fail(f"{name}: {len(cxx)} operations from C++, {len(python)} from Python")
    for c, p in zip(cxx, python):
        where = f"{name}: after op {c['index']} ({c['op']})"
        if c["losses"] != p["losses"]:
            fail(f"{where}: losses {c['losses']} (C++) vs {p['losses']} (Python), float32 bits")
        if sorted(c["params"]) != sorted(p["params"]):
            fail(f"{where}: parameters {sorted(c['params'])} (C++) vs {sorted(p['params'])} (Python)")
        for param, values in c["params"].items():
            if values != p["params"][param]:
                first = next(i for i, (a, b) in enumerate(zip(values, p["params"][param])) if a != b)
                fail(f"{where}: parameter {param!r} element {first}: {values[first]:#010x} (C++) vs "
                     f"{p['params'][param][first]:#010x} (Python)")


def followed(scenario):
    """One engine, no checkpoint, no placement, and no loss scale: the Python twin follows no
    overflow protection (a static scale of 3 rounds the C++ twin's gradients otherwise)."""
    ops = [op.op for op in scenario.ops]
    return (set(ops) <= FOLLOWED_OPS and ops.count("initialize") == 1 and ops[0] == "initialize"
            and scenario.placement.kind == "none" and scenario.overflow_protection is None)


def main():
    zerocheck, work = sys.argv[1:3]
    torch.set_num_threads(1)  # the C++ twin's kernels run sequentially too (harness/world/world.h)
    os.makedirs(work, exist_ok=True)
    export = os.path.join(work, "export")
    subprocess.run([zerocheck, "export", "--cases", "80", "--seed", "3", "--world", "2", "--out", export],
                   check=True, capture_output=True)
    files = sorted(os.path.join(SHARED, n) for n in os.listdir(SHARED) if n.endswith(".json"))
    exported = sorted(os.path.join(export, "scenarios", n)
                      for n in os.listdir(os.path.join(export, "scenarios")) if n.endswith(".json"))
    checked = []
    for path in files + exported:
        scenario = load_scenario(path)
        if path in exported and not followed(scenario):
            continue
        name = os.path.relpath(path, work if path in exported else HERE)
        cxx = cxx_numbers(zerocheck, path)
        compare(name, cxx, python_numbers(scenario))
        steps = sum(1 for entry in cxx if entry["op"] == "step")
        print(f"ok: {name}: world {scenario.world_size}, {len(cxx)} ops ({steps} steps), bit for bit")
        checked.append(name)
        if os.path.basename(path) in ENGINE_IS_DEEPSPEED:
            compare(f"{name} under DeepSpeed's rules", cxx,
                    python_numbers(scenario, twin.deepspeed_training(3, "loss")))
            print(f"ok: {name}: DeepSpeed's stage-3 rules give the C++ engine's bits too")
    if len(checked) < len(files) + 3:
        fail(f"only {len(checked) - len(files)} exported scenarios were followed; expected at least 3")
    print(f"the C++ and Python dense twins agree bit for bit on {len(checked)} scenarios")
    return 0


if __name__ == "__main__":
    sys.exit(main())
