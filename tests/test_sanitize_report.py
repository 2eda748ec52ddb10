"""The compute-sanitizer driver's parsing (tests/gpu/sanitize.py): errors are attributed to the
axe kernel they name, checks that failed or were not reached show in the table."""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("sanitize", os.path.join(HERE, "gpu", "sanitize.py"))
san = importlib.util.module_from_spec(spec)
spec.loader.exec_module(san)

LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at vcopy_kernel+0x70
=========     by thread (3,0,0) in block (7,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========
========= Error: Race reported between Write access at gemm_square_f16_row_kernel+0x1d0
=========     and Read access at gemm_square_f16_row_kernel+0x220 [4 hazards]
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void at::native::reduce_kernel<512, 1>(...)+0x90
=========
========= ERROR SUMMARY: 3 errors
========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""


def test_parse_report_attributes_errors_to_kernels():
    errors, summaries = san.parse_report(LOG)
    assert summaries == [3, 0]
    assert errors["vcopy"] == ["Invalid __global__ read of size 16 bytes"]
    assert errors["gemm_square_f16_row"][0].startswith("Error: Race reported")
    assert errors["(not axe)"] == ["Uninitialized __global__ memory read of size 4 bytes"]
    assert san.parse_report("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == ({}, [0])


def test_results_and_table():
    single = "vcopy      ok      0.50  exact\naxpy       FAIL    0.10  AssertionError: x\n3/4 ok on H200\n"
    dist = "check_x:dist_rs_w2     0  ok       1.0  fine\ncheck_x:dist_rs_w2     1  FAIL     1.0  bad\n"
    assert san.parse_results(single) == {"vcopy": "ok", "axpy": "FAIL"}
    assert san.parse_results(dist) == {"dist_rs_w2": "FAIL"}
    results = {"memcheck": {"vcopy": "ok", "axpy": "ok", "tma": "ok"}, "racecheck": {"vcopy": "ok", "axpy": "FAIL"}}
    errors = {"memcheck": {"vcopy": ["Invalid"]}, "racecheck": {}}
    text, clean = san.table(["axpy", "tma", "vcopy"], ["memcheck", "racecheck"], results, errors)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[1:]}
    assert rows == {"axpy": ["ok", "FAIL"], "tma": ["ok", "-"], "vcopy": ["1", "err", "ok"]}
    assert not clean
    ok = {"memcheck": {"vcopy": "ok"}}
    assert san.table(["vcopy"], ["memcheck"], ok, {"memcheck": {}}) == (f"{'kernel':12s}    memcheck\n{'vcopy':12s}          ok", True)


def test_a_later_row_replaces_an_earlier_one():
    """Merged runs: a re-run after a fix replaces the first result; ranks still combine."""
    assert san.parse_results("k  FAIL  1.0  x\nk  ok  1.0  y\n") == {"k": "ok"}
    assert san.parse_results("c:d  0  ok  1.0\nc:d  1  FAIL  1.0\nc:d  0  ok  1.0\n") == {"d": "FAIL"}


def test_host_api_error_codes_are_kept_apart():
    log = ("========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to \"invalid argument\" on CUDA API call "
           "to cuGetProcAddress_v2.\n=========     Saved host backtrace up to driver entry point at error\n"
           "========= ERROR SUMMARY: 1 error\n")
    errors, _ = san.parse_report(log)
    assert list(errors) == ["(host API: cuGetProcAddress_v2)"]
    text, clean = san.table(["k"], ["memcheck"], {"memcheck": {"k": "ok"}}, {"memcheck": errors})
    assert clean and "host API" not in text


def test_progress_lines_are_not_rows():
    assert san.parse_results("  dist_rs_w2: ok (0.3 s)\ncheck_x:dist_rs_w2     0  ok  1.0\n") == {"dist_rs_w2": "ok"}


def test_other_libraries_reports_are_listed_not_judged():
    errors = {"racecheck": {"(not axe)": ["Error: Race reported between Read access at nvjet_sm90"]}}
    text, clean = san.table(["k"], ["racecheck"], {"racecheck": {"k": "ok"}}, errors)
    assert clean and "(not axe)" in text and "1 err" in text


def test_a_kernel_named_otherwise_is_attributed_to_its_artifacts(tmp_path):
    """An artifact whose launch.json names another kernel (a case's artifact holding a shared
    kernel) gets that kernel's errors, all of its holders when several; unknown kernels stay
    "(not axe)"."""
    import json
    for art, kernel in (("moeop_a_combine", "moe_combine_bfloat16_kernel"), ("moeop_b_combine", "moe_combine_bfloat16_kernel"),
                        ("vcopy", "vcopy_kernel"), ("empty", None)):
        (tmp_path / art).mkdir()
        if kernel:
            (tmp_path / art / "launch.json").write_text(json.dumps({"kernel": kernel}))
    known = san.kernel_owners(str(tmp_path))
    assert known["moe_combine_bfloat16"] == "moeop_a_combine|moeop_b_combine" and known["vcopy"] == "vcopy"
    log = ("========= Uninitialized __global__ memory read of size 16 bytes\n"
           "=========     at moe_combine_bfloat16_kernel+0x170\n"
           "========= Invalid __global__ read of size 4 bytes\n=========     at other_kernel+0x10\n"
           "========= ERROR SUMMARY: 2 errors\n")
    errors, _ = san.parse_report(log, known)
    assert errors == {"moeop_a_combine|moeop_b_combine": ["Uninitialized __global__ memory read of size 16 bytes"],
                      "(not axe)": ["Invalid __global__ read of size 4 bytes"]}
