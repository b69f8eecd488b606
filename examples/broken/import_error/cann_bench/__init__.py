"""Broken on purpose: importing cann_bench fails."""

raise ImportError("libcust_opapi.so: cannot open shared object file: No such file or directory")
