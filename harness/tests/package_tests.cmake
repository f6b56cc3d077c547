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
# upstream_package: a fresh venv (--system-site-packages), `pip install` offline from a copy of
# harness/deepspeed, then from an empty folder `zerocheck-ds suite --corpus builtin --only ...`
# and `pytest --zerocheck-corpus builtin` on v0.14.5 at world 2: the checkout's verdicts
# (upstream_package_test.py). No C++: the build folder is never used.
add_test(NAME upstream_package
         COMMAND ${ZEROCHECK_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/upstream_package_test.py
                 ${ZEROCHECK_SYSTEM_PYTHON} ${PROJECT_SOURCE_DIR}/../shared/deepspeed/v0.14.5
                 ${CMAKE_CURRENT_BINARY_DIR}/upstream_package)
set_tests_properties(upstream_package PROPERTIES LABELS upstream TIMEOUT 400
                     SKIP_RETURN_CODE 77 COST 90)
