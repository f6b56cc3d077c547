"""What every repro script runs: failures, the I1, I2 and I5 checks, the --plain stand-ins, the
one-engine dense twin and the verdict. The rules they share with the replay are imported from
where they are defined, and copied from there too: the value rules (`same`, `show`:
model/values.py), the gradient reduction (model/twin.py), the I5 fingerprint and DeepSpeed's
refusal rule (oracles/fingerprint.py). Two rules have a second, compact form here, because the
script-size budgets have no room for the replay's: the seeded values, element by element (seeded.py's
functions copied would cost a script 20 to 40 lines), held to seeded.py bit for bit by
tests/test_repro_runtime.py; and I2's owner rule (an int attribute mod the world size) with the
placed-module lookup, 3 lines inline where oracles/oracles.py's PlacementOracle has them as methods
(+9 lines: a one-operation placement script would pass its 60).

Real, tested code (tests/test_repro_runtime.py) that repro_script.py and repro_straight.py copy
into a script with inspect.getsource, definition by definition, only the ones the script uses
and what they use (`closure` below), a general function's simpler form under the general name
where it does the same job (PLAIN_FORMS, ONCE_FORMS). The functions read the script's globals,
which are declared here with neutral values so that this module imports and its tests can set
them (SCRIPT_GLOBALS): `model`, `user_attrs` (module path, parameter name or "", attribute name)
-> the user's last write, `placed` path -> the module the user placed, `PLACEMENT_ATTR`,
`OWNERS`, `SCENARIO_WORLD_SIZE`, `PREFIX`, `PLAIN`, `SEED`, `RANK`, `BATCH`, `FEATURES`,
`CONFIG`, `WORLD_SIZE` and `twin` (a Twin, in the scripts that need the dense twin: I3, and I6
after a load; RouteCursor comes with tree.py's classes there). torch and the standard library
only: a script never imports zerocheck_ds.
"""

import ast
import copy
import functools
import importlib
import importlib.util
import inspect
import math
import os
import sys

import torch
import torch.nn.functional as F

from ..model.twin import clip_gradients, reduce_gradients
from ..model.values import ABSENT, same, same_plain, show, show_plain
from ..oracles.fingerprint import fingerprint, fingerprint_changes, is_refusal


ERRORS = (Exception, SystemExit)  # a library's sys.exit() is a failure to report, not our exit

# The script's globals (it defines its own; these let the module import and be tested).
model = None
user_attrs = {}
placed = {}
PLACEMENT_ATTR = None
OWNERS = {}
SCENARIO_WORLD_SIZE = 1
PREFIX = ""
PLAIN = False
SEED, RANK, BATCH, FEATURES = 0, 0, 1, 1
WORLD_SIZE = 1
twin = None
CONFIG = {}
failures = []  # (invariant, attribute, expected, actual, "where: text"), in the order seen
_reported = set()


def record_failure(invariant, op_index, attribute, expected, actual, text, once=None):
    """Records and prints a failure. `once` is for fail(), which reports a failure with that
    identity only once: a script where no check runs twice has this function as its fail()."""
    text = ("build/teardown" if op_index is None else f"op {op_index}") + f": {text}"
    failures.append((invariant, attribute, expected, actual, text))
    print(f"{PREFIX}FAILED {invariant} at {text}", flush=True)


def fail(*failure, once=None):
    """record_failure(), every time, or with an identity `once` the first time it is seen: a
    clobbered attribute stays clobbered, and is reported when it first appears (or changes)."""
    if once is None or once not in _reported:
        _reported.add(once)
        record_failure(*failure)


def op_failed(op_index, op, error):
    name = type(error).__name__
    fail("op", op_index, None, "no exception", name, f"{op} raised {name}: {error}")


def write_failed(op_index, name, error):
    fail("I1", op_index, name, "the write succeeds", type(error).__name__,
         f"the user's write of {name!r} raised {type(error).__name__}: {error}")


def skipped(op_index, why):
    print(f"{PREFIX}op {op_index}: skipped ({why})", flush=True)


def trainable(module):
    return [p for p in module.parameters() if p.requires_grad]


