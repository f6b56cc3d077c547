"""The dense-twin form of a repro script, for I3 and for I6 after a load (the script-size budget: 250
code lines): training through the root's engine checked against a dense twin, a copy of the model
trained as data parallelism trains WORLD_SIZE copies.

The script builds the model, copies it (the twin), initializes the root with the user's optimizer
(under --plain, repro_runtime.DataParallelEngine: plain PyTorch's data parallelism), and runs each
operation on both: after a forward this rank's loss must equal the twin's; after the initialize and
every step (I3), and right after a load (I6), each parameter, gathered whole from the ranks'
partitions, must equal the twin's bit for bit. A save is DeepSpeed's save_checkpoint beside the
twin's snapshot; a load is load_checkpoint with the scenario's tag and options beside the twin
loading the snapshot of the save the load names. The twin is repro_runtime.Twin: DeepSpeed's rules
(each rank's gradient / N, summed in rank order; a parameter without gradient stepped with zeros)
or, under --plain, plain PyTorch's; either clips by CONFIG's gradient_clipping as ZeRO-3 clips (so
does --plain's engine); its tests show it equal to the replay's twin.DenseTwin.

What it takes: gradient_accumulation_steps 1, at most 2 ranks (where the replay's I3 is exact), ZeRO
stage 3, eager construction, one initialize (the root's, with the user's optimizer, after the
user's own writes), then training, the user's writes, saves, and loads into the same world of a
save made before; the finding at an operation. Other I3 and I6 findings keep their minimal
scenario and replay command.
"""

from ..model import tree, twin
from ..scenario import schema
from . import repro_runtime
from .repro_straight import settings_section, training_section
from .script_parts import (TWIN_INVARIANTS, build_section, comment, copied_section, fitted,
                           header_section, names_used, optimizer_source, user_optimizer_source,
                           verdict_section, without_unused, write_block)

_WRITES = schema.some("ops", "set_attr", "del_attr")
_TRAINING = schema.some("ops", "forward", "backward", "step", "zero_grad")
_CHECKPOINTS = schema.some("ops", "save", "load")
MAX_WORLD = 2


def fits(plan, target, stage):
    """Whether the scenario and the I3 or I6 target take the dense-twin form (the module's rules)."""
    s, ops = plan.scenario, plan.scenario.ops
    first = next((i for i, op in enumerate(ops) if op.op == "initialize"), None)
    return (target["invariant"] in TWIN_INVARIANTS and target.get("op_index") is not None
            and stage == 3
            and s.world_size <= MAX_WORLD and s.config.get("gradient_accumulation_steps", 1) == 1
            and not twin.bf16_enabled(s.config)  # the script's twin computes fp32
            and s.construct == "eager" and first is not None
            and ops[first].target == "" and ops[first].optimizer == "same"
            and ops[first].config_error is None
            and all(op.op in _WRITES for op in ops[:first])
            and all(op.op in _WRITES + _TRAINING + _CHECKPOINTS for op in ops[first + 1:])
            and all(op.op != "load" or (not op.world_size and _saved_by(ops, i) is not None)
                    for i, op in enumerate(ops))
            and any(p.requires_grad for p in plan.built.root.parameters()))


def _saved_by(ops, load_index):
    """The index of the save a load at `load_index` reads (its tag's last, or the last), or None."""
    tag = ops[load_index].tag
    return next((i for i in range(load_index - 1, -1, -1) if ops[i].op == "save"
                 and (tag is None or ops[i].tag == tag)), None)


def text(plan, target, script_name, stage, produced_on):
    routes = any(op.op == "forward" and op.route for op in plan.scenario.ops)
    plan.features = str(plan.scenario.features)
    plan.torch_sequential = not routes  # route-taking classes only where an MoE takes a route
    settings = settings_section(plan, stage) + (
        '\nWORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))  # the twin reduces over as many')
    if any(op.op == "save" for op in plan.scenario.ops):
        settings += ('\n# DeepSpeed saves and loads here (one folder for every rank; --plain keeps its '
                     'saves in memory);\n# saves[op]: what the twin held at each save.\n'
                     'CHECKPOINTS, saves = os.path.abspath("checkpoints"), {}')
    build = build_section(plan, (), placement=False) + "\n\n" + "\n".join([
        "# The dense twin: a copy of the model as built, trained as data parallelism trains",
        "# WORLD_SIZE copies (under --plain by plain PyTorch's rules, else by DeepSpeed's).",
        "twin_model = copy.deepcopy(model)"])
    steps = [settings, build + "\n\n" + _operations(plan, target, routes), verdict_section(target)]
    used = names_used("\n".join(steps))
    copied = [copied_section("the model's classes", tree, used),
              copied_section("failures, the checks, the dense twin and the verdict", repro_runtime,
                             used, forms=_forms(plan.scenario))]
    body = without_unused(steps[:1] + copied + steps[1:])
    sections = [header_section(plan, target, script_name, "\n".join(body), stage,
                               produced_on)] + body
    return "\n\n\n".join(s.strip("\n") for s in sections if s) + "\n"


