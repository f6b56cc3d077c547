"""ctests `upstream_campaign_ds` (label upstream) and `upstream_campaign_ds_master`
(label upstream-master): a short `zerocheck upstream campaign` against DeepSpeed itself, one per
lane (issue 42, item 6; campaign_test.py checks the campaign's machinery on the faulty adapter).

    upstream_campaign_ds_test.py ZEROCHECK PYTHON TREE WORKDIR

About 90 seconds of random scenarios (seed 50, world 2, no write-up) on the tree, then:
  1. it ended cleanly (exit 0 or 1: 1 says an untriaged root cause, a finding, not a failure of
     the test) with campaign.json (its format, the tree's version, scenarios counted, the next
     draw after the last) and campaign.md listing every root cause;
  2. it went on replaying: at least MIN_SCENARIOS scenarios (a pool that stalls or restarts per
     scenario falls far below; ~60 a minute at world 2 on an idle 2-core machine);
  3. each root cause's triage is KNOWN_UPSTREAM.md's of now (the campaign read the table), each
     with its first scenario kept; at least one is triaged (random draws at world 2 meet the
     catalogued attribute collisions within a few scenarios: a campaign that triages nothing
     did not read the table);
  4. the untriaged ones are printed with their share of scenarios (k of n), for the triage.
"""

import os
import subprocess
import sys

from upstream_support import DS_PACKAGE, SKIP, check, read, versioned_arguments

MINUTES = "1.5"
MIN_SCENARIOS = 20
FORMAT = "zerocheck-campaign/1"


def main():
    args = versioned_arguments()
    if args is None:
        return SKIP
    zerocheck, python, tree, work, version = args
    out = os.path.join(work, "campaign")
    command = [zerocheck, "upstream", "campaign", "--python", python, "--deepspeed-tree", tree,
               "--world", "2", "--seed", "50", "--minutes", MINUTES, "--no-shrink",
               "--scenario-timeout", "90", "--out", out]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    print(done.stderr[-3000:])
    check(done.returncode in (0, 1), f"the campaign ended cleanly (exit {done.returncode})")

    state = read(os.path.join(out, "campaign.json"))
    check(state["format"] == FORMAT, f"campaign.json's format is {state['format']}")
    expected = "0.14" if version == "v0.14" else ""
    check(str(state.get("version", "")).startswith(expected) and state.get("version"),
          f"it names the version replayed ({state.get('version')})")
    n = state["scenarios"]
    check(n >= MIN_SCENARIOS and state["next"] == n,
          f"{n} scenarios in {state['seconds']} s (at least {MIN_SCENARIOS}), the next draw {n}")

    sys.path.insert(0, DS_PACKAGE)
    from zerocheck_ds.findings.root_causes import known_upstream  # the campaign's own table
    table = known_upstream()
    causes = state["causes"]
    wrong = [t for t, c in causes.items() if bool(c["triaged"]) != (t in table)]
    check(not wrong, f"each of {len(causes)} root causes triaged as KNOWN_UPSTREAM.md says: "
                     f"{wrong or 'yes'}")
    kept = [c["first_scenario"] for c in causes.values()
            if not os.path.exists(os.path.join(out, "scenarios", c["first_scenario"] + ".json"))]
    check(not kept, f"each root cause's first scenario is kept (missing: {kept or 'none'})")
    check(any(c["triaged"] for c in causes.values()),
          f"{sum(1 for c in causes.values() if c['triaged'])} root causes triaged")
    with open(os.path.join(out, "campaign.md"), encoding="utf-8") as f:
        page = f.read()
    missing = [t for t in causes if t not in page]
    check(not missing, f"campaign.md lists every root cause (missing: {missing or 'none'})")

    untriaged = sorted(((c["scenarios"], t) for t, c in causes.items() if not c["triaged"]),
                       reverse=True)
    print(f"{len(untriaged)} untriaged root cause(s) in {n} scenarios (exit "
          f"{done.returncode}), for KNOWN_UPSTREAM.md:")
    for k, title in untriaged:
        print(f"  {k} of {n} scenarios: {title}")
    print(f"OK ({version}): {n} scenarios, {len(causes)} root causes, "
          f"{len(causes) - len(untriaged)} triaged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