def check_user_attrs(op_index):
    """I1: every attribute the user wrote (or deleted) on the user's own model still holds the
    user's last write."""
    for (path, param, name), expected in user_attrs.items():
        try:
            module = model.get_submodule(path)
            value = getattr(module.get_parameter(param) if param else module, name, ABSENT)
            actual = None if same(expected, value) else show(value)
        except Exception as e:  # the object is gone, or an engine's descriptor raised on read
            actual = f"<reading it raised {type(e).__name__}: {e}>"
        if actual is not None:
            where = f"module {path!r}" + (f" parameter {param!r}" if param else "")
            fail("I1", op_index, name, show(expected), actual, f"{where} attribute {name!r}: "
                 f"expected {show(expected)}, got {actual}", once=(path, param, name, actual))


def check_owner_by_attr(op_index):
    """I2: the owner from the user's attribute equals the owner from the live module."""
    for path, original in placed.items():
        user_value = user_attrs.get((path, "", PLACEMENT_ATTR), ABSENT)
        try:
            live = model.get_submodule(path)
            value = getattr(live, PLACEMENT_ATTR, ABSENT) if live is original else None
            why = (f"live {PLACEMENT_ATTR}={show(value)}" if live is original
                   else f"the user's module at this path was replaced by a {type(live).__name__}")
        except Exception as e:  # the module is gone, or reading its attribute raised
            value, why = None, f"reading {PLACEMENT_ATTR} there raised {type(e).__name__}: {e}"
        # The policy: an expert's owner rank is its PLACEMENT_ATTR mod the scenario's world size.
        expected, actual = (v % SCENARIO_WORLD_SIZE if type(v) is int else None
                            for v in (user_value, value))
        if expected != actual:
            fail("I2", op_index, PLACEMENT_ATTR, str(expected), str(actual),
                 f"module {path!r}: owner rank {expected} (user's {PLACEMENT_ATTR}="
                 f"{show(user_value)}) became {actual} ({why})", once=(path, expected, actual))


def check_owner_by_map(op_index):
    """I2: which rank holds a module is not observable here; what the map promises the user is
    that each path still names the module they placed."""
    for path, original in placed.items():
        try:
            live = model.get_submodule(path)
            why = f"the user's module at this path was replaced by a {type(live).__name__}"
        except Exception as e:
            live, why = None, f"no module at this path any more: {type(e).__name__}"
        if live is not original:
            expected = f"rank {OWNERS[path]}, the user's module"
            fail("I2", op_index, None, expected, "None", f"module {path!r}: owner rank "
                 f"{expected} (placement map) became None ({why})", once=("I2", path))


def initialize(model, optimizer, config, stand_in=None):
    """deepspeed.initialize, with the environment it wants on one rank too (without a launcher's
    it goes looking for MPI; a launcher's values are kept). Under --plain a stand-in whose engine
    is `stand_in(model, optimizer)` (PlainEngine where the script trains), else the model."""
    if PLAIN:
        return (stand_in(model, optimizer) if stand_in else model), optimizer, None, None
    import deepspeed
    # Port 0: the one rank's store binds a free port, and no other rank has to find it.
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", **os.environ})
    return deepspeed.initialize(model=model, optimizer=optimizer, config=config)


class PlainEngine:
    """What a correct engine must look like under --plain: the user's model and optimizer."""
    device = torch.device("cpu")

    def __init__(self, module, optimizer):
        self.module, self.step, self.zero_grad = module, optimizer.step, optimizer.zero_grad

    def __call__(self, x):
        return self.module(x)

    def backward(self, loss):
        loss.backward()


class DataParallelEngine(PlainEngine):
    """PlainEngine over WORLD_SIZE processes, as plain PyTorch's data parallelism trains: each
    backward's gradients summed over the ranks (torch.distributed, Gloo), then / WORLD_SIZE, and
    accumulated into .grad until zero_grad drops them."""

    def __init__(self, module, optimizer):
        super().__init__(module, optimizer)
        self.optimizer, self.saved, self.latest = optimizer, {}, None
        self.zero_grad = lambda: optimizer.zero_grad(set_to_none=True)  # 1.13 zeroes by default
        # CONFIG's clip of the summed gradients before the step, as the twin clips (None: or).
        self.step = lambda: clip_configured(module.parameters()) or optimizer.step()
        if WORLD_SIZE > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("gloo")

    def save_checkpoint(self, folder, tag=None):
        """In memory (every rank holds the whole model): what a checkpoint must give back."""
        self.latest = tag if tag is not None else f"global_step{len(self.saved)}"
        self.saved[self.latest] = snapshot(self.module, self.optimizer)

    def load_checkpoint(self, folder, tag=None, load_optimizer_states=True,
                        load_module_only=False):
        restore(self.module, self.optimizer, self.saved[tag if tag is not None else self.latest],
                load_optimizer_states and not load_module_only)

    def __call__(self, *inputs):
        return self.module(*inputs)

    def backward(self, loss):
        params = [p for p in self.module.parameters() if p.requires_grad]
        for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
            if g is not None:
                if WORLD_SIZE > 1:
                    torch.distributed.all_reduce(g)
                g = g / WORLD_SIZE
                p.grad = g if p.grad is None else p.grad + g