def _forms(scenario):
    """The runtime's simpler forms this script copies: no clip where the scenario clips nothing."""
    return {} if scenario.config.get("gradient_clipping", 0.0) > 0 else dict(
        repro_runtime.NO_CLIP_FORMS)


def _operations(plan, target, routes):
    """Each operation up to the finding's, on the engine and the twin, with the I3 checks."""
    ops, lines = plan.scenario.ops, []
    forward = backward = False  # a loss pending; a backward since the last step
    for i, op in enumerate(ops[:target["op_index"] + 1]):
        lines.append("")
        if op.op == "initialize":
            twin_optimizer = optimizer_source(plan.scenario, "trainable(twin_model)")
            lines += [comment(f"op {i}: initialize the root with the user's optimizer"),
                      fitted(f"engine, *_ = initialize(model, {user_optimizer_source(plan)}, "
                             f"CONFIG, DataParallelEngine)"),
                      "twin_model.to(engine.device)  # the twin computes where the engine does",
                      fitted(f"twin = Twin(twin_model, {twin_optimizer}, deepspeed=not PLAIN)"),
                      f"check_twin({i})"]
        elif op.op == "forward":
            route = f", RouteCursor({list(op.route)!r})" if routes else ""
            lines += [f"# op {i}: forward" + (f", route {list(op.route)}" if routes else ""),
                      f"x, y = micro_batch({i})",
                      f"loss = F.mse_loss(engine(x.to(engine.device){route}), y.to(engine.device))",
                      f"check_loss({i}, loss.item(), twin.forward({i}"
                      + (f", {list(op.route)!r}" if routes else "") + "))"]
            forward = True
        elif op.op in _TRAINING:
            block, forward, backward_after = training_section(i, op, forward, backward)
            ran = len(block) > 1  # not skipped (DeepSpeed's loop needs a forward, a backward)
            lines += block + ([f"twin.{op.op}()"] if ran else [])
            if op.op == "step" and ran:
                lines.append(f"check_twin({i})")
            backward = backward_after
        elif op.op == "save":
            tag = f", tag={op.tag!r}" if op.tag is not None else ""
            lines += [f"# op {i}: save" + (f" (tag {op.tag!r})" if tag else ""),
                      f"engine.save_checkpoint(CHECKPOINTS{tag})",
                      f"saves[{i}] = snapshot(twin.module, twin.optimizer)"]
        elif op.op == "load":
            options = ((f", tag={op.tag!r}" if op.tag is not None else "")
                       + ("" if op.optimizer_states else ", load_optimizer_states=False")
                       + (", load_module_only=True" if op.module_only else ""))
            keep = op.optimizer_states and not op.module_only
            lines += [f"# op {i}: load the save of op {_saved_by(ops, i)}" + (
                          "" if keep else ": the parameters only, the optimizer's state stays"),
                      "before = gathered(model)",
                      fitted(f"engine.load_checkpoint(CHECKPOINTS{options})"),
                      f"twin.load(saves[{_saved_by(ops, i)}]"
                      + ("" if keep else ", optimizer_states=False") + ")",
                      "# a value that is not the twin's may be another state's: which one",
                      f"known = {{f'the value of the save of op {{j}}': saves[j][0] for j in saves "
                      f"if j != {_saved_by(ops, i)}}}",
                      fitted(f"check_twin({i}, 'I6', dict(known, **{{'the value before the load': "
                             f"before}}))")]
            forward = False  # DeepSpeed's load drops what a forward left pending
        else:
            lines += write_block(plan, i, op)
    if target["op_index"] < len(ops) - 1:
        lines += ["", comment("what comes after the finding's operation is left out")]
    return "\n".join(lines)
