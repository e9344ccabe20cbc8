#!/bin/bash
echo "bazel coverage is not supported offline (see .bazelrc)" >&2
exit 1