class Twin:
    """The dense twin of a script that trains through the root's engine with
    gradient_accumulation_steps 1 (twin.py's DenseTwin for that case): every rank's micro-batch
    through one copy, each rank's gradient reduced as the engine reduces it (twin.py's
    reduce_gradients; DeepSpeed: a parameter without gradient stepped with zeros, gradients start
    afresh after each step, zero_grad changes nothing. Plain PyTorch: a parameter without gradient
    not stepped; zero_grad drops them), the optimizer stepping whole tensors. It computes where
    `module` is: the script puts it on the engine's device (an accelerator's arithmetic is not the
    CPU's: a twin elsewhere would part from a correct engine in the last bits)."""

    def __init__(self, module, optimizer, deepspeed):
        self.module, self.optimizer, self.deepspeed = module, optimizer, deepspeed
        self.device = next(module.parameters(), torch.zeros(0)).device
        self.params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.losses, self.reduced = [], {}

    def forward(self, op_index, route=None):
        """Every rank's loss of operation `op_index`, each forward taking `route` afresh (an MoE's;
        RouteCursor is the script's, from tree.py); returns this rank's (a float)."""
        batches = [(x.to(self.device), y.to(self.device))
                   for x, y in (micro_batch(op_index, r) for r in range(WORLD_SIZE))]
        self.losses = [F.mse_loss(self.module(x) if route is None
                                  else self.module(x, RouteCursor(route)), y) for x, y in batches]
        return self.losses[RANK].item()

    def backward(self):
        grads = [torch.autograd.grad(loss, [p for _, p in self.params], allow_unused=True)
                 for loss in self.losses]
        self.losses = []
        for i, (name, _) in enumerate(self.params):
            total = reduce_gradients([g[i] for g in grads], WORLD_SIZE, self.deepspeed)
            if total is not None:
                self.reduced[name] = total if name not in self.reduced else self.reduced[name] + total

    def step(self):
        with torch.no_grad():
            for name, p in self.params:
                p.grad = self.reduced.get(name, torch.zeros_like(p) if self.deepspeed else None)
            clip_configured(p for _, p in self.params)
        self.optimizer.step()
        for _, p in self.params:
            p.grad = None
        if self.deepspeed:
            self.reduced = {}

    def zero_grad(self):
        if not self.deepspeed:
            self.reduced = {}

    def load(self, saved, optimizer_states=True):
        """A load of `saved` (a snapshot): the values, and the optimizer's state unless not
        asked; what was reduced since the last step stays (a load restores neither)."""
        self.losses = []
        restore(self.module, self.optimizer, saved, optimizer_states)


def clip_configured(params):
    """The gradients of `params` clipped in place as CONFIG's gradient_clipping says, by
    DeepSpeed ZeRO-3's rule (twin.py's clip_gradients: the global norm of whole tensors in double,
    exact against DeepSpeed's per-partition sum at the 2 ranks a script twin runs). A non-finite
    norm is v0.14.5's (NaN reaches every gradient); master reads each bad ZeRO-3 sub-group's norm
    as 1 there instead (twin.py's clip_gradients with its groups), which a script does not follow."""
    with torch.no_grad():
        clip_gradients([p.grad for p in params if p.grad is not None],
                       CONFIG.get("gradient_clipping", 0.0) or 0.0)


def clip_off(params):
    """clip_configured where CONFIG clips nothing (gradient_clipping 0 or absent)."""


def snapshot(module, optimizer):
    """What a checkpoint holds: copies of the parameters' values and of the optimizer's state."""
    return copy.deepcopy(({name: p.detach() for name, p in module.named_parameters()},
                          optimizer.state_dict()))


def restore(module, optimizer, saved, optimizer_states=True):
    """Loads a snapshot: every parameter's value, and the optimizer's state where asked."""
    values, state = saved
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(values[name])
    if optimizer_states:
        optimizer.load_state_dict(copy.deepcopy(state))


