# The upstream suite as a package (harness/deepspeed/pyproject.toml, issue 43): included from
# harness/CMakeLists.txt.
#
# shipped_corpus_export: the corpus the package ships (zerocheck_ds/corpus/builtin) holds the
# fixed-seed export exactly as this build's `zerocheck export` writes it, with the options its
# corpus.json names (tests/test_package.py CorpusTest; skipped without ZEROCHECK_BIN, so a skip
# fails here, as in shared_fixtures_both_readers).
add_test(NAME shipped_corpus_export
         COMMAND ${ZEROCHECK_SYSTEM_PYTHON} -m unittest -v tests.test_package.CorpusTest
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/harness/deepspeed)
set_tests_properties(shipped_corpus_export PROPERTIES LABELS integration TIMEOUT 120
                     ENVIRONMENT "ZEROCHECK_BIN=$<TARGET_FILE:zerocheck>"
                     FAIL_REGULAR_EXPRESSION "skipped")
# upstream_package (DeepSpeed v0.14.5 on Debian 12's torch 1.13, label upstream) and
# upstream_package_master (master on torch 2.6, label upstream-master: the Debian 13 lane; skipped
# on torch 1.13): a fresh venv (--system-site-packages), `pip install` offline from a copy of
# harness/deepspeed, then, from a folder with no build folder, the CI recipe's command lines
# (harness/deepspeed/ci/deepspeed-zerocheck.yml, read from the file) at world 2 on a few scenarios
# of the shipped corpus: the base run gives the checkout's verdicts, the pull request's run (a new
# fault planted in a copy of the tree) exits 1 with that fault as the one new root cause against
# --baseline, and pytest's form fails its scenario with the finding's report
# (upstream_package_test.py). No C++: the build folder is never used. v0.14.5 on torch >= 2.6 is
# skipped as an environment limit (its checkpoint loads predate torch.load's weights_only=True).
foreach(variant IN ITEMS "v0.14.5;;upstream;110" "master-edaa722;_master;upstream-master;90")
  list(GET variant 0 tree)
  list(GET variant 1 suffix)
  list(GET variant 2 label)
  list(GET variant 3 cost)
  add_test(NAME upstream_package${suffix}
           COMMAND ${ZEROCHECK_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/upstream_package_test.py
                   ${ZEROCHECK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/../shared/deepspeed/${tree}
                   ${CMAKE_CURRENT_BINARY_DIR}/upstream_package${suffix})
  set_tests_properties(upstream_package${suffix} PROPERTIES LABELS ${label} TIMEOUT 500
                       SKIP_RETURN_CODE 77 COST ${cost})
endforeach()
