#!/usr/bin/env bash
# A build that fails the way a broken kernel does: the compiler's error, then a non-zero exit.
echo "[1/2] compiling csrc/softplus.cpp"
echo "csrc/softplus.cpp:42:5: error: 'vec_exp' was not declared in this scope" >&2
echo "compilation terminated." >&2
exit 1
