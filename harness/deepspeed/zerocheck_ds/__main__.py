"""`python3 -m zerocheck_ds`: the in-process runner (suite/runner.py), or `suite` (the supervised
regression suite, suite/suite.py; `--corpus builtin` replays the shipped corpus), `campaign`
(scenarios drawn and replayed for a set time, suite/campaign.py), `merge` (shards' campaigns in
one folder, suite/campaign_merge.py), `worker` (one
rank of it, suite/worker.py), and `bisect` (the first bad commit of a repro script,
repro/bisect.py) with `bisect-step` (one commit of it); `--version`. The same as the installed
`zerocheck-ds` command: both are suite/console.py's."""

import sys

from .suite.console import run

sys.exit(run(sys.argv[1:]))
