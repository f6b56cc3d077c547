"""Finding signatures: one string per distinct bug, stable across runs and DeepSpeed versions.

A signature is built from what identifies a bug, never from what varies between runs: the
invariant, the operation kind, the attribute name (and whether it sat on a module or a
parameter), the node kind, and for exceptions the type with a normalised message (numbers,
addresses, paths and quoted values replaced by placeholders); for I3 what differs (a loss, a
parameter's value), for I4 the partition rule, for I6 the field (or the consolidated state dict)
and how it is wrong, for I9 the field the ranks disagree on; and the
ZeRO stage when the run replaced the scenarios' stage 3 (`--stage 1`: "... [ZeRO stage 1]"). Scenario names, op indices,
module paths, ranks and values are left out: the same bug found in two scenarios, or in two
DeepSpeed versions whose messages differ only in a line number, has one signature.
"""

import hashlib
import re

_MAX_MESSAGE = 120

_NORMALISE = (
    (re.compile(r"0x[0-9a-fA-F]+"), "ADDR"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.+-]+){2,}/?"), "PATH"),
    (re.compile(r"\btorch\.Size\(\[[^\]]*\]\)"), "SIZE"),
    (re.compile(r"[-+]?\b\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b"), "N"),
    # A shape's rank is the scenario's, not the bug's: (N,), (N, N, N) alike.
    (re.compile(r"\((?:N, )*N,?\)"), "SHAPE"),
    (re.compile(r"\s+"), " "),
)


def normalise_exception(text):
    """'IndexError: list index 3 out of range' -> 'IndexError: list index N out of range'."""
    if not text:
        return ""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    # A traceback ends with the exception line; a plain "Type: message" is one line.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    for pattern, placeholder in _NORMALISE:
        line = pattern.sub(placeholder, line)
    line = line.strip()
    return line if len(line) <= _MAX_MESSAGE else line[:_MAX_MESSAGE] + "…"


# The attribute of I5's findings about an initialize with a config_error (replay/lifecycle.py).
INVALID_CONFIG = "invalid config"


def signature(finding, stage=None):
    """Returns the signature of a finding (a dict as verdict files hold them) in a run of `stage`
    (None or 3: the scenarios' own)."""
    text = _signature(finding)
    return text if stage in (None, 3) else f"{text} [ZeRO stage {stage}]"


def _signature(finding):
    invariant = finding.get("invariant", "")
    op = finding.get("op") or "build"
    kind = finding.get("node_kind")
    where = f" on {kind} {'parameter' if finding.get('param') else 'module'}" if kind else ""
    attribute = finding.get("attribute")
    exception = normalise_exception(finding.get("exception"))
    if invariant in ("crash", "hang"):
        detail = finding.get("actual") or ""
        return f"{invariant} in {op}" + (f": {detail}" if detail else "")
    if invariant == "I1":
        text = f"I1 {op}: attribute {attribute!r}{where} not the user's"
        return text + (f" ({exception})" if exception else "")
    if invariant == "I2":
        by = f"by {attribute!r}" if attribute else "by map"
        return f"I2 {op}: placement {by}{where} changed"
    if invariant == "I5":
        if attribute == INVALID_CONFIG:  # an initialize with a config_error
            if finding.get("actual") == "accepted":
                return f"I5 {op}: an invalid config accepted"
            if exception:
                return f"I5 {op}: an invalid config failed, not as a configuration error: {exception}"
            return f"I5 {op}: an invalid config changed the model or optimizers"
        if attribute:  # "training still runs after a ... initialize"
            return f"I5 {op}: not true that {attribute}: {exception}"
        if exception:
            return f"I5 {op}: repeated initialize failed, not refused: {exception}"
        if finding.get("actual") == "accepted":
            return f"I5 {op}: repeated initialize accepted"
        return f"I5 {op}: repeated initialize changed the model or optimizers"
    if invariant == "I3":
        return f"I3 {op}: {attribute} differs from the dense twin{where}"
    if invariant == "I4":
        return f"I4 {op}: {attribute}{where}"
    if invariant == "I6":  # a field after a load, or a consolidated state dict after a save
        actual = finding.get("actual")
        how = exception or (actual if isinstance(actual, str) else "differs")
        if isinstance(actual, dict) and actual.get("same_as"):
            how = f"differs: it is {actual['same_as']}"
        return f"I6 {op}: {attribute}: {how}{where}"
    if invariant == "I9":
        return f"I9 {op}: ranks disagree on {attribute}" + (f" ({exception})" if exception else "")
    if invariant == "I10":
        if attribute == "outcome":
            return f"I10 {op}: the replay with the inert knobs drawn again ended in a {finding.get('actual')}"
        return f"I10 {op}: {attribute} change when the inert knobs change"
    if invariant == "I11":  # the part of the overflow contract broken (oracles/overflow.py)
        return f"I11 {op}: {attribute}"
    return f"{invariant} {op}: {exception or finding.get('message', '')}"


def slug(text):
    """A file name for a signature: readable prefix plus a hash that keeps them apart."""
    readable = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60].strip("-")
    return f"{readable}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:8]}"
