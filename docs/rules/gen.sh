#!/bin/bash
# Wrapper so the generator can run as a Bazel test (tests/bazel:rules_docs_test).
exec python3 "$(dirname "$0")/gen.py" "$@"
