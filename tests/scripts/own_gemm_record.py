"""Every registered test keeps to the build tree's GEMM tuning record.

CMakeLists.txt (lazyrt_tests_keep_their_own_gemm_record) points each test's LAZYRT_GEMM_TUNING_FILE there: a
test without it would write its choices, timed beside the other tests, into the machine's record, which every
later program on the machine obeys. Names each test that lacks it. Usage: own_gemm_record.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

ctest, build_dir = sys.argv[1], sys.argv[2]
listing = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True,
                         timeout=120, check=True)
tests = json.loads(listing.stdout)["tests"]
if len(tests) < 100:
    sys.exit(f"only {len(tests)} tests registered in {build_dir}: not the whole suite")
expected = f"LAZYRT_GEMM_TUNING_FILE=set:{build_dir}/gemm_tuning-tests.txt"
missing = [t["name"] for t in tests
           if not any(p["name"] == "ENVIRONMENT_MODIFICATION" and expected in p["value"]
                      for p in t.get("properties", []))]
if missing:
    sys.exit(f"{len(missing)} of {len(tests)} tests would write the machine's GEMM tuning record:\n  "
             + "\n  ".join(missing))
print(f"all {len(tests)} tests keep to {build_dir}/gemm_tuning-tests.txt")