def gathered(module):
    """{name: a copy of each parameter's whole value}. Under ZeRO-3 from the ranks' partitions
    (`ds_tensor`, all-gathered with plain torch.distributed and cut to the parameter's shape, as
    the replay assembles them), not with GatheredParameters, which would step into the engine's
    own prefetch bookkeeping between a forward and its backward. On the CPU, where the twin is,
    whatever device the engine keeps them on."""
    values = {}
    for name, p in module.named_parameters():
        shard = getattr(p, "ds_tensor", None)
        if shard is None:
            values[name] = p.detach().cpu().clone()
            continue
        parts = [torch.empty_like(shard) for _ in range(WORLD_SIZE)]
        torch.distributed.all_gather(parts, shard.detach().contiguous())
        values[name] = torch.cat(parts)[:p.ds_numel].reshape(p.ds_shape).cpu()
    return values


def check_loss(op_index, loss, expected):
    """I3: this rank's loss equals the dense twin's (both float32, bit for bit)."""
    if loss != expected:
        fail("I3", op_index, "loss", repr(expected), repr(loss),
             f"loss {loss!r} differs from the dense twin's {expected!r}")


def check_twin(op_index, invariant="I3", known=None):
    """I3 (I6 right after a load): every parameter (gathered whole) equals the dense twin's, bit
    for bit. `known`: {what: {name: value}} of other states (another save, the value before the
    load); a differing value that equals one is said to be it."""
    twins = dict(twin.module.named_parameters())
    for name, value in gathered(model).items():  # on the CPU, as gathered() gives them
        expected = twins[name].detach().cpu()
        if not torch.equal(value, expected):
            worst = (value - expected).abs().max().item()
            it = next((f"; it is {what}" for what, values in (known or {}).items()
                       if torch.equal(values[name].cpu(), value)), "")
            fail(invariant, op_index, "value", "the dense twin's value", "differs",
                 f"parameter {name!r} differs from the dense twin's (max abs {worst:.3g}; "
                 f"{value.flatten()[:3].tolist()} vs {expected.flatten()[:3].tolist()}){it}",
                 once=(invariant, name))


def seeded_tensor(seed, tag, key, shape, bound):
    """A float32 tensor of `shape` from the stream (seed, tag, key), scaled by `bound`: the rule
    of SCENARIO_FORMAT.md's "Numbers", element by element (seeded.py's bits, vectorised there)."""
    def splitmix64(z):
        z = (z + 0x9E3779B97F4A7C15) % 2**64
        z = (z ^ z >> 30) * 0xBF58476D1CE4E5B9 % 2**64
        z = (z ^ z >> 27) * 0x94D049BB133111EB % 2**64
        return z ^ z >> 31
    base = splitmix64(splitmix64(splitmix64(seed % 2**64) ^ tag) ^ key % 2**64)
    units = [((splitmix64(base + i * 0x9E3779B97F4A7C15) >> 40) - 2**23) / 2**23
             for i in range(math.prod(shape))]
    return (torch.tensor(units, dtype=torch.float64) * bound).to(torch.float32).reshape(shape)


def fill_parameters(module, seed):
    """Every parameter from its path's stream (tag 1, key FNV-1a 64 of the path; a shared one at
    its first path), bound float32(1 / sqrt(fan_in))."""
    with torch.no_grad():
        for path, param in module.named_parameters():
            key = 0xCBF29CE484222325
            for byte in path.encode("utf-8"):
                key = (key ^ byte) * 0x100000001B3 % 2**64
            fan = param.shape[1] if param.dim() >= 2 else param.shape[0] if param.dim() else 1
            bound = torch.tensor(1.0 / math.sqrt(max(fan, 1)), dtype=torch.float32).item()
            param.copy_(seeded_tensor(seed, 1, key, tuple(param.shape), bound))


def micro_batch(op_index, rank=None):
    """(input, target) of this rank's (or `rank`'s) micro-batch for operation `op_index` (tags 2
    and 3)."""
    key = op_index * 256 + (RANK if rank is None else rank)
    return tuple(seeded_tensor(SEED, tag, key, (BATCH, FEATURES), 1.0) for tag in (2, 3))


def probe_input(op_index):
    """The input of the no-gradient forward that checks training still runs (stream tag 4)."""
    return seeded_tensor(SEED, 4, op_index * 256 + RANK, (BATCH, FEATURES), 1.0)


