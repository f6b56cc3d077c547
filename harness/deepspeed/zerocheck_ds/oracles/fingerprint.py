"""I5's rules, which the replay and every repro script share: the fingerprint of a model and its
optimizers (what a repeated initialize must not change) and DeepSpeed's refusal of a repeated
initialize. Torch-free code over torch objects; repro scripts copy it (repro_runtime.definitions).
"""

import re


def fingerprint(root, optimizers):
    """Returns a comparable picture of the model and optimizers, never reading parameter data."""
    state = {}
    for path, module in root.named_modules():
        for name, value in vars(module).items():
            state[f"module {path!r} attribute {name!r}"] = _token(value)
    for name, param in root.named_parameters():
        for attr, value in vars(param).items():
            state[f"parameter {name!r} attribute {attr!r}"] = _token(value)
        # data_ptr, shape and device tell whether the storage was swapped, without reading it.
        state[f"parameter {name!r} storage"] = (param.data_ptr(), tuple(param.shape),
                                                str(param.device), str(param.dtype),
                                                param.requires_grad)
    for i, optimizer in enumerate(optimizers):
        if optimizer is None:
            continue
        label = f"optimizer {i} ({type(optimizer).__name__})"
        state[f"{label} param groups"] = tuple(
            (id(g), tuple(id(p) for p in g["params"]), g.get("lr")) for g in optimizer.param_groups)
        state[f"{label} state entries"] = len(optimizer.state)
    return state


def _token(value):
    # Containers nn.Module mutates in place (hooks, _parameters) keep their id; look inside.
    if isinstance(value, dict):
        return ("dict", id(value), tuple((repr(k), id(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, id(value), tuple(id(v) for v in value))
    return id(value)


def fingerprint_changes(before, after):
    """Returns every readable difference between two fingerprints: removed or changed in the
    order of `before`, then added."""
    return ([f"{key}: {'changed' if key in after else 'removed'}" for key in before
             if key not in after or after[key] != before[key]]
            + [f"{key}: added" for key in after if key not in before])


def is_refusal(error):
    """DeepSpeed's refusal of a repeated initialize: a ValueError or RuntimeError saying so (the
    replay's rule: deepspeed_adapter asks this). Anything else a repeated initialize raises is a
    crash, not a refusal: counting it as one would hide exactly the bug being hunted."""
    return (isinstance(error, (ValueError, RuntimeError))
            and re.search(r"already (been )?initiali[sz]ed", str(error), re.IGNORECASE) is not None)
