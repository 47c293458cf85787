/* X-macro list of unit-test suites; each line names a function void test_<x>(vt_test *T). */
SUITE(ops_core)
SUITE(data)
SUITE(optim)
SUITE(metrics)
SUITE(safetensors)
SUITE(weights)