def repeat_initialize(op_index, why, optimizers, again, forward):
    """I5, for an initialize a correct engine refuses (`why`): `again()`, the repeat, raises a
    refusal, changes nothing in the model or `optimizers`, and training's `forward(x)` still
    runs. Under --plain it is not called: refused, as a correct engine refuses it."""
    before, refusal = fingerprint(model, optimizers), PLAIN or None
    try:
        if not PLAIN:
            again()
            fail("I5", op_index, None, "refused", "accepted",
                 f"a repeated initialize was accepted ({why}); it must be refused")
    except ERRORS as e:
        refusal = e
        if not is_refusal(e):
            fail("I5", op_index, None, "an error saying 'already been initialized'",
                 type(e).__name__, f"a repeated initialize ({why}) failed with an error that is "
                 f"not a refusal: {type(e).__name__}: {e}")
    changes = fingerprint_changes(before, fingerprint(model, optimizers))
    if changes:
        fail("I5", op_index, None, "nothing changed", f"{len(changes)} change(s)",
             f"the {'accepted' if refusal is None else 'refused'} repeated initialize changed "
             f"{len(changes)} thing(s) in the model or optimizers, e.g. {changes[0]}")
    state = "repeated" if refusal is None else "rejected"
    try:  # a forward without gradients changes no state
        with torch.no_grad():
            forward(probe_input(op_index))
    except ERRORS as e:
        fail("I5", op_index, f"training still runs after a {state} initialize", "forward runs",
             "raised", f"training no longer runs after a {state} initialize: "
             f"{type(e).__name__}: {e}")


def repeat_initialize_unjudged(op_index, again, forward):
    """A repeated initialize where the finding is not I5's, run as the replay runs it: `again()`,
    the repeat (under --plain not called: refused, as a correct engine refuses it), then
    training's `forward(x)` without gradients. Whether the repeat is refused, changes nothing and
    leaves training running is I5's to judge, in a script of its own: what raises is printed,
    and is no failure here."""
    try:
        if not PLAIN:
            again()
    except ERRORS as e:
        print(f"{PREFIX}op {op_index}: the repeated initialize raised {type(e).__name__}: {e}",
              flush=True)
    try:  # a forward without gradients changes no state
        with torch.no_grad():
            forward(probe_input(op_index))
    except ERRORS as e:
        print(f"{PREFIX}op {op_index}: the forward after it raised {type(e).__name__}: {e}",
              flush=True)


def verdict(signature, invariant, attribute=None, actual=None, expected_start=""):
    """REPRODUCED `signature` (the first failure like the target) and exit 1, else NOT
    REPRODUCED `signature` and exit 0. A target field left None matches anything."""
    found = [f[2:] for f in failures if f[0] == invariant and attribute in (None, f[1])
             and actual in (None, f[3]) and f[2].startswith(expected_start)]
    print(PREFIX + ("REPRODUCED {}: expected {}, got {} ({})".format(signature, *found[0]) if found
                    else f"NOT REPRODUCED {signature}"), flush=True)
    # With torch.distributed up, skip its teardown at interpreter exit: it aborts (SIGABRT) when
    # the other rank has already gone, and the exit code must be the verdict's.
    (os._exit if torch.distributed.is_initialized() else sys.exit)(1 if found else 0)


def is_config_error(error):
    """DeepSpeed's refusal of a config it cannot use (deepspeed_adapter's rule, by the classes'
    names: the script imports none of them): its config checks' AssertionError, pydantic's
    ValidationError, DeepSpeedConfigError, or ZeRORuntimeException (a setting its ZeRO cannot run
    with the given optimizer)."""
    return any(c.__name__ in ("AssertionError", "DeepSpeedConfigError", "ZeRORuntimeException")
               or c.__name__ == "ValidationError" and c.__module__.startswith("pydantic")
               for c in type(error).__mro__)


def invalid_initialize(op_index, what, optimizers, attempt, forward):
    """I5, for an initialize given an invalid config (`what`: which setting), as the replay judges
    it: `attempt()` raises a configuration error, changes nothing in the model (its fingerprint,
    the parameters' values) or `optimizers`, and training's `forward(x)` still runs. Under --plain
    it is not called: refused, as a correct engine refuses it."""
    before = fingerprint(model, optimizers)
    values = {name: p.detach().clone() for name, p in model.named_parameters()}
    what, refused = f"an initialize with an invalid config ({what})", PLAIN
    try:
        if not PLAIN:
            attempt()
            fail("I5", op_index, "invalid config", "refused", "accepted", f"{what} was accepted")
    except ERRORS as e:
        refused = True
        if not is_config_error(e):
            fail("I5", op_index, "invalid config", "a configuration error", type(e).__name__,
                 f"{what} failed with {type(e).__name__}: {e}, not as a configuration error")
    changes = fingerprint_changes(before, fingerprint(model, optimizers)) + [
        f"parameter {name!r} values: changed" for name, p in model.named_parameters()
        if name in values and (p.shape != values[name].shape
                               or not torch.equal(p.detach(), values[name]))]
    if changes:
        fail("I5", op_index, "invalid config", "nothing changed", f"{len(changes)} change(s)",
             f"{what} changed the model or optimizers: {'; '.join(changes[:5])}")
    state = "rejected" if refused else "repeated"
    try:  # a forward without gradients changes no state
        with torch.no_grad():
            forward(probe_input(op_index))
    except ERRORS as e:
        fail("I5", op_index, f"training still runs after a {state} initialize", "forward runs",
             "raised", f"training no longer runs after a {state} initialize: "
             f"{type(e).__name__}: {e}")

