"""`python3 -m zerocheck_ds`: the in-process runner (runner.py), or `suite` (the supervised
regression suite, suite.py) and `worker` (one rank of it, worker.py)."""

import sys


def _main(argv):
    if argv[:1] == ["suite"]:
        from .suite import main
        return main(argv[1:])
    if argv[:1] == ["worker"]:
        from .worker import main
        return main(argv[1:])
    from .runner import main
    return main(argv)


sys.exit(_main(sys.argv[1:]))
