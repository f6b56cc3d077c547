"""`python3 -m zerocheck_ds`: the in-process runner (suite/runner.py), or `suite` (the supervised
regression suite, suite/suite.py), `worker` (one rank of it, suite/worker.py), and `bisect` (the
first bad commit of a repro script, repro/bisect.py) with `bisect-step` (one commit of it)."""

import sys


def _main(argv):
    if argv[:1] == ["suite"]:
        from .suite.suite import main
        return main(argv[1:])
    if argv[:1] == ["bisect"]:
        from .repro.bisect import main
        return main(argv[1:])
    if argv[:1] == ["bisect-step"]:
        from .repro.bisect import step_main
        return step_main(argv[1:])
    if argv[:1] == ["worker"]:
        from .suite.worker import main
        return main(argv[1:])
    from .suite.runner import main
    return main(argv)


sys.exit(_main(sys.argv[1:]))