# The script's own globals: never copied (the generator writes them).
SCRIPT_GLOBALS = {"model", "user_attrs", "placed", "PLACEMENT_ATTR", "OWNERS",
                  "SCENARIO_WORLD_SIZE", "PREFIX", "PLAIN", "SEED", "RANK", "BATCH", "FEATURES",
                  "CONFIG", "WORLD_SIZE", "twin"}
# A general function -> its simpler form, which a script copies under the general name where
# it does the same job there (source's `forms`). Where the user's values hold no tensor or list:
PLAIN_FORMS = {"same": "same_plain", "show": "show_plain"}
# Where no check runs twice (one operation, or no check), nothing is to be reported only once:
ONCE_FORMS = {"fail": "record_failure"}
# Where the scenario does not clip (CONFIG's gradient_clipping 0 or absent): the clip is nothing.
NO_CLIP_FORMS = {"clip_configured": "clip_off"}


def definitions(module, imported=True):
    """name -> (its source, the names it uses) for each top-level def, class and assignment of
    `module`, in the module's order (an assignment's trailing comment is not kept), and unless
    not `imported`, for each name it imports from a module of this package, that definition and
    what it uses there (a rule is written once, where it belongs, and copied from there)."""
    return dict(_definitions(module, imported))


@functools.lru_cache(maxsize=None)
def _definitions(module, imported):
    # Parsed once per module: a script's sections ask for the same modules again and again, and
    # each import followed parses its module's own imports (60 s a script uncached).
    text = inspect.getsource(module)
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and node.level:
            if imported:
                found.update(_imported_definitions(module, node))
            continue
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        else:
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        for name in names:
            found[name] = (ast.get_source_segment(text, node), used - {name})
    return found


def _imported_definitions(module, node):
    """definitions() of the names `from .x import ...` (node) takes from a module of the package,
    with what they use there; nothing for an imported module."""
    source = importlib.import_module(importlib.util.resolve_name(
        "." * node.level + (node.module or ""), module.__package__))
    theirs = definitions(source)
    wanted = closure([a.name for a in node.names if a.name in theirs], source)
    return {name: found for name, found in theirs.items() if name in wanted}


def closure(names, module=None, exclude=SCRIPT_GLOBALS, forms=None):
    """`names` and every name of `module` (default: this one) they use, `exclude` (the script's
    own globals) left out; a name in `forms` (general -> simpler form) stands for its form.
    Raises KeyError for a name the module does not define, ValueError for a form that is also
    used by its own name (the script holds it under the general one)."""
    module, forms = module or sys.modules[__name__], forms or {}
    found = definitions(module)
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in forms.values():
            general = next(g for g, form in forms.items() if form == name)
            raise ValueError(f"{name!r} is used by its own name and stands for {general!r} too")
        name = forms.get(name, name)
        if name in wanted or name in exclude:
            continue
        if name not in found:
            raise KeyError(f"{module.__name__} defines no {name!r}")
        wanted.add(name)
        todo.extend(n for n in found[name][1] if n in found)
    return wanted


def source(names, module=None, exclude=SCRIPT_GLOBALS, forms=None):
    """The text defining closure(names, module, exclude, forms), in the module's order, a form
    defined under its general name. Raises as closure() does."""
    wanted = closure(names, module, exclude, forms)
    general = {form: name for name, form in (forms or {}).items()}
    texts = []
    for name, (text, _) in definitions(module or sys.modules[__name__]).items():
        if name in general:
            text = text.replace(f"def {name}(", f"def {general[name]}(", 1)
        if name in wanted:
            texts.append(text)
    return "\n\n\n".join(texts)
