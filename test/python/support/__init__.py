"""Helpers of the Python tests that are not tests themselves: oracles and writers shared by several
areas (lake_util, live_util, binding_util, cli_util, matrix_util), the fuzz's machinery (fuzz_*), and
the scripts the tests run as child processes by path (matrix_child, fuzz_worker, s3_server,
wheel_smoke).

Imported as `support.<module>`: pytest puts test/python on sys.path (the directory of its
conftest.py). A script run by path that needs test/python adds it to sys.path itself (fuzz_worker).
"""
